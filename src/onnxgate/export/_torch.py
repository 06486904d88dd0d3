"""Export a PyTorch module to ONNX, then prove the export at shapes it was not traced at.

The exporter is torch.onnx's dynamo exporter by default (the TorchScript exporter on request, or
after a printed notice with ``exporter="auto"``). Three traps are closed on purpose:

- an example of size 1 on an axis declared dynamic lets torch.export specialise that axis to 1, so
  such axes are repeated to size 2 in the example before export (with a notice);
- every requested dynamic axis must still be symbolic in the exported signature, or the export
  fails;
- parity with the module is checked across the range of every dynamic axis (both ends and between:
  a batch 1, 7 and 32, another axis 1, its middle and past the example's size, or the serving
  range given) with seeded inputs, and a miss comes back as a report that did not pass: the file is not left
  where it was asked for. Values the exporter froze (a NumPy call in ``forward``) show up here.
"""

from __future__ import annotations

import inspect
import logging
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from onnxgate._fs import staged_file
from onnxgate._stdout import stdout_to_stderr
from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compare import compare_runners
from onnxgate.compat.runtime import RuntimeSpec, runtime_profile
from onnxgate.contract import (
    Provenance,
    drop_stale_contract,
    opinion_from,
    write_contract,
)
from onnxgate.data import BATCH_MAX, DimRange, Sample, load_feeds, range_points
from onnxgate.errors import ConfigError, ExportError
from onnxgate.export._diagnose import (
    diagnose,
    quiet_exporter,
    torch_module,
)
from onnxgate.export._report import ExportReport, export_lineage
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners import TorchRunner, load_entry
from onnxgate.settings import OpsLibraries, Part, SessionSettings, Tolerances

log = logging.getLogger(__name__)

PARITY_SIZES = (1, 7)
"""Sizes of a dynamic axis in the parity check, besides its range's top (see ``parity_ranges``):
the edge, and a prime between (``range_points`` takes a batch to 7, others to their middle)."""

DYNAMO_MIN_OPSET = 18
"""The dynamo exporter writes opset 18 and later."""


