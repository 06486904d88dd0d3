"""``bench`` in worker processes: against a contender (``vs``), or inside another runtime.

Both sides run in worker processes of their own, in interleaved slices (``_contest.py``), so
neither thread pool distorts the other and drift hits both alike; the machine is watched
meanwhile, and each ratio is judged by the judge tune and quantize use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.data import Sample, synthetic_samples, validate_feeds
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._bench_records import (
    BenchConfig,
    BenchReport,
    BenchResult,
    Contestant,
    Ratio,
    bench_result,
    noise_warning,
    unreliable_warning,
)
from onnxgate.perf._contention import Conditions, Watch
from onnxgate.perf._contest import Contender, Contest
from onnxgate.perf._stats import judge
from onnxgate.settings import SessionSettings


def bench_workers(
    loaded: LoadedModel,
    config: BenchConfig,
    options: Sequence[SessionSettings],
    samples: Sequence[Sample],
    batch_name: str | None,
    say: Callable[..., None],
) -> BenchReport:
    """The model (and a contender) in worker processes of their own, timed interleaved.

    The model's worker runs inside another runtime's environment with ``config.runtime``.
    """
    from onnxgate.compat.runtime import RuntimeSpec, runtime_profile

    spec = RuntimeSpec.parse(config.runtime)
    known = None if spec.installed else runtime_profile(spec).all_providers
    other: LoadedModel | None = None
    name = config.vs
    if config.vs is not None and not config.vs.startswith("torch:"):
        other = load_model(Path(config.vs))
        name = str(other.path)
    sides = _Sides(loaded, config, spec.installed, str(spec), known, other, name)
    races = _race(sides, options, samples, batch_name, say)
    ours_loaded = races.loaded[0]
    vs = None
    if config.vs is not None:
        vs = Contestant(
            name=str(name), runtime=str(races.loaded[1]["runtime"]), results=races.theirs
        )
    alone = "in a worker process inside the runtime's isolated environment; per configuration "
    conditions = races.conditions
    return BenchReport(
        model=str(loaded.path),
        runtime=str(ours_loaded["runtime"]),
        providers=list(ours_loaded.get("providers", [])),
        optimization=options[0].opt_level,
        session=dict(ours_loaded.get("settings") or options[0].wire()),
        method=(
            alone + "an uncounted warm-up, then timed runs"
            if config.vs is None
            else "each side in a worker process of its own; per configuration an uncounted "
            "warm-up, then slices of about 0.2 s in turn, the order flipping every round (A B, "
            "B A, ...), with a 50 ms pause between slices"
        ),
        results=races.results,
        vs=vs,
        ratio=races.ratios,
        warnings=races.notes
        + races.warnings
        + unreliable_warning(conditions)
        + _wide(races.ratios, conditions),
        conditions=conditions,
        reliable=conditions.reliable,
    )


@dataclass(frozen=True)
class _Sides:
    """Who races at one session configuration: the model, then the contender (``vs``), if any."""

    loaded: LoadedModel
    config: BenchConfig
    installed: bool
    """The model runs on the installed runtime (else in ``runtime``'s isolated environment)."""
    runtime: str
    known: list[str] | None
    """The providers the other runtime has (None: the installed one's)."""
    other: LoadedModel | None
    """The contender's .onnx file (None: no contender, or a torch one)."""
    name: str | None

    def __call__(self, option: SessionSettings) -> list[Contender]:
        from onnxgate.runners import resolved_wire

        config, other, name = self.config, self.other, self.name
        ours = Contender(
            str(self.loaded.path),
            onnx=self.loaded.path,
            settings=resolved_wire(option, self.known),
            runtime=None if self.installed else self.runtime,
        )
        if config.vs is None:
            return [ours]
        if other is None:
            theirs = Contender(
                str(name),
                torch=config.vs.removeprefix("torch:"),
                signature=self.loaded.path,
                threads=option.threads,
            )
        else:
            # on another runtime, the providers were asked of it: the contender runs here on its own
            own = (
                option
                if self.installed
                else option.model_copy(update={"providers": (), "provider_options": {}})
            )
            theirs = Contender(str(name), onnx=other.path, settings=own.wire())
        return [ours, theirs]


@dataclass(frozen=True)
class _Races:
    """Every configuration and sample raced: each side's results, the ratios, what was noted."""

    results: list[BenchResult]
    theirs: list[BenchResult]
    ratios: list[Ratio]
    """Judged: with their intervals and verdicts."""
    warnings: list[str]
    notes: list[str]
    conditions: Conditions
    loaded: list[dict[str, Any]]
    """What each side's worker loaded, at the last configuration."""


def _race(
    sides: _Sides,
    options: Sequence[SessionSettings],
    samples: Sequence[Sample],
    batch_name: str | None,
    say: Callable[..., None],
) -> _Races:
    """Race the sides at every configuration on every sample, in one contest, watched."""
    config, other, name = sides.config, sides.other, sides.name
    results: list[BenchResult] = []
    theirs_results: list[BenchResult] = []
    ratios: list[Ratio] = []
    raced: list[tuple[list[float], list[float]]] = []
    warnings: list[str] = []
    notes: list[str] = []
    runs: dict[str, list[float]] = {}
    with Contest(sides(options[0]), timeout_s=config.timeout) as contest:
        watch = Watch(lambda: [os.getpid(), *contest.pids])
        for index, option in enumerate(options):
            threads = option.threads
            loaded_sides = contest.loaded if index == 0 else contest.load(sides(option))
            for sample in samples:
                feeds = [dict(sample.feeds)]
                if config.vs is not None:
                    feeds.append(
                        dict(sample.feeds)
                        if other is None
                        else _other_feeds(other, sample, config, notes)
                    )
                label = f"{sample.label}, threads={threads or 'auto'}"
                timings = contest.race(
                    feeds,
                    warmup=config.warmup,
                    budget_s=config.budget,
                    runs=config.runs,
                    min_runs=config.min_runs,
                    progress=lambda message, label=label: say(f"{label}: {message}"),
                )
                say(f"{label}: done", step=True)
                runs[f"the model at {label}" if config.vs else label] = timings[0]
                if config.vs is not None:
                    runs[f"{name} at {label}"] = timings[1]
                mine = bench_result(timings[0], sample, threads, batch_name)
                results.append(mine)
                if note := noise_warning(mine, sample.label):
                    warnings.append(note)
                if config.vs is None:
                    continue
                yours = bench_result(timings[1], sample, threads, batch_name)
                theirs_results.append(yours)
                raced.append((timings[1], timings[0]))
                ratios.append(
                    Ratio(
                        batch=mine.batch,
                        dims=mine.dims,
                        threads=threads,
                        ratio=yours.p50_ms / mine.p50_ms if mine.p50_ms > 0 else 0.0,
                    )
                )
                if note := noise_warning(yours, sample.label, f"{name}: "):
                    warnings.append(note)
        conditions = watch.conditions(runs)
    ratios = [
        _judged(ratio, theirs, ours, conditions)
        for ratio, (theirs, ours) in zip(ratios, raced, strict=True)
    ]
    return _Races(results, theirs_results, ratios, warnings, notes, conditions, loaded_sides)


def _other_feeds(
    other: LoadedModel, sample: Sample, config: BenchConfig, notes: list[str]
) -> dict[str, np.ndarray]:
    """The sample adapted to another ONNX model: shared inputs as they are, others synthetic."""
    theirs = Signature.from_graph(other.proto.graph)
    wanted = {spec.name for spec in theirs.inputs}
    feeds = {k: v for k, v in sample.feeds.items() if k in wanted}
    dropped = sorted(set(sample.feeds) - wanted)
    missing = sorted(wanted - set(feeds))
    if missing:
        known = {d for spec in theirs.inputs for d in spec.symbolic_dims}
        made = synthetic_samples(
            theirs,
            model=other.proto,
            dims={k: v for k, v in sample.dims.items() if k in known},
            ranges={k: v for k, v in config.feeds.value_ranges().items() if k in wanted},
            seed=config.feeds.seed,
        )[0]
        feeds.update({k: made.feeds[k] for k in missing})
    for name in dropped:
        note = f"{other.path.name} has no input {name!r}: it runs without it"
        if note not in notes:
            notes.append(note)
    for name in missing:
        note = f"{other.path.name} takes {name!r}, which the model does not: synthetic values"
        if note not in notes:
            notes.append(note)
    return dict(validate_feeds(theirs, feeds, where=f"{other.path.name}, {sample.label}"))


def _judged(
    ratio: Ratio, theirs: Sequence[float], ours: Sequence[float], conditions: Conditions
) -> Ratio:
    """The ratio with its interval and verdict from the judge tune and quantize use."""
    judged = judge(theirs, ours, "latency", unreliable=conditions.reasons)
    return ratio.model_copy(
        update={
            "interval": judged.interval,
            "verdict": judged.verdict,
            "reasons": list(judged.reasons),
        }
    )


def _wide(ratios: Sequence[Ratio], conditions: Conditions) -> list[str]:
    """The warning of ratios too uncertain to read, on a machine that was otherwise quiet."""
    if not conditions.reliable:
        return []  # the UNRELIABLE warning already says the ratios measure the machine
    wide = [r for r in ratios if r.reasons]
    if not wide:
        return []
    shown = "; ".join(
        f"{r.ratio:.2f}x at {','.join(f'{k}={v}' for k, v in r.dims.items()) or 'fixed'}, "
        f"threads={r.threads or 'auto'}: {r.reasons[0]}"
        for r in wide
    )
    return [f"UNRELIABLE ratio: {shown}; time longer (budget) for a narrower interval"]
