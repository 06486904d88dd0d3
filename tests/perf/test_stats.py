"""The one judge of timed comparisons (bench's ratio, tune's winner, quantize's speed)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from onnxgate.perf._bench_records import BenchReport, BenchResult, Contestant, Ratio
from onnxgate.perf._contention import judge as conditions
from onnxgate.perf._render import render_bench
from onnxgate.perf._stats import _resampled_medians, judge


def _around(median: float, spread: float, seed: int, n: int = 200) -> list[float]:
    return list(median + np.random.default_rng(seed).uniform(-spread, spread, n))


def test_a_quiet_comparison_is_judged_by_its_interval():
    assert judge(_around(2.0, 0.1, 0), _around(1.0, 0.05, 1)).verdict == "faster"
    assert judge(_around(1.0, 0.05, 0), _around(2.0, 0.1, 1)).verdict == "slower"
    assert judge(_around(1.0, 0.5, 0), _around(1.0, 0.5, 1)).verdict == "within noise"
    # faster, but by less than the gain asked for
    small = judge(_around(1.03, 0.01, 0), _around(1.0, 0.01, 1), min_gain=0.05)
    assert small.measured == "faster" and small.verdict == "within noise" and small.reliable


@pytest.mark.parametrize("direction", ["faster", "slower"])
def test_timings_the_machine_spoiled_prove_neither_way(direction):
    busy = conditions(2, 1.0, others=0.6, steal=0.0, baseline_ms=(2.0, 2.0), drifts={})
    a, b = _around(2.0, 0.1, 0), _around(1.0, 0.05, 1)
    before, after = (a, b) if direction == "faster" else (b, a)
    judged = judge(before, after, unreliable=busy.reasons)
    assert judged.verdict == "inconclusive" and judged.measured == direction
    assert not judged.reliable and judged.reasons[0].startswith("other processes took 60%")


def test_an_interval_too_wide_to_read_is_inconclusive_with_its_reason():
    judged = judge([0.2, 3.0, 1.0, 0.4, 2.5, 1.1], [0.3, 2.8, 1.2, 0.5, 3.1, 1.3])
    assert judged.verdict == "inconclusive"
    assert judged.reasons == (
        f"the ratio's 90% interval runs from {judged.interval[0]:.2f}x to "
        f"{judged.interval[1]:.2f}x: too wide to be one figure",
    )


def test_a_wide_interval_wholly_on_one_side_proves_that_side_on_a_quiet_machine():
    # every run of the judged side is slower: a wide interval below 1 is still "slower", not
    # an inconclusive verdict that would let a proven slowdown pass
    judged = judge([1.0, 1.1, 0.9, 1.0, 1.2], [2.0, 9.0, 3.0, 8.0, 2.5])
    assert judged.interval[1] < 1.0 and judged.reasons
    assert judged.verdict == "slower"
    faster = judge([2.0, 9.0, 3.0, 8.0, 2.5], [1.0, 1.1, 0.9, 1.0, 1.2])
    assert faster.interval[0] > 1.0 and faster.verdict == "faster"
    # a busy machine still proves nothing either way
    busy = judge([1.0, 1.1, 0.9, 1.0, 1.2], [2.0, 9.0, 3.0, 8.0, 2.5], unreliable=["busy"])
    assert busy.verdict == "inconclusive"


@pytest.mark.parametrize("n", [1, 2, 7, 8, 51, 60])
def test_the_medians_bootstrap_draws_what_resampling_draws(n):
    """The medians drawn from order statistics follow the law of the medians of real resamples.

    Skewed latencies with ties, odd and even counts; the two-sample Kolmogorov-Smirnov distance
    of 40,000 draws each stays under its 0.1% critical value (1.95 * sqrt(2 / draws)).
    """
    rng = np.random.default_rng(n)
    x = np.round(1.0 + rng.lognormal(0, 0.7, n), 1)  # rounded: ties, as timer ticks give
    draws = 40_000
    resampled = np.median(x[np.random.default_rng(1).integers(0, n, (draws, n))], axis=1)
    direct = _resampled_medians(x, draws, np.random.default_rng(2))
    support = np.union1d(resampled, direct)
    cdf = [np.searchsorted(np.sort(d), support, side="right") / draws for d in (resampled, direct)]
    assert np.abs(cdf[0] - cdf[1]).max() < 1.95 * np.sqrt(2 / draws)
    assert set(direct) <= {(p + q) / 2 for p in x for q in x}  # medians a resample can have


def _result(p50: float) -> BenchResult:
    return BenchResult(
        batch=1,
        dims={"batch": 1},
        threads=1,
        runs=20,
        p50_ms=p50,
        p90_ms=p50,
        p99_ms=p50,
        mean_ms=p50,
        min_ms=p50,
        throughput=1000 / p50,
        cv=0.01,
        noisy=False,
    )


@pytest.mark.torch  # names a torch: source (the marker check reads the text)
def test_bench_shows_a_doubted_ratio_only_with_its_qualifier():
    busy = conditions(2, 1.0, others=0.7, steal=0.0, baseline_ms=(2.0, 2.0), drifts={})
    ratio = Ratio(
        batch=1,
        dims={"batch": 1},
        threads=1,
        ratio=2885.6,
        interval=(40.0, 9000.0),
        verdict="inconclusive",
        reasons=list(busy.reasons),
    )
    report = BenchReport(
        model="m.onnx",
        runtime="onnxruntime",
        providers=["CPUExecutionProvider"],
        optimization="all",
        results=[_result(0.01)],
        vs=Contestant(name="torch:m:f", runtime="torch", results=[_result(28.856)]),
        ratio=[ratio],
        conditions=busy,
        reliable=False,
    )
    assert report.doubts == list(busy.reasons)
    console = Console(width=200, record=True, file=io.StringIO())
    for renderable in render_bench(report):
        console.print(renderable)
    text = " ".join(console.export_text().split())
    assert "2885.60x?" in text and "2885.60x " not in text.replace("2885.60x?", "")
    assert "ratio?: unreliable (other processes took 70% of the 2 CPU(s)" in text
