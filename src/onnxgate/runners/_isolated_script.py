"""Run a model on a batch of feeds inside another ONNX Runtime's environment.

Imports only the standard library, NumPy and ONNX Runtime (never onnxgate), so it runs in an
isolated environment that holds an older release: ``python _isolated_script.py request answer``.
Request: {model, providers, provider_options, level, feeds (npz path), keys, outputs (npz path)};
feeds are stored as ``<key>/<input>``, outputs are written as ``<key>/<output>``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort  # noqa: TID251  (runs inside the runtime under test)


def main(request_path: str, answer_path: str) -> None:
    """Create one session, run every sample, write the outputs and the answer."""
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    answer = {"version": ort.__version__, "available": ort.get_available_providers()}
    missing = [p for p in request["providers"] if p not in answer["available"]]
    if missing:
        answer |= {"error": "unavailable", "missing": missing}
    else:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel(request["level"])
        options = [request["provider_options"].get(p, {}) for p in request["providers"]]
        try:
            session = ort.InferenceSession(
                request["model"], so, providers=request["providers"], provider_options=options
            )
        except Exception as err:  # ORT raises its own exception types
            answer |= {"error": "session", "message": " ".join(str(err).split())}
        else:
            answer["session_providers"] = session.get_providers()
            names = [o.name for o in session.get_outputs()]
            outputs = {}
            with np.load(request["feeds"], allow_pickle=False) as archive:
                stored = {k: archive[k] for k in archive.files}
            for key in request["keys"]:
                prefix = f"{key}/"
                feeds = {k[len(prefix) :]: v for k, v in stored.items() if k.startswith(prefix)}
                try:
                    values = session.run(None, feeds)
                except Exception as err:  # ORT raises its own exception types
                    answer |= {"error": "run", "key": key, "message": " ".join(str(err).split())}
                    break
                for name, value in zip(names, values, strict=True):
                    if isinstance(value, np.ndarray) and value.dtype != object:
                        outputs[f"{key}/{name}"] = value
            np.savez(request["outputs"], **outputs)
    with open(answer_path, "w", encoding="utf-8") as file:
        json.dump(answer, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
