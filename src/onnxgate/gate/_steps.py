"""The gate's steps: each calls the library (never the CLI) and turns its report into a verdict.

A step gets the run's context and its table of ``gate.toml`` and returns an ``Outcome``: passed,
failed or inconclusive (timings other load spoiled), a one-line summary, flat figures and the
library's report. It raises a ``GateError`` when it cannot run at all; the pipeline records that
as an error of this step.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from onnxgate._words import setting
from onnxgate.compat.providers import short_name
from onnxgate.errors import ConfigError, GateError, ParityError, ResourceExhausted
from onnxgate.gate._record import library_config

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from onnxgate.data import Sample
    from onnxgate.gate._config import (
        BenchStep,
        CheckStep,
        CompareStep,
        ExportStep,
        FeedsSection,
        GateConfig,
        MobileStep,
        PlacementStep,
        QuantizeStep,
        Step,
        TuneStep,
        VerifyStep,
        WebStep,
    )
    from onnxgate.settings import FeedSettings, SessionSettings


@dataclass
class Context:
    """What every step of one run can see."""

    config: GateConfig
    run_dir: Path
    progress: Callable[[str], None]
    passed: dict[str, bool] = field(default_factory=dict)
    """Steps that ran so far, and whether they passed."""

    @property
    def name(self) -> str:
        return self.config.model.name

    @property
    def model(self) -> Path:
        """The model under test, in the run folder."""
        return self.run_dir / f"{self.name}.onnx"

    def quantized_model(self, to: str) -> Path:
        """The quantize step's model, named by its format: ``NAME.int8.onnx``, ``NAME.fp16.onnx``."""
        return self.run_dir / f"{self.name}.{to}.onnx"

    @property
    def runtimes(self) -> list[str]:
        return list(self.config.targets.runtimes) or ["installed"]

    def session(self, session: SessionSettings | None = None) -> SessionSettings:
        """A step's session with what ``[targets]`` gives every step.

        The providers, when the step names none, and the custom operator libraries.
        """
        from onnxgate.settings import SessionSettings

        targets = self.config.targets
        session = session or SessionSettings()
        update: dict[str, Any] = {}
        if not session.providers and targets.providers:
            update["providers"] = tuple(targets.providers)
        if targets.ops_libraries:
            update["ops_libraries"] = tuple(
                dict.fromkeys([*targets.ops_libraries, *session.ops_libraries])
            )
        return session.model_copy(update=update)


@dataclass
class Outcome:
    """What a step found."""

    passed: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    report: BaseModel | dict[str, Any] | None = None
    reason: str | None = None
    inconclusive: bool = False
    """Neither passed nor failed: the verdict hangs on timings other load spoiled (``passed``
    is then False and ``reason`` says why)."""


def _oldest_release(runtimes: list[str]) -> str | None:
    """The oldest pinned ``onnxruntime==X`` among the targets: the release an export must suit."""
    from onnxgate.compat.versions import parse_release

    pinned = [r for r in runtimes if r.startswith("onnxruntime==")]
    if not pinned:
        return None
    return min(pinned, key=lambda r: parse_release(r.split("==", 1)[1]))


def _root(ctx: Context) -> AbstractContextManager[None]:
    """Entry points (``torch:package.module:factory``) import from the config's folder."""
    from onnxgate.runners import import_root

    return import_root(ctx.config.model.root)


def _own(feeds: FeedSettings) -> bool:
    """True when a step's ``feeds`` table sets anything: it then overrides ``[feeds]``."""
    from onnxgate.settings import FeedSettings

    return feeds != FeedSettings()


def _golden(ctx: Context) -> list[Sample] | None:
    """The golden samples of the run's contract: what steps after export run on by default."""
    from onnxgate.contract import contract_samples

    return contract_samples(ctx.model)


def _synthetic(ctx: Context, dims: dict[str, list[int]] | None = None) -> FeedSettings:
    """Synthetic feeds at ``dims``, with ``[feeds]``' value ranges and seed."""
    from onnxgate.settings import FeedSettings

    table = ctx.config.feeds
    return FeedSettings(dims=dims or {}, ranges=table.ranges, seed=table.seed)


