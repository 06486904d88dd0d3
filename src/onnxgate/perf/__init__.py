"""Performance: latency and throughput measured honestly (bench), where the time goes (profile)."""

from onnxgate.perf._bench import NOISY_CV, BenchConfig, BenchReport, BenchResult, batch_dim, bench
from onnxgate.perf._profile import ProfileConfig, ProfileReport, profile

__all__ = [
    "NOISY_CV",
    "BenchConfig",
    "BenchReport",
    "BenchResult",
    "ProfileConfig",
    "ProfileReport",
    "batch_dim",
    "bench",
    "profile",
]
