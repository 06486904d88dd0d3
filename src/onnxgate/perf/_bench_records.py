"""What ``bench`` is asked and what it answers: its config, and the figures of a configuration.

Shared by the two ways bench times a model: in this process (``_bench``), and in worker processes
of their own, interleaved with a contender (``_bench_workers``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.perf._contention import Conditions
from onnxgate.perf._stats import Verdict
from onnxgate.settings import FeedSettings, Part, SessionSettings

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


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def bench_result(
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


def noise_warning(result: BenchResult, label: str, who: str = "") -> str | None:
    if not result.noisy:
        return None
    return (
        f"{who}{label}, threads={result.threads or 'auto'}: latencies vary by {result.cv:.0%} "
        "(CV); the machine is too noisy to compare this figure"
    )


def unreliable_warning(conditions: Conditions) -> list[str]:
    """The warning of a measurement the machine spoiled, with why; none when it did not."""
    if conditions.reliable:
        return []
    return [
        "UNRELIABLE: "
        + "; ".join(conditions.reasons)
        + ". These figures, and any ratio between them, measure the machine, not the model: "
        "run again when it is idle"
    ]