# --- export -----------------------------------------------------------------------------------


def export(ctx: Context, step: ExportStep) -> Outcome:
    """Make ``NAME.onnx`` with its contract and golden samples in the run folder."""
    source = ctx.config.model
    if source.kind == "torch":
        return _export_torch(ctx, step)
    if source.kind == "sklearn":
        return _export_sklearn(ctx, step)
    if source.kind in ("tf", "keras"):
        return _export_tf(ctx, step)
    return _adopt_onnx(ctx, step)


def _parity_figures(parity: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {"samples": len(parity.samples)}
    for output in parity.outputs:
        if output.max_abs is not None:
            figures[f"{output.name}.max_abs"] = output.max_abs
        cosine = getattr(output, "cosine", None)
        if cosine is not None:
            figures[f"{output.name}.cosine"] = cosine
    return figures


def _proven(contract: Any) -> str:
    """``; proves batch 1..32, height 224..640``: the sizes serve and deploy will accept.

    A range this machine's speed capped is marked: its reason (``DimBound.why``, in the report's
    contract) says what it would have been.
    """
    dims = contract.signature.dims if contract is not None else {}
    shown = [
        f"{name} {b.min}..{b.max}"
        + (" (capped by this machine's speed)" if "a starter range may cost" in b.why else "")
        for name, b in dims.items()
        if b.min is not None
    ]
    return f"; proves {', '.join(shown)}" if shown else ""


def _exported(report: Any, what: str) -> Outcome:
    figures = {"opset": report.opset, "ir_version": report.ir_version, "exporter": report.exporter}
    figures |= _parity_figures(report.parity)
    if not report.passed:
        reason = report.reason or "the exported model disagrees with its source"
        if report.hint:
            reason += f" ({report.hint})"
        return Outcome(False, reason.splitlines()[0], figures, report, reason=reason)
    summary = (
        f"{report.exporter}, opset {report.opset}; parity at {len(report.parity.samples)} "
        f"sample(s) against {what}" + _proven(report.contract)
    )
    return Outcome(True, summary, figures, report)


def _export_torch(ctx: Context, step: ExportStep) -> Outcome:
    from onnxgate.export import TorchExportConfig, export_torch, parse_dynamic

    model = ctx.config.model
    data = ctx.config.feeds.inputs
    config = library_config(
        step,
        TorchExportConfig,
        out=ctx.model,
        ops_libraries=ctx.session().ops_libraries,
        # [feeds] inputs, an .npz of the forward's inputs by name, are examples too
        example_inputs=model.example_inputs
        or (data if data is not None and data.suffix == ".npz" else None),
        dynamic=parse_dynamic(model.dynamic),
        output_names=tuple(model.output_names),
        opset=model.opset,
        runtime=_oldest_release(ctx.runtimes),
        exporter=model.exporter,
        dims=ctx.config.feeds.bounds(),
    )
    with _root(ctx):
        report = export_torch(model.location, config, progress=ctx.progress)
    return _exported(report, "PyTorch")


def _export_sklearn(ctx: Context, step: ExportStep) -> Outcome:
    from onnxgate.export import SklearnExportConfig, export_sklearn

    model = ctx.config.model
    assert model.data is not None  # the config requires it
    config = library_config(
        step,
        SklearnExportConfig,
        out=ctx.model,
        ops_libraries=ctx.session().ops_libraries,
        data=model.data,
        dtype=model.dtype or "float32",
        opset=model.opset,
        runtime=_oldest_release(ctx.runtimes),
        batch=ctx.config.feeds.bounds().get("batch"),
    )
    report = export_sklearn(
        model.location, config, trust_pickle=model.trust_pickle, progress=ctx.progress
    )
    return _exported(report, "scikit-learn")


def _export_tf(ctx: Context, step: ExportStep) -> Outcome:
    from onnxgate.export import TfExportConfig, export_tf, parse_dynamic
    from onnxgate.runners import DEFAULT_TOOLCHAIN

    model = ctx.config.model
    data = ctx.config.feeds.inputs
    config = library_config(
        step,
        TfExportConfig,
        out=ctx.model,
        format="keras" if model.kind == "keras" else "auto",
        opset=model.opset or 17,
        paths=tuple(model.paths),
        dynamic=parse_dynamic(model.dynamic),
        # [feeds] inputs, an .npz of the model's inputs by name, are examples too
        example_inputs=model.example_inputs
        or (data if data is not None and data.suffix == ".npz" else None),
        custom_objects=tuple(model.custom_objects),
        runtime=_oldest_release(ctx.runtimes),
        tf_version=model.tf_version or DEFAULT_TOOLCHAIN.tensorflow,
        tf2onnx_version=model.tf2onnx_version or DEFAULT_TOOLCHAIN.tf2onnx,
        keras_version=model.keras_version or DEFAULT_TOOLCHAIN.keras,
        dims=ctx.config.feeds.bounds(),
        ops_libraries=ctx.session().ops_libraries,
    )
    report = export_tf(model.location, config, progress=ctx.progress)
    return _exported(report, "TensorFlow")


def _adopt_onnx(ctx: Context, step: ExportStep) -> Outcome:
    """Copy the model (and its external data) in, then write its contract and golden samples."""
    from onnxgate.contract import init_contract
    from onnxgate.model import load_model

    source = Path(ctx.config.model.source)
    loaded = load_model(source)  # refuses unsafe external data before anything is copied
    shutil.copyfile(source, ctx.model)
    for ref in {ref.location: ref for ref in loaded.external_data}.values():
        target = ctx.run_dir / ref.location
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ref.path, target)
    config = library_config(
        step,
        # the step's own feeds, else [feeds]: its data and the serving ranges to prove
        feeds=step.feeds if _own(step.feeds) else ctx.config.feeds.golden(),
        force=True,
        batch_axis=ctx.config.model.batch_axis,
        session=ctx.session(),
    )
    try:
        contract = init_contract(ctx.model, config, progress=ctx.progress)
    except ParityError as error:
        return Outcome(False, error.message.splitlines()[0], reason=error.message)
    golden = contract.golden
    samples = len(golden.samples) if golden else 0
    opinion = golden.second_opinion if golden else None
    summary = f"golden outputs of {samples} samples from {step.reference}"
    if opinion is not None and opinion.runner and opinion.agreed:
        summary += f", confirmed by {opinion.runner}"
    elif opinion is not None and opinion.runner and opinion.agreed is None:
        summary += f", not confirmed ({opinion.runner} could not run it)"
    summary += _proven(contract)
    return Outcome(True, summary, {"samples": samples}, contract)