class TorchExportConfig(Part):
    """What ``export torch`` is asked to do with a module."""

    out: Path
    """The ``.onnx`` file to write."""
    example_inputs: Path | None = None
    """An .npz of example inputs (names are the input names, in forward's order); needed when
    the factory returns the module alone."""
    dynamic: dict[str, dict[int, str]] = {}
    """Input name → {axis: label}, e.g. ``{"input_ids": {0: "batch", 1: "seq"}}``; axes with
    one label share a size. ``["input_ids:0=batch"]`` is read as well."""
    output_names: tuple[str, ...] = ()
    opset: int | None = Field(None, ge=1)
    runtime: str | None = None
    """Target ONNX Runtime release: the opset and IR are the highest it loads."""
    exporter: Literal["dynamo", "torchscript", "auto"] = "dynamo"
    """dynamo, torchscript, or auto (dynamo, then TorchScript after a printed notice)."""
    tolerances: Tolerances = Tolerances()
    """Tolerances and metrics of the parity check, recorded in the contract."""
    seed: int = 0
    """Seed of the parity inputs."""
    dims: dict[str, tuple[int, int]] = {}
    """The serving range of a dynamic axis label (``{"batch": (1, 64)}``), proven at both ends
    and between; labels left out: a batch (axis 0) 1 to 32, others 1 to past the example's."""
    contract: bool = True
    """Write the contract and golden samples beside the model."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries the parity check's ONNX Runtime session registers (for a model
    exported with custom-domain operators); the contract records them."""

    @field_validator("dynamic", mode="before")
    @classmethod
    def _dynamic(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            try:
                return parse_dynamic(value)
            except ConfigError as err:
                raise ValueError(err.message) from err
        return value


class _Missed(Exception):
    """Leaves the staged file unwritten: the export did not pass."""

    def __init__(self, report: ExportReport) -> None:
        super().__init__(report.reason)
        self.report = report


def parse_dynamic(items: Sequence[str] | None) -> dict[str, dict[int, str]]:
    """``["input_ids:0=batch", "input_ids:1=seq"]`` → ``{"input_ids": {0: "batch", 1: "seq"}}``.

    Raises:
        ConfigError: an item is not ``input:axis=label``.
    """
    dynamic: dict[str, dict[int, str]] = {}
    for item in items or ():
        found = re.fullmatch(r"\s*([^:]+):(\d+)=(\w+)\s*", item)
        if not found:
            raise ConfigError(
                f"dynamic {item!r} is not INPUT:AXIS=LABEL.",
                hint="For example input_ids:0=batch and input_ids:1=seq.",
                field="dynamic",
            )
        dynamic.setdefault(found[1], {})[int(found[2])] = found[3]
    return dynamic


def _build(entry: str) -> tuple[Any, Any]:
    built = load_entry(entry)
    try:
        made = built()
    except Exception as err:  # a user's factory may raise anything
        raise ConfigError(
            f"{entry} raised {type(err).__name__} while building the module: {err}"
        ) from err
    if isinstance(made, tuple) and len(made) != 2:
        raise ConfigError(
            f"{entry} returned a tuple of {len(made)}; expected the module, or (module, example_inputs)."
        )
    module, example = (made[0], made[1]) if isinstance(made, tuple) else (made, None)
    torch = torch_module()
    if not isinstance(module, torch.nn.Module):
        raise ConfigError(f"{entry} returned a {type(module).__name__}, not a torch.nn.Module.")
    if getattr(module, "training", False):
        log.warning("%s returned a module in training mode; calling .eval()", entry)
        module.eval()
    return module, example


def _forward_params(module: Any) -> list[str]:
    forward = getattr(module, "forward", module)
    return [
        p.name
        for p in inspect.signature(forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def _in_forward_order(
    named: dict[str, np.ndarray], module: Any, where: str
) -> dict[str, np.ndarray]:
    """Named examples in the order of forward's parameters, which is how they are exported."""
    params = _forward_params(module)
    stray = [k for k in named if k not in params]
    if stray:
        raise ConfigError(
            f"{where}: example input {stray[0]!r} is not a parameter of forward({', '.join(params)})."
        )
    return {k: named[k] for k in params if k in named}


def _examples(
    entry: str, config: TorchExportConfig, module: Any, example: Any
) -> dict[str, np.ndarray]:
    if config.example_inputs is not None:
        sample = load_feeds(config.example_inputs)[0]
        return _in_forward_order(dict(sample.feeds), module, str(config.example_inputs))
    if example is None:
        raise ConfigError(
            f"{entry} returned no example inputs and example_inputs was not given.",
            hint="Return (module, example_inputs) from the factory, or name an .npz of them in "
            "example_inputs.",
            field="example_inputs",
        )
    torch = torch_module()

    def as_np(v: Any) -> np.ndarray:
        return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

    if isinstance(example, Mapping):
        return _in_forward_order({k: as_np(v) for k, v in example.items()}, module, entry)
    values = list(example) if isinstance(example, tuple | list) else [example]
    if not all(isinstance(v, torch.Tensor | np.ndarray) for v in values):
        raise ConfigError(
            f"{entry}: example inputs must be tensors or arrays (a tuple, or a dict by "
            f"parameter name); got {', '.join(type(v).__name__ for v in values)}."
        )
    params = _forward_params(module)
    names = (
        params[: len(values)]
        if len(params) >= len(values)
        else [f"input_{i}" for i in range(len(values))]
    )
    return dict(zip(names, (as_np(v) for v in values), strict=True))


def _widen_size_one(
    examples: dict[str, np.ndarray], dynamic: Mapping[str, Mapping[int, str]], notices: list[str]
) -> dict[str, np.ndarray]:
    """Repeat dynamic axes of size 1 to size 2, so that torch.export cannot specialise them."""
    widened = dict(examples)
    repeated = []
    sizes: dict[str, tuple[int, str]] = {}
    for name, axes in dynamic.items():
        for axis, label in axes.items():
            rank = widened[name].ndim
            if not 0 <= axis < rank:
                raise ConfigError(
                    f"dynamic {name}:{axis}: input {name!r} has {rank} axes.", field="dynamic"
                )
            size = widened[name].shape[axis]
            seen = sizes.setdefault(label, (size, name))
            if seen[0] != size:
                raise ConfigError(
                    f"dynamic label {label!r} is axis {axis} of {name!r} (size {size}) and also an "
                    f"axis of {seen[1]!r} (size {seen[0]}) in the example; one label, one size.",
                    field="dynamic",
                )
    for name, axes in dynamic.items():
        for axis in axes:
            if widened[name].shape[axis] == 1:
                widened[name] = np.repeat(widened[name], 2, axis=axis)
                repeated.append(f"{name}:{axis} ({axes[axis]})")
    if repeated:
        notices.append(
            f"size 1 in the example on dynamic axes {', '.join(repeated)}: repeated to 2 for "
            "export, because torch.export makes an axis of size 1 static"
        )
    return widened


def _opset_for(config: TorchExportConfig, notices: list[str]) -> tuple[int | None, int | None]:
    """(opset, max IR) from --opset or the target runtime's measured limits."""
    if config.runtime is None:
        return config.opset, None
    profile = runtime_profile(RuntimeSpec.parse(config.runtime))
    top = profile.max_opsets.get("ai.onnx")
    opset = min(config.opset, top) if config.opset and top else config.opset or top
    notices.append(
        f"{profile.label} loads up to IR {profile.max_ir} and ai.onnx opset {top}: exporting at "
        f"opset {opset}"
    )
    return opset, profile.max_ir


def _export_once(
    torch: Any,
    module: Any,
    examples: dict[str, np.ndarray],
    config: TorchExportConfig,
    exporter: str,
    opset: int | None,
    target: Path,
) -> None:
    args = tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in examples.values())
    names = list(examples)
    outputs = list(config.output_names) or None
    if exporter == "dynamo":
        dims: dict[str, Any] = {}
        shapes = []
        for name in names:
            axes = config.dynamic.get(name, {})
            shapes.append(
                {
                    axis: dims.setdefault(label, torch.export.Dim(label))
                    for axis, label in axes.items()
                }
                or None
            )
        torch.onnx.export(
            module,
            args,
            str(target),
            input_names=names,
            output_names=outputs,
            dynamic_shapes=tuple(shapes),
            opset_version=opset,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    else:
        torch.onnx.export(
            module,
            args,
            str(target),
            input_names=names,
            output_names=outputs,
            dynamic_axes={n: dict(a) for n, a in config.dynamic.items()},
            opset_version=opset or 17,
            dynamo=False,
        )


def _larger(example: int) -> int:
    return max(16, 2 * example + 3)


def parity_ranges(
    examples: Mapping[str, np.ndarray],
    dynamic: Mapping[str, Mapping[int, str]],
    given: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, DimRange]:
    """The range each dynamic axis label is proven over.

    ``given`` ranges (``[feeds] dims``) as they are; otherwise a label on axis 0 is a batch, 1 to
    32 (or the example's size, when larger), and any other 1 to a size larger than the
    example's (``_larger``).
    """
    given = dict(given or {})
    unknown = sorted(set(given) - {label for axes in dynamic.values() for label in axes.values()})
    if unknown:
        raise ConfigError(
            f"feeds.dims names {unknown[0]!r}, which is not a dynamic axis label; the labels are "
            f"{', '.join(sorted({lb for axes in dynamic.values() for lb in axes.values()})) or 'none'}.",
            hint="Label the axis in dynamic (INPUT:AXIS=LABEL), or drop the range.",
            field="feeds.dims",
        )
    sizes: dict[str, int] = {}
    batch: set[str] = set()
    for name, axes in dynamic.items():
        for axis, label in axes.items():
            sizes[label] = max(sizes.get(label, 0), examples[name].shape[axis])
            if axis == 0:
                batch.add(label)
    ranges = {}
    for label, example in sizes.items():
        role = "batch" if label in batch else "other"
        if label in given:
            low, high = given[label]
            ranges[label] = DimRange(low, high, role, "[feeds] dims", given=True)
        elif role == "batch":
            ranges[label] = DimRange(1, max(BATCH_MAX[0], example), role, "a batch, starter range")
        else:
            ranges[label] = DimRange(1, _larger(example), role, "starter range")
    return ranges


def parity_samples(
    examples: Mapping[str, np.ndarray],
    dynamic: Mapping[str, Mapping[int, str]],
    *,
    seed: int = 0,
    ranges: Mapping[str, tuple[int, int]] | None = None,
) -> list[Sample]:
    """Seeded inputs that take every dynamic axis to both ends of its range and between.

    The ranges are ``parity_ranges``' (``ranges`` gives the serving range of a label); the
    points are ``range_points``' (the batch's top at the other axes' smallest sizes, and the
    reverse). Values follow the example's: integers stay within its [min, max] (token ids,
    masks), floats are drawn from its mean and spread.
    """
    proven = parity_ranges(examples, dynamic, ranges)
    points = range_points(proven) if proven else [{}]
    samples = []
    for point in points:
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, example in examples.items():
            shape = list(example.shape)
            for axis, label in dynamic.get(name, {}).items():
                shape[axis] = point[label]
            feeds[name] = _like(example, tuple(shape), rng)
        label = ",".join(f"{k}={v}" for k, v in point.items()) if point else "example shape"
        samples.append(Sample(label, feeds, dict(point)))
    return samples


def _like(example: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if example.dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if example.dtype.kind in "iu":
        low, high = int(example.min()), int(example.max())
        return rng.integers(low, high + 1, size=shape).astype(example.dtype)
    mean, spread = float(example.mean()), float(example.std()) or 1.0
    return rng.normal(mean, spread, size=shape).astype(example.dtype)


def _check_dynamic(path: Path, dynamic: Mapping[str, Mapping[int, str]]) -> None:
    signature = Signature.from_graph(load_model(path).proto.graph)
    specs = {s.name: s for s in signature.inputs}
    for name, axes in dynamic.items():
        spec = specs.get(name)
        if spec is None:
            raise ExportError(
                f"{setting('dynamic')} names input {name!r}, which the exported model does not "
                f"have ({', '.join(specs)})."
            )
        for axis, label in axes.items():
            dim = spec.shape[axis] if spec.shape and axis < len(spec.shape) else None
            if not isinstance(dim, str):
                raise ExportError(
                    f"input {name!r} axis {axis} ({label}) was asked to be dynamic but the exported "
                    f"model fixes it to {dim}: forward() uses that size as a Python number (a NumPy "
                    "call, int(), a Python range), so the exporter specialised it.",
                    hint="Compute with torch operations on the tensor instead (x.shape[1] stays "
                    "symbolic inside torch ops); -v shows the exporter's guard messages.",
                )


def _check_runnable_here(proto: Any) -> None:
    """Parity runs the export on the installed ONNX Runtime, so it must admit the opset and IR."""
    profile = runtime_profile(RuntimeSpec.parse(None))
    opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    top = profile.max_opsets.get("ai.onnx")
    if top is not None and opsets.get("ai.onnx", 0) > top or proto.ir_version > profile.max_ir:
        raise ExportError(
            f"the export has IR {proto.ir_version} and ai.onnx opset {opsets.get('ai.onnx')}; the "
            f"installed {profile.label} loads up to IR {profile.max_ir} and opset {top}, so parity "
            "cannot be checked here.",
            hint=f"Export with {setting('opset', top)} or lower, or install a newer onnxruntime.",
        )


def _refuse_unprovable(opset: int | None, config: TorchExportConfig) -> None:
    """Refuse an opset the installed runtime cannot load (no parity) or dynamo cannot write."""
    here = runtime_profile(RuntimeSpec.parse(None))
    top_here = here.max_opsets.get("ai.onnx")
    if opset is not None and top_here is not None and opset > top_here:
        raise ConfigError(
            f"opset {opset} is above what the installed {here.label} loads ({top_here}); parity "
            "is checked on it, so the export could not be proved.",
            hint=f"Use opset {top_here} or lower, or install a newer onnxruntime.",
            field="opset",
        )
    if opset is not None and opset < DYNAMO_MIN_OPSET and config.exporter != "torchscript":
        raise ConfigError(
            # "exporter" is a field this error names: the prose says "dynamo" alone, so that
            # only the setting is renamed into a flag or a gate key
            f"opset {opset} is below what dynamo writes ({DYNAMO_MIN_OPSET} and later; it would "
            f"silently write {DYNAMO_MIN_OPSET}).",
            hint=f"Use {setting('exporter', 'torchscript')} for opsets before {DYNAMO_MIN_OPSET}.",
            field="opset",
            related=["exporter"],
        )


def _run_exporters(
    torch: Any,
    module: Any,
    exported_examples: dict[str, np.ndarray],
    config: TorchExportConfig,
    order: list[str],
    opset: int | None,
    tmp: Path,
    entry: str,
    say: Callable[[str], None],
    notices: list[str],
) -> str | None:
    """Export to ``tmp`` with the first exporter of ``order`` that succeeds; return its name."""
    used = None
    for exporter in order:
        say(f"exporting {entry} with the {exporter} exporter")
        try:
            with stdout_to_stderr(), quiet_exporter():
                _export_once(torch, module, exported_examples, config, exporter, opset, tmp)
        except Exception as err:  # the exporters raise many unrelated types
            log.info("exporter trace:\n%s", traceback.format_exc())
            diagnosis = diagnose(
                err,
                exporter,
                module=module,
                args=tuple(
                    torch.from_numpy(np.ascontiguousarray(v)) for v in exported_examples.values()
                ),
            )
            if exporter != order[-1]:
                notices.append(f"{diagnosis.message} Falling back to the TorchScript exporter.")
                log.warning("%s Falling back to the TorchScript exporter.", diagnosis.message)
                continue
            raise diagnosis from err
        used = exporter
        if exporter == "torchscript":
            notices.append(
                "the TorchScript exporter traces one path through Python control flow: parity "
                "covers the branches the parity inputs take, not others"
            )
        break
    return used


def _check_written(
    tmp: Path,
    config: TorchExportConfig,
    max_ir: int | None,
    opset: int | None,
    used: str | None,
    notices: list[str],
) -> None:
    """Stamp the IR down for the target runtime; check axes, opset and that it runs here."""
    loaded = load_model(tmp, load_weights=True)
    proto = loaded.proto
    if max_ir is not None and proto.ir_version > max_ir:
        notices.append(f"IR stamped down from {proto.ir_version} to {max_ir} for {config.runtime}")
        proto.ir_version = max_ir
        import onnx

        onnx.save_model(proto, str(tmp))
    _check_dynamic(tmp, config.dynamic)
    written = load_model(tmp).proto
    got = next((o.version for o in written.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and got != opset:
        raise ExportError(
            f"asked for opset {opset}, the {used} exporter wrote opset {got}.",
            hint="The dynamo exporter writes opsets 18 and later and may fall back to 18 "
            "without an error; pick an opset it supports, or "
            f"{setting('exporter', 'torchscript')}.",
        )
    _check_runnable_here(written)


def _provenance(
    torch: Any, final: LoadedModel, config: TorchExportConfig, used: str | None
) -> Provenance:
    """How the exported model was made, for its contract."""
    return Provenance(
        framework=f"torch {torch.__version__}",
        exporter=f"torch.onnx ({used})",
        options={
            "opset": final.proto.opset_import[0].version if final.proto.opset_import else None,
            "dynamic": {
                k: {str(axis): label for axis, label in v.items()}
                for k, v in config.dynamic.items()
            },
            "runtime": config.runtime,
        },
        onnxgate=__version__,
        lineage=export_lineage(config),
    )


def export_torch(
    entry: str,
    config: TorchExportConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> ExportReport:
    """Export, check dynamic axes, prove parity at three shapes, and write the contract.

    Args:
        entry: ``package.module:factory``; the factory returns the module, or (module, example
            inputs).
        config: where to write, the dynamic axes, the opset or target runtime, the exporter, the
            parity check's tolerances.
        progress: called with a short message before each step.

    Returns:
        The report; ``passed`` is False when the ONNX model disagrees with the module at some
        shape (``reason`` says where and by how much), and then nothing is written.

    Raises:
        ConfigError: a bad setting or entry point.
        ExportError: the exporter failed (diagnosed) or fixed a dynamic axis.
        ExtraMissing: torch is not installed.
    """
    torch = torch_module()
    say = progress or (lambda message: log.info("%s", message))
    notices: list[str] = []
    module, example = _build(entry)
    examples = _examples(entry, config, module, example)
    unknown = sorted(set(config.dynamic) - set(examples))
    if unknown:
        raise ConfigError(
            f"dynamic names {unknown[0]!r}; the inputs are {', '.join(examples)}.",
            field="dynamic",
        )
    exported_examples = _widen_size_one(examples, config.dynamic, notices)
    opset, max_ir = _opset_for(config, notices)
    _refuse_unprovable(opset, config)
    order = ["dynamo", "torchscript"] if config.exporter == "auto" else [config.exporter]
    if config.out.is_dir():
        raise ConfigError(
            f"out {config.out} is a folder; name the .onnx file to write.", field="out"
        )
    try:
        with staged_file(config.out) as tmp:
            used = _run_exporters(
                torch, module, exported_examples, config, order, opset, tmp, entry, say, notices
            )
            _check_written(tmp, config, max_ir, opset, used, notices)
            say("checking parity with the module across the dynamic axes' ranges")
            loaded = load_model(tmp)
            signature = Signature.from_graph(loaded.proto.graph)
            samples = parity_samples(examples, config.dynamic, seed=config.seed, ranges=config.dims)
            reference = TorchRunner.from_module(module, signature, name=entry)
            from onnxgate.runners import open_runner

            report = compare_runners(
                open_runner(loaded, SessionSettings(ops_libraries=config.ops_libraries)),
                reference,
                samples,
                signature=signature,
                tolerances=config.tolerances,
            )
            written_opsets = {o.domain or "ai.onnx": o.version for o in loaded.proto.opset_import}
            result = ExportReport(
                passed=report.passed,
                source=entry,
                path=config.out,
                exporter=used or "",
                opset=written_opsets.get("ai.onnx", 0),
                ir_version=loaded.proto.ir_version,
                parity=report,
                notices=notices,
            )
            if not report.passed:
                failing = [o for o in report.outputs if not o.passed]
                detail = "; ".join(
                    f"{o.name} at {o.worst_sample}: max_abs {o.max_abs}, {o.mismatches}/{o.elements} "
                    f"mismatches ({o.reason})"
                    for o in failing
                )
                raise _Missed(
                    result.model_copy(
                        update={
                            "reason": f"the exported model disagrees with {entry}: {detail}. The "
                            f"model was not written to {config.out}.",
                            "hint": "A value computed in Python (NumPy, .item(), a shape used as an "
                            "int) was frozen at the example's shape; compute it with torch "
                            "operations instead.",
                        }
                    )
                )
    except _Missed as missed:
        return missed.report
    final = load_model(config.out)
    contract = None
    if not config.contract:
        notices.extend(drop_stale_contract(config.out))
    if config.contract:
        say("writing the contract and golden samples")
        contract = write_contract(
            final,
            TorchRunner.from_module(module, Signature.from_graph(final.proto.graph), name=entry),
            samples,
            provenance=_provenance(torch, final, config, used),
            config=config.tolerances,
            force=True,
            second_opinion=opinion_from(report, what="the export's parity check"),
            ops_libraries=config.ops_libraries,
            dims_why={
                label: found.why
                for label, found in parity_ranges(examples, config.dynamic, config.dims).items()
            },
        )
    return result.model_copy(update={"contract": contract, "notices": notices})
