"""Latency and throughput of a model on ONNX Runtime, measured so the figures can be trusted.

Each configuration (batch size, dims, thread count) gets its own session, a warm-up that is not
counted, then runs until a count or a time budget is reached. Figures are percentiles of the
per-run latency (``perf_counter_ns`` around ``session.run``), not an average of a loop, and the
coefficient of variation says whether the machine was quiet enough to trust them.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate.data import ValueRange, synthetic_samples, validate_feeds
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model

log = logging.getLogger(__name__)

NOISY_CV = 0.10
"""A coefficient of variation above this marks a configuration as too noisy to compare."""


@dataclass(frozen=True)
class BenchConfig:
    """What to measure."""

    batches: Sequence[int] = ()
    """Sizes of the batch dimension (the first input's axis 0, when symbolic)."""
    dims: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """Sizes of other symbolic dimensions; every combination is measured."""
    threads: Sequence[int] = (0,)
    """Intra-op thread counts; 0 lets ONNX Runtime choose."""
    warmup: int = 10
    runs: int | None = None
    """A fixed number of timed runs; otherwise ``budget_s`` decides."""
    budget_s: float = 2.0
    """Seconds of timed runs per configuration (at least ``min_runs``)."""
    min_runs: int = 10
    ranges: Mapping[str, ValueRange] = field(default_factory=dict)
    seed: int = 0
    providers: tuple[str, ...] = ()
    optimization: str = "all"

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_runs < 1 or (self.runs is not None and self.runs < 1):
            raise ConfigError("--warmup must be 0 or more and --runs 1 or more.")
        if self.budget_s <= 0:
            raise ConfigError("--budget must be a positive number of seconds.")
        if any(b < 1 for b in self.batches):
            raise ConfigError("--batch sizes must be 1 or more.")


class BenchResult(BaseModel):
    """One configuration's figures."""

    model_config = ConfigDict(extra="forbid")

    batch: int | None
    dims: dict[str, int]
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


class BenchReport(BaseModel):
    """The answer of ``onnxgate bench``."""

    model_config = ConfigDict(extra="forbid")

    model: str
    runtime: str
    providers: list[str]
    optimization: str
    results: list[BenchResult]
    warnings: list[str] = []


def batch_dim(signature: Signature) -> str | None:
    """The name of the batch dimension: the first input's axis 0, when it is symbolic."""
    for spec in signature.inputs:
        if spec.shape and isinstance(spec.shape[0], str):
            return spec.shape[0]
    return None


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def bench(
    model: str | Path | LoadedModel,
    config: BenchConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure every configuration; the library function behind ``onnxgate bench``.

    Raises:
        ConfigError: ``--batch`` on a model without a symbolic batch dimension, or bad options.
        RunFailed: ONNX Runtime cannot load or run the model.
    """
    from onnxgate.runners import OrtOptions, OrtRunner  # imports ONNX Runtime
    from onnxgate.runners._ort import runtime_version as runner_version

    config = config or BenchConfig()
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    dims = {k: list(v) for k, v in config.dims.items()}
    if config.batches:
        name = batch_dim(signature)
        if name is None:
            raise ConfigError(
                f"{loaded.path}: the first input has no symbolic batch dimension, so --batch "
                "cannot change it.",
                hint="Use --dim NAME=SIZE for the model's symbolic dimensions (see `inspect`).",
            )
        dims[name] = list(config.batches)
    batch_name = batch_dim(signature)
    say = progress or (lambda message: log.info("%s", message))
    samples = synthetic_samples(
        signature, model=loaded.proto, dims=dims, ranges=config.ranges, seed=config.seed
    )
    results: list[BenchResult] = []
    warnings: list[str] = []
    label = ""
    providers: list[str] = []
    for threads in config.threads:
        options = OrtOptions(
            providers=config.providers, optimization=config.optimization, intra_op_threads=threads
        )
        with OrtRunner(loaded, options) as runner:
            providers = runner.providers()
            label = (
                f"onnxruntime {runner_version()} ({config.optimization}; {', '.join(providers)})"
            )
            for sample in samples:
                feeds = validate_feeds(signature, sample.feeds, where=sample.label)
                say(f"{sample.label}, threads={threads or 'auto'}: warming up")
                for _ in range(config.warmup):
                    runner.infer(feeds)
                latencies: list[float] = []
                deadline = time.perf_counter() + config.budget_s
                while True:
                    latencies.append(runner.infer(feeds).latency_ns / 1e6)
                    if config.runs is not None:
                        if len(latencies) >= config.runs:
                            break
                    elif len(latencies) >= config.min_runs and time.perf_counter() >= deadline:
                        break
                mean = statistics.fmean(latencies)
                cv = statistics.pstdev(latencies) / mean if mean > 0 else 0.0
                batch = sample.dims.get(batch_name) if batch_name else None
                result = BenchResult(
                    batch=batch,
                    dims=dict(sample.dims),
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
                )
                results.append(result)
                if result.noisy:
                    warnings.append(
                        f"{sample.label}, threads={threads or 'auto'}: latencies vary by "
                        f"{cv:.0%} (CV); the machine is too noisy to compare this figure"
                    )
    return BenchReport(
        model=str(loaded.path),
        runtime=label,
        providers=providers,
        optimization=config.optimization,
        results=results,
        warnings=warnings,
    )