# --- check, compare, verify, placement ----------------------------------------------------------


def check(ctx: Context, step: CheckStep) -> Outcome:
    """Static checks against every target runtime."""
    from onnxgate.check import check_model
    from onnxgate.contract import observed_outputs

    # export wrote the contract: the shapes its golden outputs have are judged too (SHP003)
    observed = {name: seen.shape for name, seen in observed_outputs(ctx.model).items()}
    reports, failing, counts = {}, [], {"errors": 0, "warnings": 0}
    for runtime in ctx.runtimes:
        ctx.progress(f"check against {runtime}")
        config = library_config(
            step,
            runtime=runtime,
            providers=tuple(ctx.config.targets.providers),
            ops_libraries=ctx.session().ops_libraries,
            observed_outputs=observed,
        )
        report = check_model(ctx.model, config)
        reports[runtime] = report.model_dump(mode="json")
        counts["errors"] += sum(1 for f in report.findings if f.severity == "error")
        counts["warnings"] += sum(1 for f in report.findings if f.severity == "warning")
        if not report.passed:
            failing.append(runtime)
    summary = (
        f"fails on {', '.join(failing)}"
        if failing
        else f"loads and runs on {', '.join(ctx.runtimes)} (static checks)"
    )
    return Outcome(not failing, summary, counts, {"runtimes": reports})


