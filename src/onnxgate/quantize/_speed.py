"""Is the quantised model faster than its float parent on this machine? Measured, not assumed.

int8 is not faster by nature: ONNX Runtime's CPU provider runs a float Conv with blocked (NCHWc)
kernels fused with its bias and activation, while dynamic quantisation turns it into ConvInteger
with DynamicQuantizeLinear, Cast and Mul around it, which can be several times slower. A gate
that only measures accuracy would certify such a regression, so ``quantize`` times both models
and refuses a quantised model that is slower beyond noise.

They are timed the way onnxgate times any two contenders (``perf._contest``): each in a worker
process of its own, in interleaved slices whose order flips every round, so drift on the machine
hits both alike. The decision (``speed_verdict``) is
``perf._stats.judge``'s, the judge bench and tune use: on the 90% percentile-bootstrap interval
of the ratio of medians, *slower* only when the whole interval lies below 1, *faster* when it
lies above 1, otherwise *within noise* (which passes: the figures are reported); *inconclusive*
when other load spoiled the timings (``perf._contention``) or the interval is too wide to read:
neither slower nor faster is then proven, and the model is not refused for it. When the quantised model is slower, both models are
profiled with ONNX Runtime's profiler at the slowest shape (``slowdown_cost``) to say which kinds
of work grew, and why.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from onnxgate._words import setting
from onnxgate.contract import SIDECAR, contract_dims
from onnxgate.data import Sample, synthetic_samples
from onnxgate.errors import ConfigError, GateError
from onnxgate.model import LoadedModel, Signature
from onnxgate.perf import interval_reasons, judge
from onnxgate.quantize import _data
from onnxgate.quantize._config import QuantizeConfig, Settings
from onnxgate.quantize._report import (
    Latency,
    NodeCost,
    OpGrowth,
    SpeedCost,
    SpeedGate,
    SpeedVerdict,
)

if TYPE_CHECKING:
    from onnxgate.perf import Conditions, Contender, ProfileReport

log = logging.getLogger(__name__)

SPEED_WARMUP = 3
"""Uncounted runs of each model in its worker before the timed slices."""
SPEED_MIN_RUNS = 10
"""Timed runs per model and shape, at least, whatever the budget."""
PROFILE_WARMUP = 3
PROFILE_RUNS = (10, 200)
"""Fewest and most profiled runs per model: about ``PROFILE_SECONDS`` of the quantised model, so
one slow run cannot dominate the mean of a fast model."""
PROFILE_SECONDS = 0.5
TOP_NODES = 5
TOP_KINDS = 6
LABELS = {"float": "float model", "quantised": "quantised model", "all-int8": "all-int8 model"}
METHOD = (
    "each model in a worker process of its own, after an uncounted warm-up, slices of about "
    "0.2 s in turn with the order flipping every round; the speed-up is the float model's "
    "median over the quantised model's, with a 90% percentile-bootstrap interval"
)

KINDS: dict[str, str] = {
    **dict.fromkeys(("Conv", "FusedConv", "NhwcFusedConv", "ConvInteger", "QLinearConv"), "Conv"),
    **dict.fromkeys(("ConvTranspose", "QLinearConvTranspose"), "ConvTranspose"),
    **dict.fromkeys(
        (
            "MatMul",
            "FusedMatMul",
            "Gemm",
            "FusedGemm",
            "MatMulInteger",
            "MatMulIntegerToFloat",
            "DynamicQuantizeMatMul",
            "QLinearMatMul",
            "QGemm",
        ),
        "MatMul",
    ),
}
"""Op types that do one kind of work (a float op, its fused and its integer forms), so the time
of ConvInteger is set against the time of the float Conv it replaced."""


def speed_verdict(
    float_ms: Sequence[float],
    quantized_ms: Sequence[float],
    *,
    seed: int = 0,
    unreliable: Sequence[str] = (),
) -> tuple[float, tuple[float, float], SpeedVerdict]:
    """The quantised model's speed-up (float median / quantised median), interval and verdict.

    ``slower`` when the whole 90% bootstrap interval lies below 1, ``faster`` when it lies above
    1, ``within noise`` otherwise; ``inconclusive`` when ``unreliable`` gives reasons (the
    machine's) or the interval is too wide to read (``perf._stats.judge``). The latencies may be
    in any unit, the same for both.
    """
    if len(float_ms) < 2 or len(quantized_ms) < 2:
        raise ValueError("a speed verdict needs at least two timed runs of each model")
    judged = judge(float_ms, quantized_ms, "latency", unreliable=unreliable, seed=seed)
    return judged.ratio, judged.interval, judged.verdict


def latency_row(
    dims: Mapping[str, int],
    float_ms: Sequence[float],
    quantized_ms: Sequence[float],
    *,
    all_int8_ms: Sequence[float] | None = None,
    seed: int = 0,
    unreliable: Sequence[str] = (),
) -> Latency:
    """One shape's figures and verdict from the two models' latencies (ms).

    ``unreliable``: why the machine spoiled the timings (``Conditions.reasons``); any reason
    makes the verdict ``inconclusive``.
    """
    from onnxgate.perf import NOISY_CV

    ratio, interval, verdict = speed_verdict(
        float_ms, quantized_ms, seed=seed, unreliable=unreliable
    )

    def noisy(values: Sequence[float]) -> bool:
        mean = statistics.fmean(values)
        return mean > 0 and statistics.pstdev(values) / mean > NOISY_CV

    return Latency(
        dims=dict(dims),
        float_ms=statistics.median(float_ms),
        quantized_ms=statistics.median(quantized_ms),
        speedup=ratio,
        interval=interval,
        verdict=verdict,
        float_runs=len(float_ms),
        quantized_runs=len(quantized_ms),
        all_int8_ms=statistics.median(all_int8_ms) if all_int8_ms else None,
        noisy=noisy(float_ms) or noisy(quantized_ms),
    )


def shape_text(dims: Mapping[str, int]) -> str:
    """``batch=1,seq=128``, or ``the fixed shape``."""
    return ",".join(f"{k}={v}" for k, v in dims.items()) or "the fixed shape"


def figures_text(row: Latency) -> str:
    """``at batch=1, 2.66 ms -> 12.5 ms (x0.21, 90% interval 0.19-0.23)``."""
    low, high = row.interval or (row.speedup, row.speedup)
    return (
        f"at {shape_text(row.dims)}, {row.float_ms:.3g} ms -> {row.quantized_ms:.3g} ms "
        f"(x{row.speedup:.2f}, 90% interval {low:.2f}-{high:.2f})"
    )


def judge_speed(
    rows: Sequence[Latency], *, allow_slower: bool, unreliable: Sequence[str] = ()
) -> SpeedGate:
    """The speed gate over every shape timed: slower at any shape fails, unless allowed.

    Slower beyond noise at one shape is proven wherever the others were inconclusive; with no
    shape slower, one inconclusive shape makes the gate inconclusive, which passes: the timings
    prove nothing either way (``unreliable``, the machine's reasons, says why).
    """
    if not rows:
        raise ValueError("the speed gate needs at least one timed shape")
    slower = [r for r in rows if r.verdict == "slower"]
    unsure = [r for r in rows if r.verdict == "inconclusive"]
    verdict: SpeedVerdict = (
        "slower"
        if slower
        else "inconclusive"
        if unsure
        else "faster"
        if all(r.verdict == "faster" for r in rows)
        else "within noise"
    )
    if verdict == "inconclusive":
        reasons = list(unreliable)
        for row in unsure:
            reasons += [r for r in interval_reasons(row.interval or (0.0, 0.0)) if r not in reasons]
        note = (
            f"speed unreliable ({'; '.join(reasons) or 'the timings were spoiled'}): neither "
            "slower nor faster is proven, so the speed is not judged; measured "
            + "; ".join(figures_text(r) for r in rows)
        )
    elif slower:
        figures = "; ".join(figures_text(r) for r in slower)
        if allow_slower:
            note = (
                f"slower than the float model beyond noise: {figures}; written anyway "
                f"({setting('allow_slower', True)})"
            )
        else:
            note = f"slower than the float model beyond noise: {figures}"
    elif verdict == "faster":
        note = "faster than the float model at every shape timed; " + "; ".join(
            figures_text(r) for r in rows
        )
    else:
        note = (
            "not slower than the float model beyond noise (the interval holds 1 at "
            + ", ".join(shape_text(r.dims) for r in rows if r.verdict == "within noise")
            + "); "
            + "; ".join(figures_text(r) for r in rows)
        )
    return SpeedGate(
        gated=True,
        passed=not slower or allow_slower,
        verdict=verdict,
        allow_slower=allow_slower,
        note=note,
        method=METHOD,
    )


def not_gated(note: str, *, allow_slower: bool) -> SpeedGate:
    """The speed gate when the speed was not judged, saying why."""
    return SpeedGate(gated=False, allow_slower=allow_slower, note=note)


def timing_samples(
    loaded: LoadedModel, signature: Signature, config: QuantizeConfig, sample: Sample
) -> list[Sample]:
    """The samples to time: ``bench_inputs``, else one synthetic sample per shape.

    Batches given, else the parent contract's batch bounds, else 1 and the evaluation batch;
    other symbolic dims at the evaluation data's sizes.

    Raises:
        ConfigError: both ``bench_inputs`` and ``bench_batches``.
        FeedError: ``bench_inputs`` that cannot be read or do not fit the model.
    """
    from onnxgate.perf import batch_dim

    if config.bench_inputs is not None:
        if config.bench_batches:
            raise ConfigError(
                "bench_inputs and bench_batches both choose the shapes timed; give one of them.",
                field="bench_inputs",
                related=["bench_batches"],
            )
        loaded_samples = _data.load_samples(config.bench_inputs, signature, option="bench_inputs")
        return [s.sized(signature) for s in loaded_samples]

    dims = _data.sample_dims(signature, sample)
    name = batch_dim(signature)
    batches = list(config.bench_batches)
    if not batches and name is not None:
        if SIDECAR.exists(loaded.path):
            try:
                bound = SIDECAR.read(loaded.path).signature.dims.get(name)
            except GateError:
                bound = None
            if bound is not None and bound.min is not None and bound.max is not None:
                batches = sorted({bound.min, bound.max})
        if not batches:
            batches = sorted({1, dims.get(name, 1)})
    wanted: dict[str, list[int]] = {k: [v] for k, v in dims.items() if k != name}
    if name is not None:
        wanted[name] = batches
    known = contract_dims(loaded.path)
    return synthetic_samples(
        signature, model=loaded.proto, dims=wanted, seed=config.seed, known=known
    )


def race(
    contenders: Sequence[Contender],
    samples: Sequence[Sample],
    *,
    budget_s: float,
    progress: Callable[[str], None],
) -> tuple[list[tuple[Mapping[str, int], list[list[float]]]], Conditions]:
    """Time the contenders against each other per shape, each in a worker process of its own.

    Returns, per sample, its dims and each contender's latencies (ms) in the contenders' order,
    and what the machine did meanwhile.

    Raises:
        GateError: a worker failed (its class kept: ``RunFailed``, ``InternalError`` ...).
    """
    from onnxgate.perf import Contest, Watch

    timed: list[tuple[Mapping[str, int], list[list[float]]]] = []
    runs: dict[str, list[float]] = {}
    with Contest(list(contenders)) as contest:
        watch = Watch(lambda: [os.getpid(), *contest.pids])
        for sample in samples:
            shape = shape_text(sample.dims)
            progress(f"timing float vs quantised at {shape}, interleaved in worker processes")
            latencies = contest.race(
                [sample.feeds] * len(contenders),
                warmup=SPEED_WARMUP,
                budget_s=budget_s,
                min_runs=SPEED_MIN_RUNS,
                progress=lambda message, shape=shape: progress(f"{shape}: {message}"),
            )
            runs |= {
                f"the {c.label} at {shape}": v for c, v in zip(contenders, latencies, strict=True)
            }
            timed.append((sample.dims, latencies))
        conditions = watch.conditions(runs)
    return timed, conditions


def measure(
    paths: Mapping[str, Path],
    samples: Sequence[Sample],
    *,
    budget_s: float,
    seed: int,
    progress: Callable[[str], None],
    to: str = "int8",
    ops_libraries: Sequence[str] = (),
) -> tuple[list[Latency], Conditions]:
    """Time ``float``, ``quantised`` and (when given) ``all-int8`` against each other per shape.

    ``to``: the format converted to, naming the model with no node kept in float (``all-fp16``).
    ``ops_libraries``: custom operator libraries every worker's session registers.

    Returns the latencies per shape and what the machine did meanwhile.

    Raises:
        GateError: a worker failed (its class kept: ``RunFailed``, ``InternalError`` ...).
    """
    from onnxgate.perf import Contender

    labels = [label for label in ("float", "quantised", "all-int8") if label in paths]
    settings = {"ops_libraries": list(ops_libraries)} if ops_libraries else {}
    contenders = [
        Contender(LABELS[label].replace("int8", to), onnx=Path(paths[label]), settings=settings)
        for label in labels
    ]
    timed, conditions = race(contenders, samples, budget_s=budget_s, progress=progress)
    # judged once the conditions are known: a contest the machine spoiled proves nothing
    rows: list[Latency] = []
    for dims, latencies in timed:
        by_label = dict(zip(labels, latencies, strict=True))
        rows.append(
            latency_row(
                dims,
                by_label["float"],
                by_label["quantised"],
                all_int8_ms=by_label.get("all-int8"),
                seed=seed,
                unreliable=conditions.reasons,
            )
        )
    return rows, conditions


def _ms_text(ms: float) -> str:
    return f"{ms:.3g} ms"


def growth_text(growth: OpGrowth) -> str:
    """``ConvInteger 20.9 ms (85%) where float Conv took 1.59 ms``."""
    ran = " + ".join(f"{op} {_ms_text(ms)}" for op, ms in growth.quantized_ops.items())
    if not growth.float_ops:
        return f"{ran} ({growth.share:.0%}), where the float model ran no {growth.kind}"
    before = " + ".join(growth.float_ops)
    return f"{ran} ({growth.share:.0%}) where float {before} took {_ms_text(growth.float_ms)}"


def _by_kind(op_types: Sequence[tuple[str, float]]) -> dict[str, dict[str, float]]:
    kinds: dict[str, dict[str, float]] = {}
    for name, ms in op_types:
        kinds.setdefault(KINDS.get(name, name), {})[name] = ms
    return kinds


def _hint(grown: Sequence[OpGrowth], settings: Settings, quantized_kinds: set[str]) -> str:
    """What to try, from the op types that grew and how the model was quantised."""
    ops = {op for g in grown for op in g.quantized_ops}
    tips: list[str] = []
    if "ConvInteger" in ops:
        others = sorted(quantized_kinds - {"Conv"})
        keep = (
            f"quantise only {'/'.join(others)} ({setting('op_types', others)}) and keep "
            "Conv in float"
            if others
            else "keep Conv in float (it is all this model quantises)"
        )
        tips.append(
            "dynamic quantisation turns each Conv into ConvInteger, with DynamicQuantizeLinear "
            "before it and Cast, Mul and Add after it; ONNX Runtime's CPU provider runs "
            "ConvInteger with a generic kernel, without the blocked (NCHWc) layout and the "
            f"bias/activation fusion of its float Conv: {keep}, or quantise statically "
            f"({setting('mode', 'static')} with {setting('calibration')} data: QDQ, which ONNX "
            "Runtime fuses into QLinearConv)"
        )
    if ops & {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}:
        tips.append(
            "dynamic MatMul quantises its activation on every run; on small MatMuls that costs "
            "more than int8 saves: quantise statically "
            f"({setting('mode', 'static')} with {setting('calibration')} data), or leave MatMul "
            f"out of {setting('op_types')}"
        )
    if ops & {"QuantizeLinear", "DequantizeLinear"}:
        tips.append(
            "QuantizeLinear/DequantizeLinear nodes that ONNX Runtime did not fuse into int8 "
            "kernels convert tensors back and forth as nodes of their own"
        )
    qlinear = sorted(ops & {"QLinearConv", "QLinearMatMul", "QGemm"})
    if qlinear and not tips:
        tips.append(
            f"ONNX Runtime's int8 kernels ({', '.join(qlinear)}) are slower than its float ones "
            "at this shape on this CPU"
        )
    if not grown:
        tips.append(
            "no op type's kernel time grew in the profile: the time is lost outside the kernels "
            "(ONNX Runtime's own work per run, more nodes to schedule), or the profile missed "
            "what the timed runs saw; int8 does not pay at this shape on this CPU"
        )
    elif not tips:
        tips.append(f"int8 ({settings.mode}) does not pay at this shape on this CPU")
    return "; ".join(tips) + ". Otherwise keep the float model."


def slowdown_cost(
    float_profile: ProfileReport,
    quantized_profile: ProfileReport,
    *,
    dims: Mapping[str, int],
    settings: Settings,
) -> SpeedCost:
    """Which kinds of work grew from the float to the quantised model, from two profiles.

    Args:
        float_profile: the float model's profile.
        quantized_profile: the quantised model's, at the same shape.
        dims: the shape profiled.
        settings: how the model was quantised (for the hint).
    """
    before = _by_kind([(t.name, t.ms) for t in float_profile.op_types])
    after = _by_kind([(t.name, t.ms) for t in quantized_profile.op_types])
    total = quantized_profile.node_ms
    kinds: list[OpGrowth] = []
    for kind, ops in after.items():
        old = before.get(kind, {})
        float_ms, quantized_ms = sum(old.values()), sum(ops.values())
        kinds.append(
            OpGrowth(
                kind=kind,
                float_ops=dict(sorted(old.items(), key=lambda item: -item[1])),
                quantized_ops=dict(sorted(ops.items(), key=lambda item: -item[1])),
                float_ms=float_ms,
                quantized_ms=quantized_ms,
                growth_ms=quantized_ms - float_ms,
                share=quantized_ms / total if total > 0 else 0.0,
            )
        )
    grown = sorted((k for k in kinds if k.growth_ms > 0), key=lambda k: -k.growth_ms)[:TOP_KINDS]
    quantised_kinds = {  # kinds with an op type the float model did not run: the integer forms
        KINDS[t.name]
        for t in quantized_profile.op_types
        if t.name in KINDS and t.name not in before.get(KINDS[t.name], {})
    }
    nodes = [
        NodeCost(
            node=n.node,
            op_type=n.op_type,
            ms=n.ms,
            share=n.share,
            inputs=[str(s) for s in n.inputs],
            outputs=[str(s) for s in n.outputs],
        )
        for n in quantized_profile.nodes[:TOP_NODES]
    ]
    return SpeedCost(
        dims=dict(dims),
        runs=quantized_profile.runs,
        float_ms=float_profile.node_ms,
        quantized_ms=quantized_profile.node_ms,
        float_run_ms=float_profile.run_ms,
        quantized_run_ms=quantized_profile.run_ms,
        grown=grown,
        nodes=nodes,
        hint=_hint(grown, settings, quantised_kinds),
    )


def profile_cost(
    float_path: Path,
    quantized_path: Path,
    sample: Sample,
    settings: Settings,
    progress: Callable[[str], None],
    *,
    quantized_ms: float,
    ops_libraries: Sequence[str] = (),
) -> SpeedCost:
    """Profile both models on ``sample`` (in this process) and say which kinds of work grew.

    ``quantized_ms``, the quantised model's median latency at that shape, sets the number of
    profiled runs (``PROFILE_RUNS``, ``PROFILE_SECONDS``).

    Raises:
        GateError: ONNX Runtime could not profile a model.
    """
    from onnxgate.perf import ProfileConfig, profile, save_arrays
    from onnxgate.settings import FeedSettings, SessionSettings

    with tempfile.TemporaryDirectory(prefix="onnxgate-quantize-profile-") as folder:
        feeds = Path(folder) / "feeds.npz"
        save_arrays(feeds, sample.feeds)
        fewest, most = PROFILE_RUNS
        runs = min(most, max(fewest, int(PROFILE_SECONDS * 1000 / max(quantized_ms, 1e-3))))
        config = ProfileConfig(
            feeds=FeedSettings(inputs=feeds),
            session=SessionSettings(ops_libraries=ops_libraries),
            warmup=PROFILE_WARMUP,
            runs=runs,
            top=TOP_NODES,
        )
        reports = []
        for label, path in (("float", float_path), ("quantised", quantized_path)):
            progress(f"profiling the {label} model at {shape_text(sample.dims)}")
            reports.append(profile(path, config))
    return slowdown_cost(reports[0], reports[1], dims=sample.dims, settings=settings)
