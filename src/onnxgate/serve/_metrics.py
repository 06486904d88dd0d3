"""Prometheus metrics of a server, on its own registry (``GET /metrics``).

Named after Triton's where they mean the same (success and failure per model and version, with a
reason; inference count against execution count; pending requests), but queue and compute time
are histograms rather than cumulative microseconds, so percentiles can be read off them.
"""

from __future__ import annotations

from onnxgate.errors import ExtraMissing

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
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

    def text(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)
