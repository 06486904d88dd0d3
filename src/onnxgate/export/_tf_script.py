"""TensorFlow's side of ``export tf``: load a model, convert it every way, run it on feeds.

Runs inside TensorFlow's isolated environment (``onnxgate.runners.tf_python``), so it imports
only the standard library, NumPy, TensorFlow, Keras and tf2onnx, never onnxgate. It answers one
JSON request a line on stdin with one JSON answer a line on stdout (the protocol of
``onnxgate.runners.Channel``); fd 1 is pointed at stderr first, so what TensorFlow prints cannot
break it. Requests:

- ``{"op": "load", "source", "kind": "keras"|"saved_model", "custom_objects": [files]}``: the
  inputs (name, shape with None for a dynamic axis, dtype) and outputs, and the versions.
- ``{"op": "convert", "paths": [...], "opset", "folder"}``: one ONNX file per conversion path,
  or why it failed: the operators tf2onnx has no handler for, the node, the Keras layer that holds
  it and the opset from which tf2onnx has one.
- ``{"op": "run", "feeds": npz, "keys": [...], "outputs": npz}``: the model on each sample.
- ``{"op": "quit"}``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

STATE: dict[str, Any] = {}

_UNSUPPORTED = re.compile(r"Tensorflow op \[([^:\]]+): (\w+)\] is not supported")
_COUNTER = re.compile(r"Unsupported ops: Counter\((\{.*?\})\)")


class CustomObjectsError(Exception):
    """A file of custom objects failed to import (the parent blames that file, not the model)."""


def _versions() -> dict[str, str]:
    import keras
    import tensorflow as tf
    import tf2onnx

    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "tf2onnx": tf2onnx.__version__,
    }


def _import_file(path: str) -> None:
    """Import a file that defines (and registers) a model's custom Keras layers."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


def load(request: dict[str, Any]) -> dict[str, Any]:
    """Load the model once; its inputs and outputs."""
    import tensorflow as tf

    for path in request.get("custom_objects", []):
        try:
            _import_file(path)
        except Exception as err:  # the user's file may raise anything
            raise CustomObjectsError(f"{path}: {type(err).__name__}: {err}") from err
    source = request["source"]
    if request["kind"] == "keras":
        import keras

        model = keras.models.load_model(source, compile=False)
        inputs = [
            {"name": t.name, "shape": list(t.shape), "dtype": str(np.dtype(t.dtype))}
            for t in model.inputs
        ]
        outputs = list(getattr(model, "output_names", None) or [t.name for t in model.outputs])
        layers = [layer.name for layer in _all_layers(model)]
        STATE.update(model=model, kind="keras", layers=layers)
    else:
        loaded = tf.saved_model.load(source)
        if "serving_default" not in loaded.signatures:
            raise ValueError(
                f"{source} has no serving_default signature (it has "
                f"{', '.join(loaded.signatures) or 'none'})"
            )
        function = loaded.signatures["serving_default"]
        specs = function.structured_input_signature[1]
        inputs = [
            {
                "name": name,
                "shape": spec.shape.as_list() if spec.shape.rank is not None else None,
                "dtype": spec.dtype.as_numpy_dtype().dtype.name,
            }
            for name, spec in sorted(specs.items())
        ]
        structured = function.structured_outputs
        outputs = sorted(structured) if isinstance(structured, dict) else ["output_0"]
        STATE.update(model=loaded, function=function, kind="saved_model", layers=[])
    STATE.update(source=source, inputs=inputs, outputs=outputs)
    return {"inputs": inputs, "outputs": outputs, "versions": _versions()}


def _all_layers(model: Any) -> list[Any]:
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(_all_layers(layer))
    return found


def _specs() -> list[Any]:
    import tensorflow as tf

    return [tf.TensorSpec(i["shape"], i["dtype"], name=i["name"]) for i in STATE["inputs"]]


def _layer_of(node: str) -> str | None:
    """The Keras layer whose name scope holds a TensorFlow node (``functional_1/eig_1/Op``)."""
    layers = STATE.get("layers") or []
    for part in node.split("/"):
        for candidate in (part, re.sub(r"_\d+$", "", part)):
            if candidate in layers:
                return candidate
    return None


def _handler_opsets(op: str) -> list[int]:
    """The ai.onnx opsets at which tf2onnx has a handler for ``op`` (from the first)."""
    from tf2onnx import handler

    versions = handler.tf_op.get_opsets().get("", [])
    return [v for v, ops in enumerate(versions) if op in ops]


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _called(model: Any) -> None:
    """Call a loaded Keras model once, on zeros with dynamic axes at 1.

    Keras' own exporters refuse a model that "has never called" (a loaded MultiHeadAttention
    model, for one).
    """
    if STATE.get("called"):
        return
    zeros = [
        np.zeros([1 if d is None else d for d in i["shape"]], i["dtype"]) for i in STATE["inputs"]
    ]
    model(zeros[0] if len(zeros) == 1 else zeros, training=False)
    STATE["called"] = True


