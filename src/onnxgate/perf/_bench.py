"""Latency and throughput of a model on ONNX Runtime, measured so the figures can be trusted.

Each configuration (batch size, dims, thread count) gets its own session, a warm-up that is not
counted, then runs until a count or a time budget is reached. Figures are percentiles of the
per-run latency (``perf_counter_ns`` around ``session.run``), not an average of a loop, and the
coefficient of variation says whether the machine was quiet enough to trust them.

Alone, the model runs in this process. Against a contender (``vs``: a PyTorch module or another
ONNX model) both run in worker processes of their own, in interleaved slices (``_contest.py``), so
neither thread pool distorts the other and drift hits both alike (``_bench_workers``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from onnxgate.contract import contract_dims, contract_samples
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample, load_feeds, synthetic_samples, validate_feeds
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._bench_records import (
    BenchConfig,
    BenchReport,
    BenchResult,
    bench_result,
    noise_warning,
    unreliable_warning,
)
from onnxgate.perf._bench_workers import bench_workers
from onnxgate.perf._contention import Watch
from onnxgate.settings import FeedSettings, SessionSettings

log = logging.getLogger(__name__)


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
        loaded, options, runtime = _tuned(loaded, config, samples, notes)
        config = config.model_copy(update={"runtime": runtime})
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
        report = bench_workers(loaded, config, options, samples, batch_name, say)
    return report.model_copy(update={"notes": notes + report.notes})


def _tuned(
    loaded: LoadedModel, config: BenchConfig, samples: Sequence[Sample], notes: list[str]
) -> tuple[LoadedModel, list[SessionSettings], str]:
    """The graph, settings and runtime ``tune`` recorded for this machine (one shape: tuned at it).

    A record tuned on an isolated build (``onnxruntime-openvino==1.24.1``) is timed there, as it
    was tuned: ``runtime`` left at ``installed`` takes the record's; another one is refused.

    Raises:
        ConfigError: no record applies, or ``runtime`` names another build than the record's.
    """
    from onnxgate.perf._tuned import tuned_for
    from onnxgate.runners import RuntimeSpec, check_session

    # The shape asked for picks the record; with none asked, a single record needs no picking.
    asked = bool(config.batches or config.feeds.dims)
    dims = samples[0].dims if asked and len(samples) == 1 else None
    settings, path, tuned_on = tuned_for(loaded.path, objective=config.objective, dims=dims)
    asked_on = RuntimeSpec.parse(config.runtime)
    runtime = str(asked_on)
    if tuned_on is None and not asked_on.installed:
        raise ConfigError(
            f"{loaded.path}: its tuned settings were measured on the installed ONNX Runtime, "
            f"and runtime asks for {asked_on}; settings tuned on one build say nothing of another.",
            hint=f"Leave runtime out to time them where they were tuned, or tune on {asked_on}.",
            field="runtime",
        )
    if tuned_on is not None and RuntimeSpec.parse(tuned_on) != asked_on:
        if not asked_on.installed:
            raise ConfigError(
                f"{loaded.path}: its tuned settings were measured on {tuned_on}, and runtime "
                f"asks for {asked_on}; settings tuned on one build say nothing of another.",
                hint=f"Leave runtime out (the record's {tuned_on} is used), or tune on {asked_on}.",
                field="runtime",
            )
        runtime = tuned_on
        notes.append(f"timed on {tuned_on}, the build the settings were tuned on")
    options = SessionSettings.from_wire(settings)
    if config.session.ops_libraries:
        # libraries are what the model needs, not a tuned choice (serve does the same): the ones
        # given replace the paths recorded when it was tuned, which may have moved since
        options = options.model_copy(update={"ops_libraries": config.session.ops_libraries})
    check_session(options)
    notes.append(f"tuned settings from the contract: {options.describe()}; graph {path.name}")
    graph = loaded if path == loaded.path else load_model(path)
    return graph, [options], runtime


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
                result = bench_result(latencies, sample, threads, batch_name)
                runs[f"{sample.label}, threads={threads or 'auto'}"] = latencies
                say(f"{sample.label}, threads={threads or 'auto'}: done", step=True)
                results.append(result)
                if note := noise_warning(result, sample.label):
                    warnings.append(note)
    return BenchReport(
        model=str(loaded.path),
        runtime=f"onnxruntime {runtime_version()}",
        providers=providers,
        optimization=options[0].opt_level,
        session=options[0].wire(),
        method="in this process: per configuration one session, uncounted warm-up, timed runs",
        results=results,
        warnings=warnings + unreliable_warning(conditions := watch.conditions(runs)),
        conditions=conditions,
        reliable=conditions.reliable,
    )


def _installed(runtime: str) -> bool:
    from onnxgate.compat.runtime import RuntimeSpec

    return RuntimeSpec.parse(runtime).installed