def compare(ctx: Context, step: CompareStep) -> Outcome:
    """ONNX Runtime as deployed against a reference, on the step's feeds."""
    from onnxgate.compare import compare as run_compare
    from onnxgate.settings import FeedSettings

    session = ctx.session(step.session)
    # the step's own feeds, else the golden samples (the sizes proven), else [feeds]
    golden = None if _own(step.feeds) else _golden(ctx)
    if _own(step.feeds):
        feeds = step.feeds
    else:
        feeds = FeedSettings() if golden else ctx.config.feeds.golden()
    config = library_config(step, feeds=feeds, session=session)
    with _root(ctx):
        report = run_compare(ctx.model, config, samples=golden, progress=ctx.progress)
    failing = [o.name for o in report.outputs if not o.passed]
    summary = (
        f"{', '.join(failing)} differ from {step.against}"
        if failing
        else f"{len(report.outputs)} outputs agree with {step.against} on "
        f"{len(report.samples)} samples"
    )
    if report.first_divergence is not None and report.first_divergence.node:
        summary += f"; first diverging node {report.first_divergence.node}"
    return Outcome(report.passed, summary, _parity_figures(report), report)


def verify(ctx: Context, step: VerifyStep) -> Outcome:
    """The contract's golden samples on each runtime of the release matrix."""
    from onnxgate.contract import verify as run_verify

    config = library_config(
        step,
        runtimes=tuple(step.runtimes or ctx.runtimes),
        session=ctx.session(),
    )
    report = run_verify(ctx.model, config, progress=ctx.progress)
    failing = [r.runtime for r in report.results if not r.passed]
    figures = {f"{r.runtime}.passed": r.passed for r in report.results}
    if not report.identity.passed:
        summary = f"the files are not the ones the contract describes: {report.identity.reason}"
    elif failing:
        summary = f"fails on {', '.join(failing)}"
    else:
        summary = f"golden samples pass on {', '.join(r.runtime for r in report.results)}"
    return Outcome(report.passed, summary, figures, report)


def placement(ctx: Context, step: PlacementStep) -> Outcome:
    """Where each node runs; fails when a node is not on the required provider."""
    from onnxgate.placement import placement as run_placement

    providers = ctx.config.targets.providers
    require = step.require or (providers[0].split(":", 1)[0] if providers else None)
    runtime = step.runtime or ctx.runtimes[0]
    config = library_config(
        step,
        session=ctx.session(),
        require=require,
        runtime=runtime,
    )
    golden = None if _own(step.feeds) else _golden(ctx)
    report = run_placement(ctx.model, config, samples=golden, progress=ctx.progress)
    figures: dict[str, Any] = {f"nodes.{k}": v for k, v in report.assignments.items()}
    figures["fallback"] = len(report.fallback)
    where = ", ".join(f"{v} nodes on {short_name(k)}" for k, v in report.assignments.items())
    if report.passed:
        summary = where + (f" (required: {short_name(require)})" if require else "")
    else:
        summary = f"{len(report.violations)} nodes not on {short_name(require or '')}: {where}"
    return Outcome(report.passed, summary, figures, report)


# --- tune, quantize, bench ----------------------------------------------------------------------


def tune(ctx: Context, step: TuneStep) -> Outcome:
    """Search session settings; record the winner in the contract for this machine."""
    from onnxgate.perf import tune as run_tune

    # no batch or dims: tune on a golden sample of the contract (``tuning_sample``), the shape
    # and data the model was proven at; [feeds] ranges and seed shape synthetic ones otherwise
    config = library_config(
        step,
        feeds=_synthetic(ctx, {name: [size] for name, size in step.dims.items()}),
        providers=tuple(ctx.config.targets.providers),
        ops_libraries=ctx.session().ops_libraries,
        threads=step.threads or None,  # threads = []: the default search, as not set
    )
    report = run_tune(ctx.model, config, progress=ctx.progress)
    figures = {
        "defaults_p50_ms": report.defaults.p50_ms,
        "best_p50_ms": report.best.p50_ms,
        "ratio": report.ratio,
        "replaced_defaults": report.replaced_defaults,
    }
    if not report.reliable:
        figures["reliable"] = False
    measured = report.rounds[0].candidates if report.rounds else report.candidates
    searched = (
        f"{measured} of {report.candidates} candidates (the budget cut the rest)"
        if measured < report.candidates
        else f"{report.candidates} candidates"
    )
    # the report's own sentence: why what was kept was kept (the winner's figure beside the
    # defaults' alone reads as a contradiction when the defaults stay)
    summary = f"{searched}; {report.decision}"
    if report.least_budget is not None:  # the model as given was gated and timed past it
        summary += (
            f"; {setting('time_budget')} is less than this run's least, "
            f"{report.least_budget:g} s, and was overrun"
        )
    return Outcome(report.passed, summary, figures, report)


