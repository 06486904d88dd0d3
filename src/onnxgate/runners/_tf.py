"""TensorFlow as a reference runner: ``tf:SAVED_MODEL_DIR``, ``tf:DIR#signature``, ``tf:FILE.keras``.

TensorFlow cannot share onnxgate's environment (``_tfenv.py``), so the model runs in a worker
process inside TensorFlow's isolated environment (``_tf_worker.py``, run by path), started once
per runner and spoken to through a ``Channel`` in the timing workers' protocol; tensors cross as
``.npz`` files. The worker stops on ``__exit__`` and when onnxgate dies (the end of its input,
and on Linux a parent-death signal).

The runner follows the ONNX model's signature: its inputs are the TensorFlow signature's inputs
by name (tf2onnx keeps them, sometimes with a ``:0`` suffix), its outputs the signature's outputs
by name, or by position when the counts match and the names do not (``info`` says so).

It is a ``TensorTap`` too. tf2onnx converts the frozen graph its own loader makes, and the ONNX
node outputs keep that graph's tensor names (``StatefulPartitionedCall/sequential/dense/MatMul:0``),
so the worker freezes the model the same way and fetches, in a ``tf.compat.v1.Session``, every
ONNX value name that exists in that graph; the others are not compared. Any tensor of that graph
can be fed, so ``sibling`` replays a node alone by feeding what it reads and fetching what it
writes, on TensorFlow's own kernels and weights.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np
import onnx

from onnxgate._native import native_step
from onnxgate.errors import ConfigError, InternalError, RunFailed, RuntimeEnvError
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners._base import Inference, RunnerInfo
from onnxgate.runners._channel import Channel
from onnxgate.runners._js import as_error, last_words
from onnxgate.runners._tfenv import (
    DEFAULT_TOOLCHAIN,
    KERAS_SUFFIXES,
    TfToolchain,
    tf_env,
    tf_python,
)

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("_tf_worker.py")
TIMEOUT = 900
"""Seconds the worker may take to answer one request (loading and freezing a large model)."""


def _source(spec: str) -> tuple[Path, str, str]:
    """``DIR#signature`` or ``FILE.keras`` as (path, kind, signature), checked on disk.

    Raises:
        ConfigError: the path is missing, is a folder without ``saved_model.pb``, or a file
            that is not a Keras file.
    """
    text, _, signature = spec.partition("#")
    path = Path(text).expanduser()
    usage = "Give tf:SAVED_MODEL_DIR (optionally #SIGNATURE) or tf:FILE.keras."
    if not text or not path.exists():
        raise ConfigError(f"TensorFlow model {text or spec!r} does not exist.", hint=usage)
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise ConfigError(
                f"{path} is not a SavedModel: it holds no saved_model.pb.",
                hint=usage,
            )
        return path.resolve(), "saved_model", signature
    if path.suffix.lower() not in KERAS_SUFFIXES:
        raise ConfigError(
            f"{path} is neither a SavedModel folder nor a Keras file (.keras, .h5).", hint=usage
        )
    if signature:
        raise ConfigError(
            f"tf:{spec} names signature {signature!r}; a Keras file has none.", hint=usage
        )
    return path.resolve(), "keras", ""


def _match(onnx_name: str, names: list[str]) -> str | None:
    """The TensorFlow name for an ONNX name: the same, or the same without ``:0``."""
    for candidate in (onnx_name, onnx_name.removesuffix(":0")):
        if candidate in names:
            return candidate
    return None


def declared_shapes(proto: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    """Each value's shape as the ONNX graph declares or infers it (None for a symbolic dim)."""
    try:
        with native_step("onnx shape inference"):
            graph = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # inference is a help for matching layouts, not a requirement
        log.debug("shape inference failed while reading TensorFlow tensors", exc_info=True)
        graph = proto.graph
    shapes: dict[str, tuple[int | None, ...]] = {t.name: tuple(t.dims) for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            dims = (d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            shapes[value.name] = tuple(dims)
    return shapes


def _fits(shape: tuple[int, ...], declared: tuple[int | None, ...]) -> bool:
    if len(shape) != len(declared):
        return False
    return all(d is None or d == s for s, d in zip(shape, declared, strict=True))


def in_onnx_layout(
    value: np.ndarray, declared: tuple[int | None, ...] | None, *, weight: bool = False
) -> Any:
    """A TensorFlow tensor in the ONNX value's layout, or None when it is another tensor.

    tf2onnx runs convolutions channels-first and keeps TensorFlow's names on their
    channels-last tensors: such a tensor is moved to channels-first when only that fits the
    declared shape, and a convolution kernel (``weight``) from TensorFlow's (spatial..., in, out)
    to ONNX's (out, in, spatial...). A tensor that fits no way was changed by the conversion
    beyond its layout: it is not compared. (When several fit, as with as many channels as rows
    and columns, the tensor is taken as it is.)
    """
    if declared is None or _fits(value.shape, declared):
        return value
    if value.ndim < 3:
        return None
    rank = value.ndim
    kernel = (rank - 1, rank - 2, *range(rank - 2))
    for moved in (np.moveaxis(value, -1, 1), *([value.transpose(kernel)] if weight else [])):
        if _fits(moved.shape, declared):
            return moved
    return None


class _Worker(Channel):
    """The worker process; answers back as GateErrors naming the model."""

    def __init__(
        self, label: str, progress: Callable[[str], None] | None, toolchain: TfToolchain
    ) -> None:
        python = tf_python(toolchain, progress=progress)
        env = tf_env()
        self.label = label
        try:
            super().__init__([str(python), "-X", "faulthandler", str(WORKER)], env)
        except OSError as err:
            raise RuntimeEnvError(
                f"cannot start TensorFlow's environment ({python}) for {label}: "
                f"{err.strerror or err}.",
                hint="Delete that environment folder so onnxgate builds it again.",
            ) from err

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One request's answer, or the GateError it is.

        Raises:
            RunFailed: the worker died or did not answer in time.
            GateError: the worker answered an error (its class kept).
        """
        op = request.get("op")
        try:
            line = self.exchange(request, TIMEOUT)
        except TimeoutError:
            self.kill()
            raise RunFailed(
                f"TensorFlow did not answer {op!r} on {self.label} within {TIMEOUT} s; onnxgate "
                "stopped it."
            ) from None
        if line is None:
            code = self.proc.wait()
            tail = " | ".join(last_words(self.stderr()))
            raise RunFailed(
                f"TensorFlow ended (exit code {code}) during {op!r} on {self.label}; its last "
                f"words: {tail or 'none'}",
                hint="TensorFlow crashed on this model; load it alone in TensorFlow's "
                "environment to see the trace.",
            )
        try:
            answer = json.loads(line)
            if "error" in answer:
                raise as_error(answer, self.label)
            return answer["ok"]
        except (ValueError, TypeError, KeyError) as err:
            raise InternalError(
                f"TensorFlow's worker answered {op!r} with {line[:200]!r}, which is not its "
                "protocol.",
                hint="This is a bug in onnxgate, not a verdict on the model; please report it.",
            ) from err


class TfRunner:
    """A TensorFlow SavedModel or Keras file, run by TensorFlow in its environment.

    A ``Runner`` and a ``TensorTap`` (see the module).

    Args:
        spec: ``SAVED_MODEL_DIR``, ``SAVED_MODEL_DIR#signature`` or ``FILE.keras`` (what follows
            ``tf:``).
        model: the ONNX model compared with it: its signature is followed, and its value names
            are the tensors ``infer_all`` looks for.
        progress: called with a line for slow steps (building TensorFlow's environment).

    Raises:
        ConfigError: the path is no SavedModel or Keras file.
    """

    def __init__(
        self,
        spec: str,
        model: LoadedModel,
        *,
        progress: Callable[[str], None] | None = None,
        toolchain: TfToolchain = DEFAULT_TOOLCHAIN,
    ) -> None:
        self.path, self.kind, self.wanted = _source(spec)
        self.spec = spec
        self.model = model
        self.progress = progress
        self.toolchain = toolchain
        self.name = f"tf:{spec}"
        self.signature = Signature.from_graph(model.proto.graph)
        self.loaded: dict[str, Any] = {}
        self._inputs: dict[str, str] = {}
        self._outputs: dict[str, str] = {}
        self._by_position = False
        self._worker: _Worker | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._owner: TfRunner | None = None
        self._shapes: dict[str, tuple[int | None, ...]] | None = None
        self._count = 0

    def __enter__(self) -> Self:
        if self._owner is not None:  # a sibling: its owner's worker is running
            return self
        self._tmp = tempfile.TemporaryDirectory(prefix="onnxgate-tf-")
        try:
            self._worker = _Worker(self.name, self.progress, self.toolchain)
            request = {"op": "load", "path": str(self.path), "kind": self.kind}
            self.loaded = self._worker.ask(request | {"signature": self.wanted})
            self._map()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _map(self) -> None:
        """ONNX input and output names to the TensorFlow signature's.

        Raises:
            ConfigError: an ONNX input has no TensorFlow input of its name, or the outputs
                match neither by name nor in number.
        """
        tf_inputs = [i["name"] for i in self.loaded["inputs"]]
        tf_outputs = [o["name"] for o in self.loaded["outputs"]]
        where = f"{self.path} (signature {self.loaded['signature']})"
        onnx_inputs = [s.name for s in self.signature.inputs]
        found = {name: _match(name, tf_inputs) for name in onnx_inputs}
        missing = [name for name, tf_name in found.items() if tf_name is None]
        if missing:
            raise ConfigError(
                f"{self.model.path} has input(s) {', '.join(missing)} that {where} does not "
                f"take: ONNX inputs {', '.join(onnx_inputs)}; TensorFlow inputs "
                f"{', '.join(tf_inputs)}.",
                hint="Compare against the SavedModel (and signature, tf:DIR#NAME) the ONNX "
                "model was converted from, or rename the ONNX inputs to the signature's.",
            )
        self._inputs = {k: v for k, v in found.items() if v is not None}
        onnx_outputs = [s.name for s in self.signature.outputs]
        outputs = {name: _match(name, tf_outputs) for name in onnx_outputs}
        if all(outputs.values()):
            self._outputs = {k: v for k, v in outputs.items() if v is not None}
        elif len(onnx_outputs) == len(tf_outputs):
            self._outputs = dict(zip(onnx_outputs, tf_outputs, strict=True))
            self._by_position = True
            log.warning(
                "%s: output names differ from %s's; matched by position: %s",
                self.model.path,
                where,
                ", ".join(f"{a} = {b}" for a, b in self._outputs.items()),
            )
        else:
            raise ConfigError(
                f"{self.model.path}'s outputs ({', '.join(onnx_outputs)}) match neither the "
                f"names nor the number of {where}'s ({', '.join(tf_outputs)}).",
                hint="Compare against the SavedModel (and signature) the ONNX model was "
                "converted from.",
            )

    def _ask(self, op: str, feeds: Mapping[str, Any], **request: Any) -> dict[str, np.ndarray]:
        owner = self._owner or self
        if owner._worker is None or owner._tmp is None:
            raise RuntimeError(f"{self.name} is used outside its `with` block")
        owner._count += 1
        folder = Path(owner._tmp.name)
        given, out = folder / f"feeds-{owner._count}.npz", folder / f"out-{owner._count}.npz"
        np.savez(given, **{k: np.asarray(v) for k, v in feeds.items()})
        owner._worker.ask({"op": op, "feeds": str(given), "out": str(out)} | request)
        with np.load(out, allow_pickle=False) as data:
            found = {name: data[name] for name in data.files}
        given.unlink()
        out.unlink()
        return found

    def input_specs(self) -> Signature:
        """The ONNX model's signature, which TensorFlow is compared against."""
        return self.signature

    def info(self) -> RunnerInfo:
        """TensorFlow's version, the model, its signature and how outputs were matched."""
        owner = self._owner or self
        versions = owner.loaded.get("versions") or {}
        settings: dict[str, Any] = {"model": str(self.path), "kind": self.kind}
        if owner.loaded:
            settings |= {
                "signature": owner.loaded["signature"],
                "keras": versions.get("keras"),
                "outputs matched": "by position" if owner._by_position else "by name",
            }
        return RunnerInfo(
            name=self.name,
            runtime="tensorflow",
            version=versions.get("tensorflow"),
            settings=settings,
        )

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The model's outputs under the ONNX names. Latency is 0: timing belongs to ``bench``."""
        if self._owner is not None:
            return Inference(self._lone(feeds), 0)
        given = {self._inputs[k]: v for k, v in feeds.items() if k in self._inputs}
        found = self._ask("run", given)
        outputs = {}
        for onnx_name, tf_name in self._outputs.items():
            if tf_name not in found:
                raise RunFailed(f"{self.name} returned no output {tf_name!r}.")
            outputs[onnx_name] = found[tf_name]
        return Inference(outputs, 0)

    @property
    def method(self) -> str:
        """How ``infer_all`` sees intermediate tensors."""
        return (
            f"{self.name} as the frozen graph tf2onnx converts, every ONNX value name fetched "
            "from it by tensor name in a TensorFlow session, channels-last tensors moved to "
            "the ONNX graph's channels-first layout (names it lacks, and tensors of another "
            "shape, are not compared)"
        )

    def _tf_name(self, onnx_name: str) -> str:
        owner = self._owner or self
        return owner._inputs.get(onnx_name) or owner._outputs.get(onnx_name) or onnx_name

    def _tensors(self, feeds: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        """The tensors of ``names`` (ONNX names) the frozen graph has, fed ``feeds``.

        Fetched tensors come back in the ONNX layout (``in_onnx_layout``); fed ones are moved
        back to TensorFlow's by the worker.
        """
        owner = self._owner or self
        if owner._shapes is None:
            owner._shapes = declared_shapes(owner.model.proto)
        wanted = {self._tf_name(name): name for name in names}
        given = {self._tf_name(k): v for k, v in feeds.items()}
        found = self._ask("tensors", given, names=list(wanted))
        weights = {t.name for t in owner.model.proto.graph.initializer}
        moved = {
            wanted[k]: in_onnx_layout(v, owner._shapes.get(wanted[k]), weight=wanted[k] in weights)
            for k, v in found.items()
        }
        return {name: value for name, value in moved.items() if value is not None}

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every value of the ONNX main graph that the frozen TensorFlow graph has, by name.

        Initializers too: tf2onnx names them after the graph's constants, so localisation
        compares a diverging node's weights with TensorFlow's.
        """
        graph = self.model.proto.graph
        values = [o for node in graph.node for o in node.output if o]
        names = list(dict.fromkeys([*values, *(t.name for t in graph.initializer)]))
        return {**feeds, **self._tensors(feeds, names)}

    def _lone(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        names = [o.name for o in self.model.proto.graph.output]
        return self._tensors(feeds, names)

    def sibling(self, model: LoadedModel) -> TfRunner:
        """The same TensorFlow graph cut to ``model``'s inputs and outputs (a node alone).

        Its ``infer`` feeds the frozen graph's tensors of the lone model's input names and
        fetches those of its outputs, in this runner's worker: TensorFlow's kernels and weights.
        """
        twin = TfRunner.__new__(TfRunner)
        twin.__dict__.update(self.__dict__)
        twin.model = model
        twin.signature = Signature.from_graph(model.proto.graph)
        twin._owner = self._owner or self
        twin._worker, twin._tmp = None, None
        return twin
