"""Export a TensorFlow SavedModel or a Keras file to ONNX every way that works; keep the best.

TensorFlow cannot live in onnxgate's environment (protobuf 7 against tritonclient's pin), so the
model is loaded, converted and run by ``_tf_script.py`` inside TensorFlow's isolated environment
(``onnxgate.runners.tf_python``), one process for the whole export. Up to three conversion paths
are tried:

- ``tf2onnx-keras``: ``tf2onnx.convert.from_keras`` on the loaded Keras model;
- ``tf2onnx-saved-model``: the SavedModel (a Keras file is exported to one first) through what
  ``python -m tf2onnx.convert --saved-model DIR`` does;
- ``keras-onnx``: Keras 3's own ``model.export(path, format="onnx")``.

Each file that converts is run by ONNX Runtime here against TensorFlow's outputs on the same
seeded inputs, with every dynamic axis (a batch, a sequence length) at both ends of its range and
between, by the same comparison as every parity check (``compare_runners``); the one with the
smallest maximum absolute error is kept (a tie: fewer nodes, then tf2onnx), and the report gives
every path's figures. An operator tf2onnx has no handler for is named with the Keras layer that
holds it and the opset from which tf2onnx converts it, if any.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
from pydantic import Field, field_validator

from onnxgate._fs import staged_file
from onnxgate._pathtext import shown
from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compare import CompareReport, compare_runners
from onnxgate.contract import Provenance, drop_stale_contract, opinion_from, write_contract
from onnxgate.data import Sample, feeds_digest, load_feeds
from onnxgate.errors import ConfigError, ExportError, ModelLoadError, RuntimeEnvError
from onnxgate.export._report import ExportReport, TfCandidate, export_lineage
from onnxgate.export._torch import (
    _check_runnable_here,
    _opset_for,
    parity_ranges,
    parity_samples,
    parse_dynamic,
)
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners import (
    DEFAULT_TOOLCHAIN,
    KERAS_SUFFIXES,
    Channel,
    Inference,
    RunnerInfo,
    TfToolchain,
    tf_env,
)
from onnxgate.settings import OpsLibraries, Part, SessionSettings, Tolerances

log = logging.getLogger(__name__)

TfPath = Literal["tf2onnx-keras", "tf2onnx-saved-model", "keras-onnx"]
PATHS: tuple[TfPath, ...] = ("tf2onnx-keras", "tf2onnx-saved-model", "keras-onnx")
"""Every conversion path, in the order a tie is broken (tf2onnx first)."""
TIMEOUT_S = 900
"""The longest one request to TensorFlow's process may take (a load, every conversion, a run)."""
EXAMPLE_SIZES = {"batch": 2, "other": 8}
"""The size a dynamic axis has in the synthesized example the parity ranges start from."""