def quantize_data(step: QuantizeStep, feeds: FeedsSection) -> tuple[str | None, str | None]:
    """The evaluation and calibration data of the quantize step: its own, else ``[feeds] inputs``.

    The real data the gate was given judges int8 (or, static, calibrates it), never both at
    once: calibration and evaluation must be different data.
    """
    data = str(feeds.inputs) if feeds.inputs is not None else None
    evaluation, calibration = step.eval, step.calibration
    if data is not None:
        if step.mode == "static" and calibration is None and evaluation != data:
            calibration = data
        if evaluation is None and calibration != data:
            evaluation = data
    return evaluation, calibration


def from_feeds(name: str, section: Step, feeds: FeedsSection) -> tuple[str, ...]:
    """The settings of a step that take their value from ``[feeds] inputs``, not its own table.

    quantize's ``eval`` and ``calibration``; its messages name them as ``[feeds] inputs``, the
    key the user set the data with.
    """
    if name != "quantize":
        return ()
    step = cast("QuantizeStep", section)
    evaluation, calibration = quantize_data(step, feeds)
    taken = {"eval": (evaluation, step.eval), "calibration": (calibration, step.calibration)}
    return tuple(path for path, (used, own) in taken.items() if used is not None and own is None)


def quantize(ctx: Context, step: QuantizeStep) -> Outcome:
    """int8 (or fp16) inside the accuracy budget and not slower; written beside the float model.

    Named by format (``NAME.int8.onnx``, ``NAME.fp16.onnx``), so the registry's roles are
    ``model.int8`` or ``model.fp16``.
    """
    from onnxgate.quantize import quantize as run_quantize

    evaluation, calibration = quantize_data(step, ctx.config.feeds)
    config = library_config(
        step,
        out=ctx.quantized_model(step.to),
        ops_libraries=ctx.session().ops_libraries,
        eval=evaluation,
        calibration=calibration,
        # the runner that cannot confirm the float model's golden outputs at export cannot
        # confirm them for the int8 contract either: one key says so for both
        second_opinion=ctx.config.steps.export.second_opinion,
    )
    with _root(ctx):
        report = run_quantize(ctx.model, config, progress=ctx.progress)
    figures: dict[str, Any] = {
        "excluded": len(report.excluded),
        "quantized_nodes": report.quantized_nodes,
        "size_before_mb": round(report.size_before / 1e6, 3),
    }
    if report.size_after is not None:
        figures["size_after_mb"] = round(report.size_after / 1e6, 3)
    for figure in report.gate:
        figures[f"{figure.output}.{figure.metric}"] = figure.value
    if report.speed.verdict is not None:
        figures["speed"] = str(report.speed.verdict)
    if report.passed:
        size = f", {report.size_after / 1e6:.1f} MB" if report.size_after else ""
        judged = ", ".join(
            f"{f.output} {f.metric} {f.value:.4f}" for f in report.gate if f.value is not None
        )
        summary = (
            f"{step.to} within max_drop {step.max_drop:g} ({judged}); {len(report.excluded)} "
            f"node(s) kept in {'float' if step.to == 'int8' else 'fp32'}{size}; {report.speed.note}"
        )
    else:
        summary = report.reason or "outside the budget"
    if not report.passed and not step.required:
        # reported, not failed: the float model is what ships (nothing int8 was written)
        return Outcome(True, f"not required, and missed: {summary}", figures, report)
    return Outcome(
        report.passed, summary, figures, report, reason=None if report.passed else summary
    )


