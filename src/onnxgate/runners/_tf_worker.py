"""TensorFlow's side of ``TfRunner``: a worker inside TensorFlow's isolated environment.

Run by path with that environment's Python (``python _tf_worker.py``), so it imports only the
standard library, NumPy, TensorFlow (with Keras and tf2onnx) and its stdlib-only sibling
``_protocol.py``: never the rest of onnxgate, which is not installed there. It speaks the timing
workers' protocol (one JSON request a line; ``quit`` or the end of input ends it, so it dies
with its parent's pipe). Tensors cross as ``.npz`` files named in the requests.

Requests:
- ``load`` {path, kind: saved_model | keras, signature}: the model; answers the versions, the
  signature used and its input and output names (with dtype and shape).
- ``run`` {feeds, out}: the model itself (the SavedModel's signature, the Keras model's call),
  fed by signature input name; writes its outputs by signature output name.
- ``tensors`` {feeds, names, out}: the frozen graph tf2onnx converts (its own loader:
  ``tf_loader.from_saved_model``, or ``from_function`` on the Keras model's traced call, as
  ``tf2onnx.convert.from_keras`` does), run in a ``tf.compat.v1.Session``. Feeds and fetches are
  tensor names of that graph, or the signature's names tf2onnx renames them to; any tensor can be
  fed, so a node is replayed alone by feeding what it reads. Writes the names found; answers
  which were missing.

Errors answer ``{"error": CLASS, "message": ...}`` with the GateError the parent raises:
``ConfigError`` for what the path or signature holds, ``RunFailed`` for a failed run,
``InternalError`` for a bug here.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

if __package__:
    from onnxgate.runners import _protocol
else:  # run as a script: _protocol.py sits in this same folder
    import _protocol  # type: ignore[no-redef]


class _Failure(Exception):
    def __init__(self, kind: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint


_CUSTOM = re.compile(r"Could not locate class '(\w+)'|Unknown layer: '(\w+)'")


def _words(error: BaseException) -> str:
    """An exception's message on one line, without TensorFlow's stack of graph frames."""
    text = " ".join(str(error).split("\n\n")[0].split())
    return f"{type(error).__name__}: {text[:600]}"


def _spec(name: str, tensor: Any) -> dict[str, Any]:
    shape = getattr(tensor, "shape", None)
    if hasattr(shape, "as_list"):  # a TensorFlow shape; Keras 3 gives a tuple
        shape = None if shape.rank is None else shape.as_list()
    dtype = getattr(tensor.dtype, "name", tensor.dtype)  # Keras 3 gives a string
    return {"name": name, "dtype": str(dtype), "shape": None if shape is None else list(shape)}


class _Worker:
    def __init__(self) -> None:
        self.tf: Any = None
        self.kind = ""
        self.path = ""
        self.signature = ""
        self.call: Any = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.graph: Any = None
        self.session: Any = None
        self.aliases: dict[str, str] = {}

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        import tensorflow as tf

        self.tf = tf
        self.kind, self.path = request["kind"], request["path"]
        if self.kind == "keras":
            answer = self._load_keras()
        else:
            answer = self._load_saved_model(request.get("signature") or "")
        import keras
        import tf2onnx

        versions = {"tensorflow": tf.__version__, "keras": keras.__version__}
        return answer | {"versions": versions | {"tf2onnx": tf2onnx.__version__}}

    def _load_saved_model(self, wanted: str) -> dict[str, Any]:
        tf = self.tf
        try:
            imported = tf.saved_model.load(self.path, tags=["serve"])
        except Exception as err:  # TensorFlow raises many kinds for an unreadable folder
            raise _Failure(
                "ConfigError", f"{self.path} cannot be loaded as a SavedModel: {_words(err)}"
            ) from None
        names = sorted(s for s in imported.signatures.keys() if not s.startswith("_"))
        if not names:
            raise _Failure("ConfigError", f"{self.path} has no serving signature")
        chosen = wanted or ("serving_default" if "serving_default" in names else names[0])
        if chosen not in names:
            raise _Failure(
                "ConfigError",
                f"{self.path} has no signature {chosen!r} (it has {', '.join(names)})",
            )
        self.signature = chosen
        function = imported.signatures[chosen]
        self._imported = imported  # keeps the variables the function reads alive
        specs = function.structured_input_signature[1]
        self.inputs = sorted(specs)
        self.outputs = sorted(function.structured_outputs)
        self.call = lambda feeds: function(**feeds)
        return {
            "signature": chosen,
            "signatures": names,
            "inputs": [_spec(n, specs[n]) for n in self.inputs],
            "outputs": [_spec(n, function.structured_outputs[n]) for n in self.outputs],
        }

    def _load_keras(self) -> dict[str, Any]:
        import keras

        try:
            model = keras.models.load_model(self.path, compile=False)
        except Exception as err:  # Keras raises many kinds for a file it cannot read
            custom = _CUSTOM.search(str(err))
            if custom is None:
                raise _Failure(
                    "ConfigError", f"{self.path} cannot be loaded as a Keras model: {_words(err)}"
                ) from None
            raise _Failure(
                "ConfigError",
                f"{self.path} holds custom Keras class {custom[1] or custom[2]}, which a "
                "reference cannot import",
                hint="Compare against its SavedModel instead: in TensorFlow's environment, with "
                "the layers imported, model.export(DIR, format='tf_saved_model'), then "
                "tf:DIR.",
            ) from None
        if not getattr(model, "inputs", None):
            raise _Failure(
                "ConfigError",
                f"{self.path} holds a Keras model whose inputs are unknown (a subclassed model "
                "never built); save a functional or Sequential model",
            )
        self.signature = "call"
        self.inputs = [t.name for t in model.inputs]
        names = list(getattr(model, "output_names", None) or [])
        if len(names) != len(model.outputs):
            names = [f"output_{i}" for i in range(len(model.outputs))]
        self.outputs = names
        self._model = model

        def call(feeds: dict[str, Any]) -> dict[str, Any]:
            values = model([feeds[n] for n in self.inputs], training=False)
            flat = values if isinstance(values, list | tuple) else [values]
            if isinstance(values, dict):
                flat = list(values.values())
            return dict(zip(self.outputs, flat, strict=False))

        self.call = call
        return {
            "signature": "call",
            "signatures": ["call"],
            "inputs": [_spec(t.name, t) for t in model.inputs],
            "outputs": [_spec(n, t) for n, t in zip(names, model.outputs, strict=True)],
        }

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        tf = self.tf
        feeds = _read(request["feeds"])
        try:
            values = self.call({k: tf.constant(v) for k, v in feeds.items()})
        except Exception as err:  # a model may raise anything
            raise _Failure("RunFailed", _words(err)) from None
        out = {k: np.asarray(v) for k, v in values.items()}
        np.savez(request["out"], **out)
        return {"outputs": list(out)}

    def _frozen(self) -> None:
        """The graph tf2onnx converts, imported for a v1 session (built once)."""
        if self.session is not None:
            return
        tf = self.tf
        from tf2onnx import tf_loader

        try:
            if self.kind == "keras":
                graph_def, aliases = self._frozen_keras(tf_loader)
            else:
                graph_def, inputs, outputs, renames = tf_loader.from_saved_model(
                    self.path,
                    None,
                    None,
                    tag=["serve"],
                    signatures=[self.signature],
                    return_tensors_to_rename=True,
                )
                aliases = {v: k for k, v in renames.items()}
        except Exception as err:  # tf2onnx's loader may raise anything
            raise _Failure(
                "RunFailed", f"tf2onnx could not freeze the graph of {self.path}: {_words(err)}"
            ) from None
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.aliases = aliases

    def _frozen_keras(self, tf_loader: Any) -> tuple[Any, dict[str, str]]:
        tf, model = self.tf, self._model
        signature = [tf.TensorSpec(t.shape, t.dtype, name=t.name) for t in model.inputs]

        @tf.function(input_signature=signature)
        def traced(*args: Any) -> Any:
            return model(list(args), training=False)

        concrete = traced.get_concrete_function()
        inputs = [t.name for t in concrete.inputs if t.dtype != tf.dtypes.resource]
        outputs = [t.name for t in concrete.outputs if t.dtype != tf.dtypes.resource]
        graph_def = tf_loader.from_function(concrete, inputs, outputs)
        aliases = dict(zip(self.inputs, inputs, strict=False))
        aliases.update(zip(self.outputs, outputs, strict=False))
        return graph_def, aliases

    def _tensor(self, name: str) -> Any:
        for candidate in (self.aliases.get(name, name), f"{name}:0"):
            try:
                return self.graph.get_tensor_by_name(candidate)
            except (KeyError, ValueError):
                continue
        return None

    def tensors(self, request: dict[str, Any]) -> dict[str, Any]:
        self._frozen()
        feeds = {}
        for name, value in _read(request["feeds"]).items():
            tensor = self._tensor(name)
            if tensor is None:
                raise _Failure("RunFailed", f"the frozen graph has no tensor {name!r} to feed")
            feeds[tensor] = _tf_layout(value, tensor.shape)
        found, missing = {}, []
        for name in request["names"]:
            tensor = self._tensor(name)
            if tensor is None or tensor.dtype.name in ("resource", "variant", "string"):
                missing.append(name)
            else:
                found[name] = tensor
        try:
            values = self.session.run(list(found.values()), feed_dict=feeds)
        except Exception as err:  # a model may raise anything
            raise _Failure("RunFailed", _words(err)) from None
        np.savez(request["out"], **dict(zip(found, values, strict=True)))
        return {"missing": missing}

    def failure(self, error: Exception, op: object) -> dict[str, Any]:
        """The answer for a failed request (see ``_protocol.serve``)."""
        if isinstance(error, _Failure):
            return {"error": error.kind, "message": error.message, "hint": error.hint}
        if isinstance(error, _protocol.UnknownRequest):
            return {"error": "InternalError", "message": f"the TensorFlow worker got an {error}"}
        where = traceback.extract_tb(error.__traceback__)[-1]
        return {
            "error": "InternalError",
            "message": f"the TensorFlow worker failed during {op!r}: {_words(error)} (at "
            f"{os.path.basename(where.filename)}:{where.lineno})",
        }


def _tf_layout(value: np.ndarray, shape: Any) -> np.ndarray:
    """A fed ONNX tensor moved to channels-last when only that fits the graph's tensor.

    tf2onnx runs convolutions channels-first under TensorFlow's tensor names.
    """
    if shape.rank is None or value.ndim < 3 or shape.is_compatible_with(value.shape):
        return value
    moved = np.moveaxis(value, 1, -1)
    return moved if shape.is_compatible_with(moved.shape) else value


def _read(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _die_with_parent() -> None:
    """Linux: be killed when onnxgate dies, even in the middle of a long run."""
    import ctypes
    import signal

    parent = int(os.environ.get("ONNXGATE_PARENT_PID") or 0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: the end of the input still ends the worker
        return
    if parent and os.getppid() != parent:  # the parent died before the signal was in place
        os._exit(128 + signal.SIGKILL)


def main() -> None:
    """Answer on a private copy of stdout, with fd 1 sent to stderr."""
    _die_with_parent()
    worker = _Worker()
    handlers = {"load": worker.load, "run": worker.run, "tensors": worker.tensors}
    _protocol.serve(sys.stdin, _protocol.private_stdout(), handlers, worker.failure)


if __name__ == "__main__":
    main()
