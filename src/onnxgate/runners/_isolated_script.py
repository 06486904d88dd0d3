"""Run a model on a batch of feeds inside another ONNX Runtime's environment.

Imports only the standard library, NumPy, ONNX Runtime and its sibling ``_session.py`` (the one
settings applier; never the rest of onnxgate), so it runs in an isolated environment that holds
another release: ``python _isolated_script.py request answer``.
Request: {model, settings, feeds (npz path), keys, outputs (npz path)}, and for a model held only
in memory (a copy with every tensor exposed, a node replayed alone) {model_bytes, external_folder}:
the serialised model and the folder its external data lives in. Feeds are stored as
``<key>/<input>``, outputs are written as ``<key>/<output>``. The answer holds the version, the
settings the session applied, or a refusal ``{error, message, provider}``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort  # noqa: TID251  (runs inside the runtime under test)

if __package__:
    from onnxgate.runners import _session
else:  # run as a script: _session.py sits in this same folder
    import _session  # type: ignore[no-redef]


def run(request: dict) -> dict:
    """Create one session with the request's settings and run every sample."""
    answer: dict = {"version": ort.__version__, "available": ort.get_available_providers()}
    model, config = request["model"], {}
    if request.get("model_bytes"):
        with open(request["model_bytes"], "rb") as file:
            model = file.read()
        config = {_session.EXTERNAL_FOLDER: request["external_folder"]}
    try:
        session = _session.create(model, request["settings"], config=config)
    except _session.Refused as refused:
        return answer | refused.to_dict()
    answer["settings"] = _session.applied(session, request["settings"])
    names = [o.name for o in session.get_outputs()]
    outputs = {}
    with np.load(request["feeds"], allow_pickle=False) as archive:
        stored = {k: archive[k] for k in archive.files}
    for key in request["keys"]:
        prefix = f"{key}/"
        # strings cross as fixed-width unicode (no pickle); sessions take them as objects
        feeds = {
            k[len(prefix) :]: v.astype(object) if v.dtype.kind == "U" else v
            for k, v in stored.items()
            if k.startswith(prefix)
        }
        try:
            values = session.run(None, feeds)
        except Exception as err:  # ORT raises its own exception types
            answer |= {"error": "run", "key": key, "message": " ".join(str(err).split())}
            break
        for name, value in zip(names, values, strict=True):
            if isinstance(value, np.ndarray) and value.dtype != object:
                outputs[f"{key}/{name}"] = value
    np.savez(request["outputs"], **outputs)
    return answer


def main(request_path: str, answer_path: str) -> None:
    """Read the request, run it, write the answer."""
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    answer = run(request)
    with open(answer_path, "w", encoding="utf-8") as file:
        json.dump(answer, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