def _size_mb(model: Path) -> float:
    from onnxgate.model import load_model

    loaded = load_model(model)
    return (model.stat().st_size + sum(loaded.external_files.values())) / 1e6


def bench(ctx: Context, step: BenchStep) -> Outcome:
    """Latency and throughput against thresholds and, with ``vs``, against a contender.

    Timings other load spoiled are never a failure by themselves. Without a speed threshold the
    step informs: it passes, its figures marked unreliable with the reason. With one, it times
    again once; still spoiled, a threshold missed (and any ``min_speedup``) is inconclusive, not
    failed, and ``on_unreliable`` says what the gate does with that. A latency threshold met on
    a busy machine is met: other load only slows a model down.
    """
    from onnxgate.perf import bench as run_bench
    from onnxgate.settings import FeedSettings

    session = step.session
    tune_step = ctx.config.steps.tune
    same_shape = (
        list(step.batches) == ([tune_step.batch] if tune_step.batch else [])
        and {name: sizes[0] for name, sizes in step.dims.items() if len(sizes) == 1}
        == dict(tune_step.dims)
        and all(len(sizes) == 1 for sizes in step.dims.values())
    )
    # tune records its settings for one shape: bench runs them only at that shape
    tuned = step.tuned and ctx.passed.get("tune", False) and same_shape
    if tuned and session.threads:
        raise ConfigError(
            "steps.bench.session.threads conflicts with steps.bench.tuned: the tuned thread "
            "count is used; drop one of them."
        )
    session = ctx.session(session)
    # no batches or dims: bench times the contract's golden samples, the shapes proven
    config = library_config(
        step,
        feeds=_synthetic(ctx, dict(step.dims)) if step.batches or step.dims else FeedSettings(),
        session=session,
        tuned=tuned,
    )
    with _root(ctx):
        report = run_bench(
            ctx.model, config, progress=lambda message, fraction=None: ctx.progress(message)
        )
        judged = (step.max_p50_ms, step.max_p99_ms, step.min_speedup)
        if report.doubts and any(t is not None for t in judged):
            # a threshold is judged on these figures: measure once more rather than judge on
            # what the machine spoiled
            ctx.progress("the machine was busy while timing; timing again")
            report = run_bench(
                ctx.model, config, progress=lambda message, fraction=None: ctx.progress(message)
            )
        elsewhere = _bench_elsewhere(ctx, step, config)
    worst_p50 = max(r.p50_ms for r in report.results)
    worst_p99 = max(r.p99_ms for r in report.results)
    size = _size_mb(ctx.model)
    figures: dict[str, Any] = {"p50_ms": worst_p50, "p99_ms": worst_p99, "size_mb": round(size, 3)}
    timed = {r: other for r, other in elsewhere.items() if not isinstance(other, GateError)}
    failed = {r: error for r, error in elsewhere.items() if isinstance(error, GateError)}
    for runtime, other in timed.items():
        figures[f"{runtime}.p50_ms"] = max(r.p50_ms for r in other.results)
        figures[f"{runtime}.p99_ms"] = max(r.p99_ms for r in other.results)
    spoiled = list(report.conditions.reasons) if report.conditions is not None else []
    ratio_doubts = [r for r in report.ratio if not r.reliable]
    if report.ratio:
        figures["speedup"] = min(r.ratio for r in report.ratio)
    if report.doubts:
        figures["reliable"] = False
        figures["unreliable"] = "; ".join(report.doubts)
    misses: list[str] = []
    undecided: list[str] = []
    timing = undecided if spoiled else misses
    key = "steps.bench.runtimes" if step.runtimes is not None else "targets.runtimes"
    for runtime, error in failed.items():
        # a target asked for that cannot run is a miss; the installed runtime's figures stay
        misses.append(f"{runtime} (in {key}) could not be timed: {error.message}")
    if step.max_p50_ms is not None and worst_p50 > step.max_p50_ms:
        timing.append(f"p50 {worst_p50:.2f} ms > {step.max_p50_ms:g} ms")
    if step.max_p99_ms is not None and worst_p99 > step.max_p99_ms:
        timing.append(f"p99 {worst_p99:.2f} ms > {step.max_p99_ms:g} ms")
    if step.max_size_mb is not None and size > step.max_size_mb:
        misses.append(f"size {size:.1f} MB > {step.max_size_mb:g} MB")
    if step.min_speedup is not None:
        if not report.ratio:
            misses.append("min_speedup is set but no contender ran (set steps.bench.vs)")
        elif not spoiled and any(
            r.interval is not None and r.interval[1] < step.min_speedup for r in report.ratio
        ):
            # on a quiet machine, an interval wholly below the threshold proves the miss
            misses.append(
                f"speed-up {figures['speedup']:.2f}x < {step.min_speedup:g}x vs {step.vs}"
            )
        elif ratio_doubts:
            undecided.append(
                f"speed-up {figures['speedup']:.2f}x vs {step.vs} against min_speedup "
                f"{step.min_speedup:g}x"
            )
        elif figures["speedup"] < step.min_speedup:
            misses.append(
                f"speed-up {figures['speedup']:.2f}x < {step.min_speedup:g}x vs {step.vs}"
            )
    shown = f"p50 {worst_p50:.2f} ms, p99 {worst_p99:.2f} ms, {size:.1f} MB"
    if spoiled:
        shown += " (timings unreliable)"
    if "speedup" in figures:
        name = report.vs.name if report.vs else step.vs
        if ratio_doubts:
            # never the headline: a ratio the machine or a wide interval made is only shown
            # with its qualifier
            shown += f"; speed-up vs {name} unreliable ({figures['speedup']:.2f}x measured)"
        else:
            shown += f", {figures['speedup']:.2f}x vs {name}"
    for runtime, other in timed.items():
        ran = other.session or {}
        shown += (
            f"; {runtime} p50 {figures[f'{runtime}.p50_ms']:.2f} ms "
            f"({ran.get('backend') or ', '.join(other.providers)}, "
            f"{ran.get('intra_op_threads') or 'default'} thread(s))"
        )
        if other.doubts:
            shown += " (unreliable)"
    document: BaseModel | dict[str, Any] = report
    if elsewhere:
        document = report.model_dump(mode="json") | {
            "runtimes": {
                r: (
                    {"error": other.message, "hint": other.hint}
                    if isinstance(other, GateError)
                    else other.model_dump(mode="json")
                )
                for r, other in elsewhere.items()
            }
        }
    return _timed_verdict(
        "bench", step.on_unreliable, misses, undecided, report.doubts, shown, figures, document
    )


