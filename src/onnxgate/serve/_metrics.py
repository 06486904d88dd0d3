"""Prometheus metrics of a server, on its own registry (``GET /metrics``).

Named after Triton's where they mean the same (success and failure per model and version, with a
reason; inference count against execution count; pending requests), but queue and compute time
are histograms rather than cumulative microseconds, so percentiles can be read off them.

The statistics extension (``GET /v2/models/{name}/stats``, gRPC ``ModelStatistics``) is read off
these same metrics by :meth:`Metrics.statistics`: one source of truth for both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from onnxgate.errors import ExtraMissing

try:
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        Summary,
        generate_latest,
    )
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ExtraMissing(
        f"serving needs the 'serve' extra ({missing.name or 'prometheus_client'} is not installed).",
        extra="serve",
    ) from missing

LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
    4.096, 8.192,
)  # fmt: skip
"""Seconds, doubling from 0.5 ms: the range between a tiny model and a large batch on a CPU."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Every metric the server exports, labelled by model and version."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("model", "version")
        self.success = Counter(
            "onnxgate_inference_request_success",
            "Inference requests answered with outputs.",
            labels,
            registry=self.registry,
        )
        self.failure = Counter(
            "onnxgate_inference_request_failure",
            "Inference requests refused or failed, by reason (invalid, not_found, too_large, "
            "unavailable, internal).",
            (*labels, "reason"),
            registry=self.registry,
        )
        self.failure_seconds = Counter(
            "onnxgate_inference_request_failure_duration_seconds",
            "Time from a failed request's arrival at the model to its refusal (0 for requests "
            "refused before they reached it).",
            labels,
            registry=self.registry,
        )
        self.last_inference = Gauge(
            "onnxgate_last_inference_timestamp_seconds",
            "When the latest inference request for the model arrived (Unix time).",
            labels,
            registry=self.registry,
        )
        self.inferences = Counter(
            "onnxgate_inference_count",
            "Samples inferred (a request of batch n counts n).",
            labels,
            registry=self.registry,
        )
        self.executions = Counter(
            "onnxgate_inference_exec_count",
            "Model executions (one per batch the batcher formed).",
            labels,
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "onnxgate_request_duration_seconds",
            "Time from a request's arrival at the model to its outputs.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "onnxgate_queue_duration_seconds",
            "Time a request waited in the model's queue before its batch started.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.compute_seconds = Histogram(
            "onnxgate_compute_duration_seconds",
            "Time ONNX Runtime took to run one batch.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.request_compute_seconds = Summary(
            "onnxgate_request_compute_duration_seconds",
            "ONNX Runtime's time on each request's batch, observed once per request (Triton's "
            "compute_infer).",
            labels,
            registry=self.registry,
        )
        self.batch_compute_seconds = Summary(
            "onnxgate_batch_compute_duration_seconds",
            "ONNX Runtime's time on each batch, by the batch's size in samples (Triton's "
            "batch_stats).",
            (*labels, "batch_size"),
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "onnxgate_batch_size",
            "Samples per execution, as the batcher formed them.",
            labels,
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.pending = Gauge(
            "onnxgate_pending_request_count",
            "Requests queued or running for the model.",
            labels,
            registry=self.registry,
        )
        self.ready = Gauge(
            "onnxgate_model_ready",
            "1 when the model version is loaded and proven on this host, else 0.",
            labels,
            registry=self.registry,
        )
        self.shadow = ShadowMetrics(self.registry)
        self.watch = WatchMetrics(self.registry)

    def text(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)

    def statistics(self, served: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
        """Each ``(name, version)``'s statistics as Triton's statistics extension reports them.

        Each metric is collected once for the whole list and its samples indexed by model and
        version, so a call costs the number of series, not that times the number of models.

        ``success`` and ``fail`` count requests (a request refused for breaking the contract, a
        full queue or a stopping server is a failure, as ``onnxgate_inference_request_failure``
        counts it); ``queue`` and ``compute_infer`` count requests too, each with the time its
        batch waited and ran; ``inference_count`` counts samples, ``execution_count`` batches.
        ONNX Runtime reads inputs and writes outputs inside its run on the CPU, so
        ``compute_input`` and ``compute_output`` take no time of their own: their time is in
        ``compute_infer``. There is no response cache: ``cache_hit`` and ``cache_miss`` are 0.
        ``batch_stats`` has one entry per batch size executed, counting executions.
        """
        samples = _Samples()
        return [
            self._statistics(samples.of(name, version), name, version) for name, version in served
        ]

    def _statistics(self, read: _Reader, name: str, version: str) -> dict[str, Any]:
        compute = read.pair(self.request_compute_seconds)
        batches = []
        for size, pair in sorted(read.by_batch(self.batch_compute_seconds).items()):
            batches.append(
                {
                    "batch_size": size,
                    "compute_input": {"count": pair["count"], "ns": 0},
                    "compute_infer": pair,
                    "compute_output": {"count": pair["count"], "ns": 0},
                }
            )
        return {
            "name": name,
            "version": version,
            "last_inference": int(read.value(self.last_inference) * 1000),
            "inference_count": int(read.value(self.inferences)),
            "execution_count": int(read.value(self.executions)),
            "inference_stats": {
                "success": read.pair(self.request_seconds),
                "fail": {
                    "count": int(read.value(self.failure)),
                    "ns": _ns(read.value(self.failure_seconds)),
                },
                "queue": read.pair(self.queue_seconds),
                "compute_input": {"count": compute["count"], "ns": 0},
                "compute_infer": compute,
                "compute_output": {"count": compute["count"], "ns": 0},
                "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
            "batch_stats": batches,
        }


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


class _Samples:
    """Every metric's samples, collected at most once and indexed by ``(model, version)``."""

    def __init__(self) -> None:
        self._by_metric: dict[int, dict[tuple[str, str], list[Any]]] = {}

    def of(self, name: str, version: str) -> _Reader:
        return _Reader(self, (name, version))

    def series(self, metric: Any, key: tuple[str, str]) -> list[Any]:
        """``metric``'s samples labelled ``model, version = key`` (none: a series never created)."""
        found = self._by_metric.get(id(metric))
        if found is None:
            found = self._by_metric[id(metric)] = {}
            for family in metric.collect():
                for sample in family.samples:
                    labels = sample.labels
                    found.setdefault((labels["model"], labels["version"]), []).append(sample)
        return found.get(key, [])


class _Reader:
    """Values of one model version's series, read off the registry without creating any."""

    def __init__(self, samples: _Samples, key: tuple[str, str]) -> None:
        self._samples_of = samples
        self._key = key

    def _each(self, metric: Any, suffix: str) -> Iterator[Any]:
        for sample in self._samples_of.series(metric, self._key):
            if sample.name.endswith(suffix):
                yield sample

    def _samples(self, metric: Any, suffix: str) -> float:
        # a failure's series are split by reason: summed
        return sum(sample.value for sample in self._each(metric, suffix))

    def by_batch(self, metric: Any) -> dict[int, dict[str, int]]:
        """A summary labelled by ``batch_size``: ``{size: {count, ns}}``."""
        found: dict[int, dict[str, int]] = {}
        for suffix, key in (("_count", "count"), ("_sum", "ns")):
            for sample in self._each(metric, suffix):
                pair = found.setdefault(int(sample.labels["batch_size"]), {"count": 0, "ns": 0})
                pair[key] = int(sample.value) if key == "count" else _ns(sample.value)
        return found

    def value(self, metric: Any) -> float:
        """A counter's total, or a gauge's value."""
        return self._samples(metric, "_total" if isinstance(metric, Counter) else "")

    def pair(self, metric: Any) -> dict[str, int]:
        """A histogram's or summary's ``{count, ns}``."""
        return {
            "count": int(self._samples(metric, "_count")),
            "ns": _ns(self._samples(metric, "_sum")),
        }


class ShadowMetrics:
    """Shadow serving's metrics (``onnxgate_shadow_*``), labelled by model and candidate version.

    A request not drawn by the sampling fraction is ``sampled_out``, which is not shedding;
    ``shed`` counts the requests drawn but not shadowed, by reason: ``queue_full`` (the
    candidate's queue is full); ``cancelled`` counts the candidate runs cancelled because a
    request arrived (each is tried again). The
    per-output gauges hold the worst figure over every pair judged since the candidate started.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("model", "candidate")
        per_output = (*labels, "output")

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, (*labels, *extra), registry=registry)

        def gauge(name: str, doc: str, names: tuple[str, ...] = per_output) -> Gauge:
            return Gauge(name, doc, names, registry=registry)

        self._pairs = counter(
            "onnxgate_shadow_pairs",
            "Shadowed requests judged, by outcome: passed (every output within the candidate "
            "contract's rule), failed, error (the candidate failed to run).",
            ("outcome",),
        )
        self._shed = counter(
            "onnxgate_shadow_shed",
            "Requests drawn for shadowing but not shadowed, by reason: queue_full.",
            ("reason",),
        )
        self._cancelled = counter(
            "onnxgate_shadow_cancelled",
            "Candidate runs cancelled because the server got a request (each is tried again).",
        )
        self._sampled_out = counter(
            "onnxgate_shadow_sampled_out",
            "Requests the sampling fraction did not draw (not shedding).",
        )
        self._failures = counter(
            "onnxgate_shadow_rule_failures",
            "Shadowed requests whose output broke the candidate contract's rule.",
            ("output",),
        )
        self._dropped = counter(
            "onnxgate_shadow_persist_dropped",
            "Judged pairs not written to the registry (its buffer full, or no shadow tables).",
        )
        self._max_abs = gauge(
            "onnxgate_shadow_max_abs", "Worst max abs difference from the champion's output."
        )
        self._cosine = gauge(
            "onnxgate_shadow_min_cosine", "Lowest cosine similarity to the champion's output."
        )
        self._top1 = gauge(
            "onnxgate_shadow_min_top1",
            "Lowest share of rows whose argmax agrees with the champion's.",
        )
        self._depth = gauge(
            "onnxgate_shadow_queue_depth", "Requests waiting for or run by the candidate.", labels
        )
        self._ready = gauge(
            "onnxgate_shadow_ready", "1 when the candidate is proven here and shadowing.", labels
        )
        self._seconds = Histogram(
            "onnxgate_shadow_candidate_duration_seconds",
            "Time the candidate took on one shadowed request.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._worst: dict[tuple[str, str, str], list[float | None]] = {}

    def ready(self, name: str, version: str, ready: bool) -> None:
        self._ready.labels(name, version).set(int(ready))

    def depth(self, name: str, version: str, queue: Any) -> None:
        self._depth.labels(name, version).set_function(lambda: queue.pending)

    def offered(self, name: str, version: str) -> tuple[Any, Any]:
        """The request path's counters of one candidate, looked up once.

        Sampled out, shed because the queue is full.
        """
        return (
            self._sampled_out.labels(name, version),
            self._shed.labels(name, version, "queue_full"),
        )

    def cancelled(self, name: str, version: str) -> None:
        self._cancelled.labels(name, version).inc()

    def dropped(self, name: str, version: str, count: int) -> None:
        self._dropped.labels(name, version).inc(count)

    def pair(self, name: str, version: str, outcome: str, seconds: float) -> None:
        self._pairs.labels(name, version, outcome).inc()
        self._seconds.labels(name, version).observe(seconds)

    def judged(self, name: str, version: str, pair: Any, seconds: float) -> None:
        """One judged ``ShadowPair``: its outcome, its time, and each output's figures."""
        self.pair(name, version, "passed" if pair.passed else "failed", seconds)
        for figures in pair.outputs:
            key = (name, version, figures.name)
            if not figures.passed:
                self._failures.labels(*key).inc()
            worst = self._worst.setdefault(key, [None, None, None])
            for i, (value, gauge, pick) in enumerate(
                (
                    (figures.max_abs, self._max_abs, max),
                    (figures.cosine, self._cosine, min),
                    (figures.top1, self._top1, min),
                )
            ):
                if value is None or value != value:  # absent or NaN
                    continue
                worst[i] = value if worst[i] is None else pick(worst[i], value)
                gauge.labels(*key).set(worst[i])


class WatchMetrics:
    """Drift and provider fallback while serving (``serve._watch``, ``serve._fallback``).

    Every label set is bounded: models and versions served, the contract's tensors, at most
    ``WatchSettings.max_classes`` classes, the session's providers. A retired version's series
    are removed (``forget``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("model", "version")
        tensor = (*labels, "kind", "tensor")

        def gauge(name: str, text: str, names: tuple[str, ...]) -> Gauge:
            return Gauge(name, text, names, registry=registry)

        def counter(name: str, text: str, names: tuple[str, ...]) -> Counter:
            return Counter(name, text, names, registry=registry)

        self.score = gauge(
            "onnxgate_drift_score",
            "Population stability index of the last window of traffic against the golden "
            "samples or the reference window (the first window), per tensor (kind: input, "
            "output, or class for a classifier's top class); above 0.25 is a significant shift.",
            (*tensor, "against"),
        )
        self.alert = gauge(
            "onnxgate_drift_alert",
            "1 when the tensor's last window drifted beyond the threshold (--watch-threshold) "
            "against the reference window, or the golden samples when they have enough rows.",
            tensor,
        )
        self.quantile = gauge(
            "onnxgate_drift_quantile",
            "A quantile of the tensor's values in the last window (interpolated on fixed bins).",
            (*tensor, "quantile"),
        )
        self.rows = counter("onnxgate_drift_rows", "Rows (samples) summarised for drift.", labels)
        self.values = counter(
            "onnxgate_drift_values",
            "Finite values summarised for drift, per tensor (the denominator of the outside and "
            "non-finite rates).",
            tensor,
        )
        self.windows = counter(
            "onnxgate_drift_windows", "Windows of traffic completed and scored.", labels
        )
        self.shed = counter(
            "onnxgate_drift_shed",
            "Requests not summarised because the watch's queue was full (answered all the same).",
            labels,
        )
        self.classes = counter(
            "onnxgate_drift_class",
            "Rows per top class of a classifier output ([rows, classes] scores, argmax).",
            (*labels, "output", "class"),
        )
        self.nonfinite = counter(
            "onnxgate_output_nonfinite",
            "NaN and infinite values in answered outputs (value: nan or inf).",
            (*labels, "output", "value"),
        )
        self.outside = counter(
            "onnxgate_input_outside_golden",
            "Input values below or above the span the golden inputs covered (side).",
            (*labels, "input", "side"),
        )
        self.nodes = gauge(
            "onnxgate_provider_nodes",
            "Nodes per provider in the latest placement audit of a fresh session.",
            (*labels, "provider"),
        )
        self.fallback = gauge(
            "onnxgate_provider_fallback",
            "1 when the latest audit found compute nodes off the provider the gate required, "
            "or the provider did not start.",
            labels,
        )
        self.checks = counter(
            "onnxgate_provider_checks",
            "Placement audits by outcome (passed, fallback, failed: no session, error).",
            (*labels, "outcome"),
        )
        self.check_time = gauge(
            "onnxgate_provider_check_timestamp_seconds",
            "When the latest placement audit ended (Unix time).",
            labels,
        )

    def forget(self, name: str, version: str) -> None:
        """Remove every series of one version."""
        for metric in vars(self).values():
            drop(metric, name, version)


def drop(metric: Any, name: str, version: str) -> None:
    """Remove the series of one model version (``remove_by_labels`` needs prometheus-client 0.22)."""
    for family in metric.collect():
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") == name and labels.get("version") == version:
                with contextlib.suppress(KeyError, ValueError):  # a counter's _created twin
                    metric.remove(*(labels[n] for n in metric._labelnames))
