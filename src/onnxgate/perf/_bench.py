"""Latency and throughput of a model on ONNX Runtime, measured so the figures can be trusted.

Each configuration (batch size, dims, thread count) gets its own session, a warm-up that is not
counted, then runs until a count or a time budget is reached. Figures are percentiles of the
per-run latency (``perf_counter_ns`` around ``session.run``), not an average of a loop, and the
coefficient of variation says whether the machine was quiet enough to trust them.

Alone, the model runs in this process. Against a contender (``vs``: a PyTorch module or another
ONNX model) both run in worker processes of their own, in interleaved slices (``_contest.py``), so
neither thread pool distorts the other and drift hits both alike.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate.contract import contract_dims, contract_samples
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample, load_feeds, synthetic_samples, validate_feeds
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._contention import Conditions, Watch
from onnxgate.perf._contest import Contender, Contest
from onnxgate.perf._stats import Verdict, judge
from onnxgate.settings import FeedSettings, Part, SessionSettings

log = logging.getLogger(__name__)

NOISY_CV = 0.10
"""A coefficient of variation above this marks a configuration as too noisy to compare."""
KEPT_LATENCIES = 2000
"""Per-run latencies a ``BenchResult`` keeps (``latencies_ms``): enough for a distribution."""


class BenchConfig(Part):
    """What to measure, on which session."""

    batches: tuple[Annotated[int, Field(ge=1)], ...] = ()
    """Sizes of the batch dimension (the first input's axis 0, when symbolic)."""
    feeds: FeedSettings = FeedSettings()
    """Sizes of other symbolic dimensions (every combination is measured), value ranges and
    seed of synthetic feeds, or a data file. Without any, a model with a contract is timed at
    the shapes of its golden samples."""
    threads: tuple[Annotated[int, Field(ge=0)], ...] = ()
    """Intra-op thread counts to sweep; empty: ``session.threads``."""
    warmup: int = Field(10, ge=0)
    """Runs before timing starts, not counted."""
    runs: int | None = Field(None, ge=1)
    """A fixed number of timed runs; otherwise ``budget`` decides."""
    budget: float = Field(2.0, gt=0, allow_inf_nan=False)
    """Seconds of timed runs per configuration (at least ``min_runs``)."""
    min_runs: int = Field(10, ge=1)
    session: SessionSettings = SessionSettings()
    vs: str | None = None
    """A contender: ``torch:package.module:factory`` or another ``.onnx`` file."""
    tuned: bool = False
    """Run with what ``tune`` recorded in the contract for this machine (settings and graph)."""
    objective: Literal["latency", "throughput"] | None = None
    """With ``tuned``: which tuning to use when the contract holds several."""
    timeout: float = Field(600.0, gt=0, allow_inf_nan=False)
    """Seconds a contender's worker process may take for one answer."""
    runtime: str = "installed"
    """Time the model on another release or package (``onnxruntime-openvino==1.24.1``), in a
    worker inside its isolated environment; a ``vs`` ONNX model then runs on the installed
    runtime with the same settings on its own providers."""

    def _refuse_contradictions(self) -> None:
        if self.tuned and (self.threads or self.session.threads):
            field = "threads" if self.threads else "session.threads"
            raise ConfigError(
                f"tuned runs the tuned thread count; leave out {field}.",
                field=field,
                related=["tuned"],
            )
        if self.feeds.inputs is not None and self.batches:
            raise ConfigError(
                f"batches shape synthetic feeds; they cannot go with feeds.inputs "
                f"{self.feeds.inputs}.",
                field="batches",
                related=["feeds.inputs"],
            )
        self.feeds.refuse_with_inputs()

    def thread_counts(self) -> list[int]:
        """The intra-op thread counts measured, one session each."""
        return list(self.threads) or [self.session.threads]

    def session_at(self, threads: int) -> SessionSettings:
        """The session settings of one thread count.

        Raises:
            ConfigError: settings the installed ONNX Runtime cannot take (``check_session``).
        """
        from onnxgate.runners import check_session  # imports ONNX Runtime

        session = self.session.model_copy(update={"threads": threads})
        check_session(session)
        return session


class BenchResult(BaseModel):
    """One configuration's figures."""

    model_config = ConfigDict(extra="forbid")

    batch: int | None
    dims: dict[str, int]
    shapes: dict[str, list[int]] = {}
    """The shape of every input timed: what ``dims`` leaves unsaid, such as unnamed axes."""
    threads: int
    runs: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    throughput: float
    """Samples per second at the mean latency (batch / mean)."""
    cv: float
    """Coefficient of variation of the latencies (standard deviation / mean)."""
    noisy: bool
    latencies_ms: list[float] = []
    """The timed runs' latencies in run order, for distribution plots; beyond ``KEPT_LATENCIES``
    runs, that many spread evenly over the whole run (the figures above use every run)."""


class Contestant(BaseModel):
    """The contender's side of ``bench --vs``: what ran and its figures per configuration."""

    model_config = ConfigDict(extra="forbid")

    name: str
    runtime: str
    results: list[BenchResult]


class Ratio(BaseModel):
    """One configuration of ``bench --vs``: the contender's median latency over the model's."""

    model_config = ConfigDict(extra="forbid")

    batch: int | None
    dims: dict[str, int]
    threads: int
    ratio: float
    """Above 1: the model is that many times faster than the contender."""
    interval: tuple[float, float] | None = None
    """90% percentile-bootstrap interval of ``ratio``."""
    verdict: Verdict | None = None
    """The model against the contender, as ``perf._stats.judge`` calls it: ``inconclusive``
    when the machine spoiled the timings or the interval is too wide to read."""
    reasons: list[str] = []
    """Why the ratio is not a measurement; empty when it is."""

    @property
    def reliable(self) -> bool:
        """The ratio is a measurement: the machine was quiet and the interval is narrow."""
        return not self.reasons


class BenchReport(BaseModel):
    """The answer of ``onnxgate bench``."""

    model_config = ConfigDict(extra="forbid")

    model: str
    runtime: str
    providers: list[str]
    optimization: str
    session: dict[str, Any] = {}
    """Every session setting used, as ``SessionSettings.wire()`` (threads: the first count)."""
    method: str = ""
    """How the figures were taken: in process, or interleaved in worker processes."""
    results: list[BenchResult]
    vs: Contestant | None = None
    ratio: list[Ratio] = []
    warnings: list[str] = []
    notes: list[str] = []
    """What the run chose and why (the contract's shapes, its tuned settings): not warnings."""
    conditions: Conditions | None = None
    """What the machine did meanwhile: other processes' CPU share, steal, drift, a baseline."""

    reliable: bool = True
    """No sign that the machine was busy with something else while the figures were taken."""

    @property
    def passed(self) -> bool:
        """Always True: bench measures and has no thresholds (noisy figures are warnings)."""
        return True

    @property
    def doubts(self) -> list[str]:
        """Why some figures cannot be trusted: the machine's conditions, then the ratios'."""
        found = list(self.conditions.reasons) if self.conditions is not None else []
        for ratio in self.ratio:
            found += [reason for reason in ratio.reasons if reason not in found]
        return found


def batch_dim(signature: Signature) -> str | None:
    """The name of the batch dimension: the first input's axis 0, when it is symbolic."""
    for spec in signature.inputs:
        if spec.shape and isinstance(spec.shape[0], str):
            return spec.shape[0]
    return None


def synthetic_sample(
    loaded: LoadedModel, signature: Signature, feeds: FeedSettings, batch: int | None
) -> Sample:
    """One synthetic sample at one size per dimension, the batch at ``batch`` when given.

    Sizes the settings leave out come from the contract's samples, then from the model.

    Raises:
        ConfigError: ``batch`` on a model whose first input has no symbolic batch dimension.
    """
    dims: dict[str, int] = feeds.one_size()
    if batch is not None:
        name = batch_dim(signature)
        if name is None:
            raise ConfigError(
                f"{loaded.path}: the first input has no symbolic batch dimension, so batch "
                "cannot change it.",
                hint="Size the model's symbolic dimensions with feeds.dims (see `inspect`).",
                field="batch",
                related=["feeds.dims"],
            )
        dims[name] = batch
    return synthetic_samples(
        signature,
        model=loaded.proto,
        dims=dims,
        ranges=feeds.value_ranges(),
        seed=feeds.seed,
        known=contract_dims(loaded.path),
    )[0]


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def bench(
    model: str | Path | LoadedModel,
    config: BenchConfig | None = None,
    *,
    progress: Callable[..., None] | None = None,
) -> BenchReport:
    """Measure every configuration; the library function behind ``onnxgate bench``.

    ``progress`` is called with a message and, as the keyword ``fraction``, the share done.

    Raises:
        ConfigError: ``batches`` on a model without a symbolic batch dimension, or bad settings.
        RunFailed: ONNX Runtime cannot load or run the model.
    """
    config = config or BenchConfig()
    feeds = config.feeds
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    dims = feeds.sizes()
    ranges = feeds.value_ranges()
    batch_name = batch_dim(signature)
    if config.batches:
        if batch_name is None:
            raise ConfigError(
                f"{loaded.path}: the first input has no symbolic batch dimension, so batches "
                "cannot change it.",
                hint="Size the model's symbolic dimensions with feeds.dims (see `inspect`).",
                field="batches",
                related=["feeds.dims"],
            )
        dims[batch_name] = list(config.batches)
    notes: list[str] = []
    golden = None
    if feeds.inputs is None and not dims and not ranges:
        golden = contract_samples(loaded.path)
    if feeds.inputs is not None:
        # named by the sizes the data has, so the table says what real data was timed at
        samples = [s.sized(signature) for s in load_feeds(feeds.inputs, signature=signature)]
    elif golden:
        samples = golden
        notes.append(
            "timed at the shapes of the contract's golden samples ("
            + ", ".join(s.label for s in golden)
            + "): the shapes the model was proven at; --batch and --dim choose others"
        )
    else:
        # sizes left out are the contract's (a detector proven at 320 only), as tune's are
        samples = synthetic_samples(
            signature,
            model=loaded.proto,
            dims=dims,
            ranges=ranges,
            seed=feeds.seed,
            known=contract_dims(loaded.path),
        )
    for sample in samples:
        validate_feeds(signature, sample.feeds, where=sample.label)
    options = [config.session_at(threads) for threads in config.thread_counts()]
    if config.tuned:
        loaded, options = _tuned(loaded, config, samples, notes)
    total = len(options) * len(samples)
    done = [0]

    def say(message: str, *, step: bool = False) -> None:
        done[0] += step
        if progress is not None:
            progress(message, fraction=min(done[0], total) / total)
        else:
            log.info("%s", message)

    if config.vs is None and _installed(config.runtime):
        report = _bench_here(loaded, config, options, samples, batch_name, say)
    else:
        report = _bench_workers(loaded, config, options, samples, batch_name, say)
    return report.model_copy(update={"notes": notes + report.notes})


def _tuned(
    loaded: LoadedModel, config: BenchConfig, samples: Sequence[Sample], notes: list[str]
) -> tuple[LoadedModel, list[SessionSettings]]:
    """The graph and settings ``tune`` recorded for this machine (one shape: tuned at it)."""
    from onnxgate.perf._tuned import tuned_for
    from onnxgate.runners import check_session

    # The shape asked for picks the record; with none asked, a single record needs no picking.
    asked = bool(config.batches or config.feeds.dims)
    dims = samples[0].dims if asked and len(samples) == 1 else None
    settings, path = tuned_for(loaded.path, objective=config.objective, dims=dims)
    options = SessionSettings.from_wire(settings)
    check_session(options)
    notes.append(f"tuned settings from the contract: {options.describe()}; graph {path.name}")
    graph = loaded if path == loaded.path else load_model(path)
    return graph, [options]


def _result(
    latencies: Sequence[float], sample: Sample, threads: int, batch_name: str | None
) -> BenchResult:
    mean = statistics.fmean(latencies)
    cv = statistics.pstdev(latencies) / mean if mean > 0 else 0.0
    batch = sample.dims.get(batch_name) if batch_name else None
    return BenchResult(
        batch=batch,
        dims=dict(sample.dims),
        shapes=sample.shapes(),
        threads=threads,
        runs=len(latencies),
        p50_ms=_percentile(latencies, 50),
        p90_ms=_percentile(latencies, 90),
        p99_ms=_percentile(latencies, 99),
        mean_ms=mean,
        min_ms=min(latencies),
        throughput=(batch or 1) * 1000.0 / mean if mean > 0 else 0.0,
        cv=cv,
        noisy=cv > NOISY_CV,
        latencies_ms=kept_latencies(latencies),
    )


def kept_latencies(latencies: Sequence[float], limit: int = KEPT_LATENCIES) -> list[float]:
    """At most ``limit`` latencies in run order, evenly spread over all runs, rounded to 10 ns."""
    values = np.asarray(latencies, dtype=np.float64)
    if values.size > limit:
        values = values[np.linspace(0, values.size - 1, limit).round().astype(np.int64)]
    return [round(float(v), 5) for v in values]


def _noise(result: BenchResult, label: str, who: str = "") -> str | None:
    if not result.noisy:
        return None
    return (
        f"{who}{label}, threads={result.threads or 'auto'}: latencies vary by {result.cv:.0%} "
        "(CV); the machine is too noisy to compare this figure"
    )


def _bench_here(
    loaded: LoadedModel,
    config: BenchConfig,
    options: Sequence[SessionSettings],
    samples: Sequence[Sample],
    batch_name: str | None,
    say: Callable[..., None],
) -> BenchReport:
    """Every configuration in this process, one session per thread count."""
    from onnxgate.runners import (
        open_runner,
        runtime_version,  # imports ONNX Runtime
    )

    results: list[BenchResult] = []
    warnings: list[str] = []
    providers: list[str] = []
    runs: dict[str, list[float]] = {}
    watch = Watch(lambda: [os.getpid()])
    for option in options:
        threads = option.threads
        with open_runner(loaded, option, extras=contract_extras()) as runner:
            providers = runner.providers()
            for sample in samples:
                say(f"{sample.label}, threads={threads or 'auto'}: warming up")
                for _ in range(config.warmup):
                    runner.infer(sample.feeds)
                say(f"{sample.label}, threads={threads or 'auto'}: timing")
                latencies: list[float] = []
                deadline = time.perf_counter() + config.budget
                while True:
                    latencies.append(runner.infer(sample.feeds).latency_ns / 1e6)
                    if config.runs is not None:
                        if len(latencies) >= config.runs:
                            break
                    elif len(latencies) >= config.min_runs and time.perf_counter() >= deadline:
                        break
                result = _result(latencies, sample, threads, batch_name)
                runs[f"{sample.label}, threads={threads or 'auto'}"] = latencies
                say(f"{sample.label}, threads={threads or 'auto'}: done", step=True)
                results.append(result)
                if note := _noise(result, sample.label):
                    warnings.append(note)
    return BenchReport(
        model=str(loaded.path),
        runtime=f"onnxruntime {runtime_version()}",
        providers=providers,
        optimization=options[0].opt_level,
        session=options[0].wire(),
        method="in this process: per configuration one session, uncounted warm-up, timed runs",
        results=results,
        warnings=warnings + _unreliable(conditions := watch.conditions(runs)),
        conditions=conditions,
        reliable=conditions.reliable,
    )


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


def _installed(runtime: str) -> bool:
    from onnxgate.compat.runtime import RuntimeSpec

    return RuntimeSpec.parse(runtime).installed


def _bench_workers(
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
        + _unreliable(conditions)
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
                mine = _result(timings[0], sample, threads, batch_name)
                results.append(mine)
                if note := _noise(mine, sample.label):
                    warnings.append(note)
                if config.vs is None:
                    continue
                yours = _result(timings[1], sample, threads, batch_name)
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
                if note := _noise(yours, sample.label, f"{name}: "):
                    warnings.append(note)
        conditions = watch.conditions(runs)
    ratios = [
        _judged(ratio, theirs, ours, conditions)
        for ratio, (theirs, ours) in zip(ratios, raced, strict=True)
    ]
    return _Races(results, theirs_results, ratios, warnings, notes, conditions, loaded_sides)


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


def _unreliable(conditions: Conditions) -> list[str]:
    """The warning of a measurement the machine spoiled, with why; none when it did not."""
    if conditions.reliable:
        return []
    return [
        "UNRELIABLE: "
        + "; ".join(conditions.reasons)
        + ". These figures, and any ratio between them, measure the machine, not the model: "
        "run again when it is idle"
    ]