def bench_runtimes(step: BenchStep, targets: list[str]) -> list[str]:
    """The runtimes bench times besides the installed one, each once.

    They are ``steps.bench.runtimes``, or the targets when it is unset.
    """
    runtimes = step.runtimes if step.runtimes is not None else targets
    return list(dict.fromkeys(r for r in runtimes if r != "installed"))


def _bench_elsewhere(ctx: Context, step: BenchStep, config: Any) -> dict[str, Any]:
    """The same timing on each target runtime but the installed one: runtime -> BenchReport.

    A runtime that cannot be timed maps to its GateError: reported for that runtime alone.

    Each runs in its own worker with the step's session settings, without the contender and the
    tuned settings (both are the installed runtime's); their figures inform, thresholds judge
    the installed runtime's.
    """
    from onnxgate.perf import bench as run_bench

    found: dict[str, Any] = {}
    for runtime in bench_runtimes(step, ctx.runtimes):
        ctx.progress(f"bench on {runtime}")
        elsewhere = config.model_copy(update={"runtime": runtime, "vs": None, "tuned": False})
        try:
            found[runtime] = run_bench(
                ctx.model, elsewhere, progress=lambda message, fraction=None: ctx.progress(message)
            )
        except GateError as error:
            if isinstance(error, ResourceExhausted):
                raise  # the machine ran out of something: every step's condition, not this one's
            found[runtime] = error
    return found