class TfExportConfig(Part):
    """What ``export tf`` and ``export keras`` are asked to do with a model."""

    out: Path
    """The ``.onnx`` file to write."""
    format: Literal["auto", "keras", "saved_model"] = "auto"
    """What the source is: a Keras file (``.keras``, ``.h5``), a SavedModel folder, or either
    (told apart by the path)."""
    opset: int = Field(17, ge=1)
    runtime: str | None = None
    """Target ONNX Runtime release: the opset is capped at the highest it loads."""
    paths: tuple[TfPath, ...] = ()
    """The conversion paths to try (default: every one that applies to the source)."""
    dynamic: dict[str, dict[int, str]] = {}
    """Labels of the model's dynamic axes, ``{"tokens": {1: "seq"}}`` (``["tokens:1=seq"]``
    is read as well); axes with one label share a size. Unlabelled dynamic axes are ``batch``
    (axis 0) or ``INPUT_AXIS``. An axis the model fixes cannot be made dynamic here."""
    example_inputs: Path | None = None
    """An .npz of example inputs by input name: their shapes and value ranges (token ids) seed
    the parity inputs. Default: normal floats, integers 0 to 9, at batch 2 and other axes 8."""
    custom_objects: tuple[Path, ...] = ()
    """Python files that define and register (``keras.saving.register_keras_serializable``)
    the model's custom layers, imported before it is loaded."""
    tf_version: str = DEFAULT_TOOLCHAIN.tensorflow
    tf2onnx_version: str = DEFAULT_TOOLCHAIN.tf2onnx
    keras_version: str = DEFAULT_TOOLCHAIN.keras
    tolerances: Tolerances = Tolerances()
    """Tolerances and metrics of the parity check, recorded in the contract."""
    seed: int = 0
    """Seed of the parity inputs."""
    dims: dict[str, tuple[int, int]] = {}
    """The serving range of a dynamic axis label (``{"batch": (1, 64)}``), proven at both ends
    and between; labels left out: a batch 1 to 32, others 1 to 19."""
    contract: bool = True
    """Write the contract and golden samples beside the model."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries the parity check's ONNX Runtime session registers (a model
    converted with custom-domain operators, e.g. tf2onnx's onnxruntime-extensions string ops);
    the contract records them."""

    @field_validator("dynamic", mode="before")
    @classmethod
    def _dynamic(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            try:
                return parse_dynamic(value)
            except ConfigError as err:
                raise ValueError(err.message) from err
        return value

    @property
    def toolchain(self) -> TfToolchain:
        """The releases of TensorFlow's environment this export runs in."""
        return TfToolchain(self.tf_version, self.tf2onnx_version, self.keras_version)


class _Missed(Exception):
    def __init__(self, report: ExportReport) -> None:
        super().__init__(report.reason)
        self.report = report


class TfProcess:
    """TensorFlow's environment, one process answering ``_tf_script.py``'s requests."""

    def __init__(self, python: Path, source: Path) -> None:
        self.source = source
        script = Path(__file__).with_name("_tf_script.py")
        try:
            self.channel = Channel([str(python), "-X", "faulthandler", str(script)], tf_env())
        except OSError as err:
            raise RuntimeEnvError(f"cannot run {python}: {err.strerror}.") from err
        self.python = python

    def ask(self, request: Mapping[str, Any], what: str) -> dict[str, Any]:
        """One answer; RuntimeEnvError when the process dies or is silent."""
        try:
            line = self.channel.exchange(request, TIMEOUT_S)
        except TimeoutError:
            self.channel.kill()
            raise RuntimeEnvError(
                f"TensorFlow ({self.python}) took over {TIMEOUT_S} s {what}."
            ) from None
        if line is None:
            tail = [ln for ln in self.channel.stderr().splitlines() if ln.strip()][-3:]
            raise RuntimeEnvError(
                f"TensorFlow ({self.python}) died {what}: {' | '.join(tail)}",
                hint="-v shows its output; a crash inside TensorFlow's native code on this model "
                "is TensorFlow's bug.",
            )
        return json.loads(line)

    def close(self) -> None:
        self.channel.close()


class TfReference:
    """TensorFlow's outputs for given samples, computed in its environment, as a Runner."""

    def __init__(
        self,
        process: TfProcess,
        signature: Signature,
        tf_outputs: Sequence[str],
        name: str,
        version: str,
    ) -> None:
        self.process = process
        self.signature = signature
        self.tf_outputs = list(tf_outputs)
        self.name = name
        self.version = version
        self.computed: dict[str, dict[str, np.ndarray]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def input_specs(self) -> Signature:
        return self.signature

    def run(self, samples: Sequence[Mapping[str, Any]]) -> None:
        """Compute TensorFlow's outputs for all samples in one request."""
        todo = [dict(s) for s in samples if feeds_digest(s) not in self.computed]
        if not todo:
            return
        with tempfile.TemporaryDirectory(prefix="onnxgate-tf-run-") as tmp:
            keys = [f"s{i}" for i in range(len(todo))]
            np.savez(
                Path(tmp) / "feeds.npz",
                **{
                    f"{k}/{n}": np.asarray(v)
                    for k, f in zip(keys, todo, strict=True)
                    for n, v in f.items()
                },
            )
            answer = self.process.ask(
                {
                    "op": "run",
                    "feeds": str(Path(tmp) / "feeds.npz"),
                    "keys": keys,
                    "outputs": str(Path(tmp) / "outputs.npz"),
                },
                f"running {shown(self.process.source)}",
            )
            if answer.get("error"):
                raise ExportError(
                    f"TensorFlow cannot run {shown(self.process.source)} on the parity inputs: "
                    f"{answer['error']}: {_first(answer.get('message', ''))}",
                    hint=f"Give inputs it accepts with {setting('example_inputs', 'inputs.npz')} "
                    "(their shapes and value ranges seed the parity inputs).",
                )
            with np.load(Path(tmp) / "outputs.npz", allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        for key, feeds in zip(keys, todo, strict=True):
            self.computed[feeds_digest(feeds)] = {
                name: arrays[f"{key}/{name}"] for name in self.tf_outputs
            }

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        self.run([feeds])
        by_tf = self.computed[feeds_digest(feeds)]
        names = [o.name for o in self.signature.outputs]
        return Inference(dict(zip(names, by_tf.values(), strict=True)), 0)

    def info(self) -> RunnerInfo:
        return RunnerInfo(name=self.name, runtime="tensorflow", version=self.version)


def _first(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _source_kind(source: Path, config: TfExportConfig) -> Literal["keras", "saved_model"]:
    if not source.exists():
        raise ConfigError(f"{shown(source)} does not exist.", field="source")
    keras_file = source.is_file() and source.suffix.lower() in KERAS_SUFFIXES
    saved = source.is_dir() and (source / "saved_model.pb").exists()
    if config.format == "keras" and not keras_file:
        raise ConfigError(
            f"{shown(source)} is not a Keras file (.keras, .h5).",
            hint="A SavedModel folder is exported with `onnxgate export tf`.",
            field="source",
        )
    if keras_file:
        return "keras"
    if saved and config.format != "keras":
        return "saved_model"
    raise ConfigError(
        f"{shown(source)} is neither a Keras file (.keras, .h5) nor a SavedModel folder "
        "(one holding saved_model.pb).",
        field="source",
    )


def _labels(
    inputs: Sequence[Mapping[str, Any]], asked: Mapping[str, Mapping[int, str]]
) -> dict[str, dict[int, str]]:
    """Every dynamic axis of the model's inputs with its label: asked, ``batch``, or ``IN_AXIS``."""
    by_name = {i["name"]: i for i in inputs}
    for name, axes in asked.items():
        spec = by_name.get(name)
        if spec is None:
            raise ConfigError(
                f"dynamic names {name!r}; the model's inputs are {', '.join(by_name)}.",
                field="dynamic",
            )
        for axis in axes:
            shape = spec["shape"] or []
            if axis >= len(shape) or shape[axis] is not None:
                fixed = shape[axis] if axis < len(shape) else "absent"
                raise ConfigError(
                    f"dynamic {name}:{axis}: the model fixes that axis ({fixed}) in its input "
                    "signature; only its dynamic (None) axes can be labelled.",
                    hint="Build the model with None on that axis (keras.Input(shape=(None, ...))).",
                    field="dynamic",
                )
    labels: dict[str, dict[int, str]] = {}
    for spec in inputs:
        for axis, size in enumerate(spec["shape"] or []):
            if size is None:
                default = "batch" if axis == 0 else re.sub(r"\W", "_", f"{spec['name']}_{axis}")
                labels.setdefault(spec["name"], {})[axis] = asked.get(spec["name"], {}).get(
                    axis, default
                )
    return labels


def _examples(inputs: Sequence[Mapping[str, Any]], config: TfExportConfig) -> dict[str, np.ndarray]:
    """Example inputs the parity samples follow: the given ones, or synthesized by the signature."""
    if config.example_inputs is not None:
        given = dict(load_feeds(config.example_inputs)[0].feeds)
        missing = [i["name"] for i in inputs if i["name"] not in given]
        if missing:
            raise ConfigError(
                f"{shown(config.example_inputs)} has no {missing[0]!r}; the model's inputs are "
                f"{', '.join(i['name'] for i in inputs)}.",
                field="example_inputs",
            )
        return {i["name"]: np.asarray(given[i["name"]]) for i in inputs}
    rng = np.random.default_rng(config.seed)
    examples = {}
    for spec in inputs:
        shape = [
            size if size is not None else EXAMPLE_SIZES["batch" if axis == 0 else "other"]
            for axis, size in enumerate(spec["shape"] or [])
        ]
        dtype = np.dtype(spec["dtype"])
        if dtype == np.bool_:
            examples[spec["name"]] = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype.kind in "iu":
            examples[spec["name"]] = rng.integers(0, 10, size=shape).astype(dtype)
        else:
            examples[spec["name"]] = rng.normal(0, 1, size=shape).astype(dtype)
    return examples


def _paths(kind: str, config: TfExportConfig) -> list[TfPath]:
    applicable = list(PATHS) if kind == "keras" else ["tf2onnx-saved-model"]
    if not config.paths:
        return applicable  # type: ignore[return-value]
    wrong = [p for p in config.paths if p not in applicable]
    if wrong:
        raise ConfigError(
            f"path {wrong[0]} does not apply to a SavedModel folder; it is converted by "
            "tf2onnx-saved-model.",
            field="paths",
        )
    return list(config.paths)


def _normalise(
    proto: Any, labels: Mapping[str, Mapping[int, str]], tf_outputs: Sequence[str]
) -> None:
    """Name the dynamic axes by their labels and the outputs as TensorFlow names them.

    tf2onnx writes ``unk__73`` for a dynamic axis and Keras' exporter ``Identity:0`` for an
    output; every path's file then has the same signature, and a contract reads ``batch``.
    """
    renamed: dict[str, str] = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        for axis, label in labels.get(value.name, {}).items():
            if axis < len(dims) and not dims[axis].HasField("dim_value"):
                if dims[axis].dim_param:
                    renamed[dims[axis].dim_param] = label
                dims[axis].dim_param = label
    batch = any(axes.get(0) == "batch" for axes in labels.values())
    for value in [*proto.graph.output, *proto.graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            if dim.dim_param in renamed:
                dim.dim_param = renamed[dim.dim_param]
            elif axis == 0 and batch and value in proto.graph.output and dim.dim_param:
                dim.dim_param = "batch"
    taken = {t for n in proto.graph.node for t in [*n.input, *n.output]}
    taken |= {i.name for i in proto.graph.input} | {i.name for i in proto.graph.initializer}
    outputs = list(proto.graph.output)
    if len(outputs) != len(tf_outputs):
        return
    for value, name in zip(outputs, tf_outputs, strict=True):
        old = value.name
        if old == name or name in taken:
            continue
        for node in proto.graph.node:
            node.output[:] = [name if t == old else t for t in node.output]
            node.input[:] = [name if t == old else t for t in node.input]
        value.name = name
        taken.add(name)


def _exporter(path: str, versions: Mapping[str, str]) -> str:
    return (
        f"keras {versions['keras']} (model.export onnx)"
        if path == "keras-onnx"
        else f"tf2onnx {versions['tf2onnx']} ({path.removeprefix('tf2onnx-')})"
    )


def _diagnosis(source: Path, failed: Sequence[Mapping[str, Any]], opset: int) -> ExportError:
    """One ExportError for conversions that all failed: the operator, its layer, the opset."""
    unsupported = [u for f in failed for u in f.get("unsupported", [])]
    if unsupported:
        seen: dict[str, Mapping[str, Any]] = {}
        for u in unsupported:
            seen.setdefault(u["op"], u)
        parts = []
        later = []
        for op, u in seen.items():
            where = f"in Keras layer {u['layer']!r}" if u.get("layer") else ""
            node = f"node {u['node']}" if u.get("node") else ""
            at = ", ".join(x for x in (where, node) if x)
            parts.append(f"{op}" + (f" ({at})" if at else ""))
            first = (u.get("opsets") or [None])[0]
            if first is not None and first > opset:
                later.append((op, first))
        message = (
            f"tf2onnx cannot convert TensorFlow op {'; '.join(parts)} of {shown(source)} at "
            f"opset {opset}: it has no handler for it."
        )
        if later:
            top = max(v for _, v in later)
            hint = (
                f"tf2onnx converts {', '.join(op for op, _ in later)} from opset {top}: export "
                f"with {setting('opset', top)}."
            )
        else:
            hint = (
                "tf2onnx has no handler for it at any opset: rewrite that layer's call() with "
                "supported operations, or give tf2onnx a custom_op_handler; -v shows every "
                "path's log."
            )
        return ExportError(message, hint=hint)
    lines = "; ".join(f"{f['path']}: {_first(f.get('error', ''), 200)}" for f in failed)
    return ExportError(
        f"no conversion path could convert {shown(source)}: {lines}",
        hint="-v shows each converter's full trace.",
    )


def _candidate(
    result: Mapping[str, Any],
    reference: TfReference | None,
    samples: Sequence[Sample],
    config: TfExportConfig,
    labels: Mapping[str, Mapping[int, str]],
    tf_outputs: Sequence[str],
    versions: Mapping[str, str],
) -> tuple[TfCandidate, CompareReport | None, LoadedModel | None]:
    """One path's file, normalised, and its parity with TensorFlow."""
    path = result["path"]
    figures = TfCandidate(
        path=path, exporter=_exporter(path, versions), seconds=result.get("seconds", 0.0)
    )
    if result.get("error"):
        return figures.model_copy(update={"error": _first(result["error"], 400)}), None, None
    import onnx

    from onnxgate.runners import open_runner

    try:
        proto = onnx.load(result["file"])
        _normalise(proto, labels, tf_outputs)
        onnx.save_model(proto, result["file"])
        loaded = load_model(Path(result["file"]))
        _check_runnable_here(loaded.proto)
        signature = Signature.from_graph(loaded.proto.graph)
        assert reference is not None
        reference.signature = signature
        report = compare_runners(
            open_runner(loaded, SessionSettings(ops_libraries=config.ops_libraries)),
            reference,
            samples,
            signature=signature,
            tolerances=config.tolerances,
        )
    except ExportError as err:
        return figures.model_copy(update={"error": err.message}), None, None
    except Exception as err:  # a file ONNX Runtime refuses is that path's failure, not the export's
        log.info("%s: %s", path, err, exc_info=True)
        return (
            figures.model_copy(update={"error": _first(f"{type(err).__name__}: {err}")}),
            None,
            None,
        )
    worst = max((o.max_abs for o in report.outputs if o.max_abs is not None), default=0.0)
    return (
        figures.model_copy(
            update={"passed": report.passed, "max_abs": worst, "nodes": len(proto.graph.node)}
        ),
        report,
        loaded,
    )


def _choose(candidates: Sequence[TfCandidate]) -> int | None:
    """The best path: parity passed, then the smallest max abs error, fewer nodes, tf2onnx."""
    ranked = [
        (not c.passed, c.max_abs, c.nodes, PATHS.index(c.path), i)
        for i, c in enumerate(candidates)
        if c.error is None and c.max_abs is not None
    ]
    return min(ranked)[-1] if ranked else None


def _chosen_notice(candidates: Sequence[TfCandidate], chosen: int) -> str:
    best = candidates[chosen]
    others = [
        f"{c.path} max_abs {c.max_abs:.3g}, {c.nodes} nodes"
        if c.error is None
        else f"{c.path} failed ({_first(c.error, 120)})"
        for i, c in enumerate(candidates)
        if i != chosen
    ]
    return f"chose {best.path} (max_abs {best.max_abs:.3g}, {best.nodes} nodes)" + (
        f" over {'; '.join(others)}" if others else ""
    )


@contextmanager
def _tf(python: Path, source: Path) -> Iterator[TfProcess]:
    process = TfProcess(python, source)
    try:
        yield process
    finally:
        process.close()


def _load(process: TfProcess, source: Path, kind: str, config: TfExportConfig) -> dict[str, Any]:
    answer = process.ask(
        {
            "op": "load",
            "source": str(source.resolve()),
            "kind": kind,
            "custom_objects": [str(p.resolve()) for p in config.custom_objects],
        },
        f"loading {shown(source)}",
    )
    if answer.get("error") == "CustomObjectsError":
        log.info("importing custom objects:\n%s", answer.get("trace", ""))
        raise ConfigError(
            f"custom_objects: importing {_first(answer.get('message', ''))} failed in "
            "TensorFlow's environment.",
            hint="Fix that file (it must import with TensorFlow, Keras and NumPy alone); -v "
            "shows the trace.",
            field="custom_objects",
        )
    if answer.get("error"):
        message = answer.get("message", "")
        custom = re.search(r"Could not locate class '(\w+)'|Unknown layer: '(\w+)'", message)
        hint = (
            f"Name the Python file that defines and registers {custom[1] or custom[2]} "
            f"(keras.saving.register_keras_serializable) with "
            f"{setting('custom_objects', 'layers.py')}."
            if custom
            else "Check that the file is a model this Keras or TensorFlow release reads; -v "
            "shows the trace."
        )
        log.info("loading %s:\n%s", source, answer.get("trace", ""))
        raise ModelLoadError(
            f"TensorFlow cannot load {shown(source)}: {answer['error']}: {_first(message)}",
            hint=hint,
        )
    return answer


def _provenance(
    versions: Mapping[str, str], chosen: TfCandidate, config: TfExportConfig, opset: int, kind: str
) -> Provenance:
    return Provenance(
        framework=f"tensorflow {versions['tensorflow']}"
        + (f", keras {versions['keras']}" if kind == "keras" else ""),
        exporter=chosen.exporter,
        options={
            "opset": opset,
            "path": chosen.path,
            "dynamic": {
                k: {str(axis): label for axis, label in v.items()}
                for k, v in config.dynamic.items()
            },
            "runtime": config.runtime,
        },
        onnxgate=__version__,
        lineage=export_lineage(config),
    )


def export_tf(
    source: str | os.PathLike[str],
    config: TfExportConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> ExportReport:
    """Convert a SavedModel or Keras file every way that works; prove and keep the best.

    Args:
        source: a SavedModel folder, or a Keras file (``.keras``, ``.h5``).
        config: where to write, the opset, the paths, the dynamic axes' labels and ranges, the
            toolchain, the parity check's tolerances.
        progress: called with a short message before each step.

    Returns:
        The report; ``passed`` is False when the best conversion disagrees with TensorFlow at
        some shape (``reason`` says where and by how much), and then nothing is written.

    Raises:
        ConfigError: a bad setting or source (a custom objects file that is missing or fails).
        ModelLoadError: TensorFlow cannot load the model.
        ExportError: no path converts it (diagnosed).
        RuntimeEnvError: TensorFlow's environment cannot be built or died.
    """
    from onnxgate.runners import tf_python

    say = progress or (lambda message: log.info("%s", message))
    path = Path(source)
    kind = _source_kind(path, config)
    paths = _paths(kind, config)
    for file in config.custom_objects:
        if not file.is_file():
            raise ConfigError(
                f"custom_objects names {shown(file)}, which is not a file.",
                hint="Name the Python file that defines and registers the model's custom layers.",
                field="custom_objects",
            )
    if config.out.is_dir():
        raise ConfigError(
            f"out {config.out} is a folder; name the .onnx file to write.", field="out"
        )
    notices: list[str] = []
    opset, _max_ir = _opset_for(config, notices)  # type: ignore[arg-type]
    opset = opset or config.opset
    python = tf_python(config.toolchain, progress=say)
    say(f"loading {shown(path)} in TensorFlow {config.tf_version}")
    with _tf(python, path) as process, tempfile.TemporaryDirectory(prefix="onnxgate-tf-") as tmp:
        loaded_answer = _load(process, path, kind, config)
        inputs, tf_outputs = loaded_answer["inputs"], loaded_answer["outputs"]
        versions = loaded_answer["versions"]
        labels = _labels(inputs, config.dynamic)
        examples = _examples(inputs, config)
        samples = parity_samples(examples, labels, seed=config.seed, ranges=config.dims)
        say(f"converting at opset {opset}: {', '.join(paths)}")
        converted = process.ask(
            {"op": "convert", "paths": paths, "opset": opset, "folder": tmp},
            f"converting {shown(path)}",
        )
        if converted.get("error"):
            raise ExportError(
                f"converting {shown(path)} failed: {converted['error']}: "
                f"{_first(converted.get('message', ''))}",
                hint="-v shows the trace.",
            )
        results = converted["candidates"]
        for r in results:
            if r.get("trace"):
                log.info("%s trace:\n%s", r["path"], r["trace"])
        if all(r.get("error") for r in results):
            raise _diagnosis(path, results, opset)
        say(f"running TensorFlow on {len(samples)} parity sample(s)")
        name = f"tensorflow {versions['tensorflow']} ({path.name})"
        reference = TfReference(
            process, Signature(inputs=[], outputs=[]), tf_outputs, name, versions["tensorflow"]
        )
        reference.run([s.feeds for s in samples])
        say("checking parity of each conversion with TensorFlow")
        judged = [
            _candidate(r, reference, samples, config, labels, tf_outputs, versions) for r in results
        ]
        candidates = [c for c, _, _ in judged]
        chosen = _choose(candidates)
        if chosen is None:
            raise _diagnosis(
                path,
                [{**r, "error": c.error} for r, c in zip(results, candidates, strict=True)],
                opset,
            )
        candidates[chosen] = candidates[chosen].model_copy(update={"chosen": True})
        _, report, loaded = judged[chosen]
        assert report is not None and loaded is not None
        notices.insert(0, _chosen_notice(candidates, chosen))
        written_opset = next(
            (o.version for o in loaded.proto.opset_import if o.domain in ("", "ai.onnx")), opset
        )
        result = ExportReport(
            passed=report.passed,
            source=str(path),
            path=config.out,
            exporter=candidates[chosen].exporter,
            opset=written_opset,
            ir_version=loaded.proto.ir_version,
            parity=report,
            candidates=candidates,
            notices=notices,
        )
        try:
            with staged_file(config.out) as staged:
                shutil.copyfile(loaded.path, staged)
                if not report.passed:
                    raise _Missed(result.model_copy(update=_why_missed(path, report, config)))
        except _Missed as missed:
            return missed.report
        final = load_model(config.out)
        signature = Signature.from_graph(final.proto.graph)
        reference.signature = signature
        contract = None
        if not config.contract:
            notices.extend(drop_stale_contract(config.out))
        else:
            say("writing the contract and golden samples")
            contract = write_contract(
                final,
                reference,
                samples,
                provenance=_provenance(versions, candidates[chosen], config, written_opset, kind),
                config=config.tolerances,
                force=True,
                second_opinion=opinion_from(report, what="the export's parity check"),
                ops_libraries=config.ops_libraries,
                dims_why={
                    label: found.why
                    for label, found in parity_ranges(examples, labels, config.dims).items()
                },
            )
    return result.model_copy(update={"contract": contract, "notices": notices})


def _why_missed(path: Path, report: CompareReport, config: TfExportConfig) -> dict[str, str]:
    failing = [o for o in report.outputs if not o.passed]
    detail = "; ".join(
        f"{o.name} at {o.worst_sample}: max_abs {o.max_abs}, {o.mismatches}/{o.elements} "
        f"mismatches ({o.reason})"
        for o in failing
    )
    return {
        "reason": f"the best conversion disagrees with TensorFlow on {shown(path)}: {detail}. The "
        f"model was not written to {shown(config.out)}.",
        "hint": "Every path's figures are in the report; a layer that behaves differently in "
        "inference (dropout, batch norm in training mode) or computes in float64 explains most "
        f"misses. {setting('opset', 18)} may convert an op differently.",
    }
