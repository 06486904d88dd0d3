"""The MiniLM contest's gate (``benchmarks/_contest_gate.py``) on made-up rows and latencies."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _contest_gate import checks, cpu_kind, overall  # noqa: E402

SHAPE = "b32×s128"
OURS_FP32 = "onnxgate tune (b32×s128)"
OURS_INT8 = "onnxgate int8"


def _runs(ms: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(ms * (1 + 0.01 * rng.standard_normal(200)))


def _table(**p50: tuple[float, float, float]) -> tuple[list[dict], dict]:
    """Rows and latencies from label -> (p50 ms, worst cosine, MB)."""
    eager = p50["PyTorch eager"][0]
    rows, latencies = [], {}
    for seed, (label, (ms, worst, mb)) in enumerate(p50.items()):
        rows.append(
            {
                "shape": SHAPE,
                "contender": label,
                "speedup_vs_eager": eager / ms,
                "token_cosine_worst": worst,
                "size_mb": mb,
            }
        )
        latencies[(SHAPE, label)] = _runs(ms, seed)
    return rows, latencies


def _gate(rows: list[dict], latencies: dict, flags=("avx512_vnni",)) -> list:
    return checks(
        rows,
        latencies,
        ours_fp32={SHAPE: OURS_FP32},
        ours_int8=OURS_INT8,
        fp32_size_mb=90.0,
        flags=flags,
    )


def test_a_faster_int8_rival_within_the_cosine_window_fails_the_gate():
    rows, latencies = _table(
        **{
            "PyTorch eager": (600.0, 1.0, 0.0),
            OURS_FP32: (500.0, 1.0, 90.0),
            "ORT defaults": (520.0, 1.0, 90.0),
            OURS_INT8: (190.0, 0.985, 25.0),
            "Optimum int8": (170.0, 0.980, 23.0),
        }
    )
    found = _gate(rows, latencies)
    rival = next(c for c in found if c.what == "int8 not slower than Optimum int8")
    assert rival.verdict == "fail"
    assert overall(found) == "fail"


def test_a_faster_but_less_accurate_int8_is_not_a_rival():
    rows, latencies = _table(
        **{
            "PyTorch eager": (600.0, 1.0, 0.0),
            OURS_FP32: (500.0, 1.0, 90.0),
            OURS_INT8: (190.0, 0.985, 25.0),
            "ORT dynamic int8": (170.0, 0.84, 23.0),
        }
    )
    found = _gate(rows, latencies)
    assert [c.verdict for c in found if "ORT dynamic int8" in c.what] == ["pass"]
    assert overall(found) == "pass"  # 600 / 190 = 3.16x, cosine 0.985, 25 MB = 28%


def test_targets_follow_the_cpu_kind_and_the_file_share_is_checked():
    rows, latencies = _table(
        **{
            "PyTorch eager": (600.0, 1.0, 0.0),
            OURS_FP32: (500.0, 1.0, 90.0),
            OURS_INT8: (300.0, 0.99, 30.0),
        }
    )
    on_vnni = {c.what: c.verdict for c in _gate(rows, latencies)}
    assert on_vnni["int8 ≥ 3× PyTorch eager (vnni)"] == "fail"  # 2.0x
    assert on_vnni["int8 file ≤ 30% of fp32"] == "fail"  # 33%
    on_avx2 = {c.what: c.verdict for c in _gate(rows, latencies, flags=("avx2", "fma"))}
    assert on_avx2["int8 ≥ 1.8× PyTorch eager (avx2)"] == "pass"
    assert cpu_kind(["avx2"]) == "avx2"


def test_a_slower_fp32_artefact_fails_and_a_tie_passes():
    rows, latencies = _table(
        **{
            "PyTorch eager": (600.0, 1.0, 0.0),
            OURS_FP32: (500.0, 1.0, 90.0),
            "OpenVINO EP": (450.0, 1.0, 90.0),
            "ORT defaults": (500.0, 1.0, 90.0),
            OURS_INT8: (190.0, 0.99, 25.0),
        }
    )
    verdicts = {c.what: c.verdict for c in _gate(rows, latencies)}
    assert verdicts[f"fp32 {OURS_FP32} not slower than OpenVINO EP"] == "fail"
    assert verdicts[f"fp32 {OURS_FP32} not slower than ORT defaults"] == "pass"