def _timed_verdict(
    name: str,
    on_unreliable: str,
    misses: list[str],
    undecided: list[str],
    doubts: list[str],
    shown: str,
    figures: dict[str, Any],
    report: BaseModel | dict[str, Any],
) -> Outcome:
    """Failed on a miss; inconclusive when only thresholds judged on spoiled timings missed.

    ``doubts`` say why the timings are unreliable; ``shown`` is the summary of a pass.
    """
    why = f"unreliable ({'; '.join(doubts)})" if doubts else ""
    if misses:
        summary = "; ".join(misses + undecided)
        reason = summary + (f"; the timings were {why}" if why else "")
        return Outcome(False, summary, figures, report, reason=reason)
    if undecided:
        summary = f"inconclusive: {'; '.join(undecided)}; {why}"
        reason = (
            "other load spoiled the timings these thresholds are judged on: run the gate again "
            f'on a quieter machine; steps.{name}.on_unreliable = "{on_unreliable}" '
            + ("fails the gate meanwhile" if on_unreliable == "fail" else "lets it pass")
        )
        return Outcome(False, summary, figures, report, reason=reason, inconclusive=True)
    if why:
        shown += f"; {why}"
    return Outcome(True, shown, figures, report)


def mobile(ctx: Context, step: MobileStep) -> Outcome:
    """``NAME.ort`` and its operators config, proven on the goldens and held to edge budgets.

    A ``max_p50_ms`` missed on timings other load spoiled (after timing once more) is
    inconclusive, never a failure by itself; ``on_unreliable`` says what the gate does with it.
    """
    from onnxgate.mobile import mobile_target

    report = mobile_target(
        ctx.model,
        library_config(step, ops_libraries=ctx.session().ops_libraries),
        out=ctx.run_dir,
        name=ctx.name,
        progress=ctx.progress,
    )
    p50 = max(report.p50_ms.values(), default=None)
    figures: dict[str, Any] = {
        "onnx_mb": round(report.onnx_mb, 3),
        "ort_mb": round(report.ort_mb, 3),
        "peak_rss_mb": report.peak_rss_mb,
        "model_rss_mb": report.model_rss_mb,
        "p50_ms": p50,
    }
    shown = f".ort {report.ort_mb:.3f} MB (.onnx {report.onnx_mb:.3f} MB)"
    if report.peak_rss_mb is not None and report.model_rss_mb is not None:
        shown += (
            f", the model's peak RSS {report.model_rss_mb:.1f} MB "
            f"(the process's {report.peak_rss_mb:.1f} MB)"
        )
    if p50 is not None:
        shown += f", single-thread p50 {p50:.3f} ms"
    if report.unreliable:
        figures["reliable"] = False
        figures["unreliable"] = "; ".join(report.unreliable)
    # only a p50 hangs on the timings: a size or memory miss is not excused by, nor blamed on,
    # other load
    timed = step.max_p50_ms is not None and p50 is not None and p50 > step.max_p50_ms
    return _timed_verdict(
        "mobile",
        step.on_unreliable,
        report.misses,
        report.undecided,
        report.unreliable if timed or not report.misses else [],
        shown,
        figures,
        report,
    )


def web(ctx: Context, step: WebStep) -> Outcome:
    """``web/``: the model, its input spec and the browser's proof (``web.web_target``)."""
    from onnxgate.web import web_target

    report = web_target(
        ctx.model,
        library_config(step),
        out=ctx.run_dir / "web",
        name=ctx.name,
        progress=ctx.progress,
    )
    figures: dict[str, Any] = {
        "size_mb": round(report.size_mb, 3),
        "threads": report.threads,
        "max_abs": max((o["max_abs"] or 0.0 for o in report.outputs), default=None),
    }
    ran = f"{report.runtime} ({report.backend}, {report.threads} thread(s))"
    if not report.passed:
        summary = f"the browser breaks the contract on {ran}: {report.parity}"
        return Outcome(False, summary, figures, report, reason=summary)
    shown = f"web/{report.model_file} {report.size_mb:.3f} MB proven on {ran}: {report.parity}"
    return Outcome(True, shown, figures, report)
