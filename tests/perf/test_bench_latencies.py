"""bench keeps the per-run latencies behind its figures, for the report page's distributions."""

from __future__ import annotations

import numpy as np
import pytest

from models import mlp, save
from onnxgate.perf import BenchConfig, bench
from onnxgate.perf._bench_records import KEPT_LATENCIES, kept_latencies


def test_every_timed_run_is_kept_and_the_figures_are_theirs(tmp_path):
    model = save(mlp(), tmp_path / "mlp.onnx")
    report = bench(model, BenchConfig(batches=[1, 4], warmup=1, runs=25))
    for result in report.results:
        assert len(result.latencies_ms) == result.runs == 25
        assert np.percentile(result.latencies_ms, 50) == pytest.approx(result.p50_ms, abs=1e-4)
        assert min(result.latencies_ms) == pytest.approx(result.min_ms, abs=1e-5)
    again = type(report).model_validate_json(report.model_dump_json())
    assert again.results[0].latencies_ms == report.results[0].latencies_ms


def test_beyond_the_cap_latencies_are_spread_over_the_whole_run_in_order():
    values = [float(i) for i in range(3 * KEPT_LATENCIES)]
    kept = kept_latencies(values)
    assert len(kept) == KEPT_LATENCIES
    assert kept[0] == 0.0 and kept[-1] == values[-1] and kept == sorted(kept)
    assert kept_latencies([0.123456789]) == [0.12346]
