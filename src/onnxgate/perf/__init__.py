"""Performance: measured honestly (bench), explained (profile) and searched for (tune)."""

from onnxgate.perf._attention import AttentionFusion, fuse_attention
from onnxgate.perf._bench import batch_dim, bench
from onnxgate.perf._bench_records import NOISY_CV, BenchConfig, BenchReport, BenchResult
from onnxgate.perf._contention import Conditions, Watch
from onnxgate.perf._contest import Contender, Contest, save_arrays
from onnxgate.perf._profile import ProfileConfig, ProfileReport, profile
from onnxgate.perf._render import render_bench, render_profile, render_tune
from onnxgate.perf._stats import interval_reasons, judge
from onnxgate.perf._tune import TuneConfig, TuneReport, tune
from onnxgate.perf._tuned import TunedChoice, tuned_for, verify_tuned

__all__ = [
    "NOISY_CV",
    "AttentionFusion",
    "BenchConfig",
    "BenchReport",
    "BenchResult",
    "Conditions",
    "Contender",
    "Contest",
    "ProfileConfig",
    "ProfileReport",
    "TuneConfig",
    "TuneReport",
    "TunedChoice",
    "Watch",
    "batch_dim",
    "bench",
    "fuse_attention",
    "interval_reasons",
    "judge",
    "profile",
    "render_bench",
    "render_profile",
    "render_tune",
    "save_arrays",
    "tune",
    "tuned_for",
    "verify_tuned",
]