def _convert_one(path: str, opset: int, target: Path) -> None:
    import tensorflow as tf
    import tf2onnx

    model = STATE["model"]
    if STATE["kind"] == "keras" and path != "tf2onnx-keras":
        _called(model)
    if path == "tf2onnx-keras":
        tf2onnx.convert.from_keras(
            model, input_signature=_specs(), opset=opset, output_path=str(target)
        )
    elif path == "keras-onnx":
        model.export(str(target), format="onnx", opset_version=opset, verbose=False)
    elif path == "tf2onnx-saved-model":
        folder = STATE["source"]
        if STATE["kind"] == "keras":
            # beside the ONNX files, in the folder the parent removes: a model-sized SavedModel
            folder = str(target.with_suffix(".saved_model"))
            model.export(folder, format="tf_saved_model", verbose=False)
        from tf2onnx import tf_loader

        # what `python -m tf2onnx.convert --saved-model DIR --opset N` does
        graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
            folder,
            None,
            None,
            return_initialized_tables=True,
            return_tensors_to_rename=True,
        )
        with tf.device("/cpu:0"):
            tf2onnx.convert._convert_common(
                graph_def,
                name=Path(folder).name,
                opset=opset,
                input_names=inputs,
                output_names=outputs,
                initialized_tables=tables,
                tensors_to_rename=renames,
                output_path=str(target),
            )
    else:
        raise ValueError(f"unknown conversion path {path}")


def convert(request: dict[str, Any]) -> dict[str, Any]:
    """Every asked path, each to its own file; a failure is an answer, not an exception."""
    folder = Path(request["folder"])
    results = []
    for path in request["paths"]:
        target = folder / f"{path}.onnx"
        captured = _Captured()
        logger = logging.getLogger("tf2onnx")
        logger.addHandler(captured)
        started = time.perf_counter()
        result: dict[str, Any] = {"path": path}
        try:
            _convert_one(path, request["opset"], target)
        except Exception as err:  # the converters raise many unrelated types
            result["error"] = f"{type(err).__name__}: {err}"
            result["trace"] = traceback.format_exc()
        finally:
            logger.removeHandler(captured)
        result["seconds"] = round(time.perf_counter() - started, 3)
        text = "\n".join(captured.lines) + "\n" + result.get("error", "")
        unsupported = [
            {
                "node": node,
                "op": op,
                "layer": _layer_of(node),
                "opsets": _handler_opsets(op)[:1],
            }
            for node, op in dict.fromkeys(_UNSUPPORTED.findall(text))
        ]
        if not unsupported and _COUNTER.search(text):
            ops = re.findall(r"'(\w+)'", _COUNTER.search(text)[1])  # type: ignore[index]
            unsupported = [{"node": "", "op": op, "layer": None, "opsets": []} for op in ops]
        if unsupported:
            result["unsupported"] = unsupported
            result.setdefault(
                "error", f"unsupported ops: {', '.join(u['op'] for u in unsupported)}"
            )
        if "error" not in result and target.exists():
            result["file"] = str(target)
        elif "error" not in result:
            result["error"] = "the converter wrote no file"
        results.append(result)
    return {"candidates": results}


def run(request: dict[str, Any]) -> dict[str, Any]:
    """The model on every sample of the feeds archive, outputs by name."""
    import tensorflow as tf

    stored = {}
    with np.load(request["feeds"], allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    for key in request["keys"]:
        feeds = {i["name"]: arrays[f"{key}/{i['name']}"] for i in STATE["inputs"]}
        if STATE["kind"] == "keras":
            values = [tf.constant(feeds[i["name"]]) for i in STATE["inputs"]]
            got = STATE["model"](values[0] if len(values) == 1 else values, training=False)
        else:
            got = STATE["function"](**{k: tf.constant(v) for k, v in feeds.items()})
        if isinstance(got, dict):
            flat = [got[name] for name in sorted(got)]
        else:
            flat = tf.nest.flatten(got)
        for name, value in zip(STATE["outputs"], flat, strict=True):
            stored[f"{key}/{name}"] = np.asarray(value)
    np.savez(request["outputs"], **stored)
    return {"outputs": STATE["outputs"]}


HANDLERS = {"load": load, "convert": convert, "run": run}


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            document = HANDLERS[request["op"]](request)
        except Exception as err:  # answered, for the parent to word
            document = {
                "error": type(err).__name__,
                "message": str(err),
                "trace": traceback.format_exc(),
            }
        answers.write(json.dumps(document) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
