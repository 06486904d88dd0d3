"""Performance: latency and throughput measured honestly (bench); profile and tune come later."""

from onnxgate.perf._bench import NOISY_CV, BenchConfig, BenchReport, BenchResult, batch_dim, bench

__all__ = ["NOISY_CV", "BenchConfig", "BenchReport", "BenchResult", "batch_dim", "bench"]
