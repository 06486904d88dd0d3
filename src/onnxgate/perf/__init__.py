"""Performance: measured honestly (bench), explained (profile) and searched for (tune)."""

from onnxgate.perf._bench import NOISY_CV, BenchConfig, BenchReport, BenchResult, batch_dim, bench
from onnxgate.perf._profile import ProfileConfig, ProfileReport, profile
from onnxgate.perf._tune import TuneConfig, TuneReport, tune
from onnxgate.perf._tuned import tuned_for

__all__ = [
    "NOISY_CV",
    "BenchConfig",
    "BenchReport",
    "BenchResult",
    "ProfileConfig",
    "ProfileReport",
    "TuneConfig",
    "TuneReport",
    "batch_dim",
    "bench",
    "profile",
    "tune",
    "tuned_for",
]
