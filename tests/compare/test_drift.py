"""compare's Drift: the error histogram and per-row cosines behind the report page's plots."""

from __future__ import annotations

import numpy as np
import pytest

from models import mlp, save
from onnxgate.compare import CompareConfig, Drift, compare, drift
from onnxgate.compare._metrics import DRIFT_EDGES, DRIFT_ROWS, merge_drift
from onnxgate.settings import FeedSettings


def _bin(value: float) -> int:
    return next(
        i for i in range(len(DRIFT_EDGES) - 1) if DRIFT_EDGES[i] <= value < DRIFT_EDGES[i + 1]
    )


def test_errors_fall_in_their_log_bins_and_exact_ones_are_counted_apart():
    b = np.zeros((2, 3), np.float32)
    a = b.copy()
    a[0, 1], a[1, 0], a[1, 2] = 1e-6, 1e-3, 0.5
    found = drift([(a, b)])
    assert found is not None
    assert found.zeros == 3 and sum(found.counts) == 3 and found.elements == 6
    for value in (1e-6, 1e-3, 0.5):
        assert found.counts[_bin(float(np.float32(value)))] >= 1
    assert len(found.edges) == len(found.counts) + 1


def test_errors_beyond_the_edges_land_in_the_outer_bins_and_nan_is_left_out():
    b = np.zeros(4, np.float64)
    a = np.array([1e-20, 1e6, np.nan, 0.0])
    found = drift([(a, b)])
    assert found is not None
    assert found.counts[0] == 1 and found.counts[-1] == 1 and found.zeros == 1
    assert found.elements == 3  # the NaN place is not counted


def test_row_cosines_are_per_index_of_axis_0_and_a_vector_is_one_row():
    b = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    a = np.array([[1.0, 0.0], [0.0, -1.0], [2.0, 2.0]], np.float32)
    found = drift([(a, b)])
    assert found is not None
    assert found.rows == 3
    assert found.row_cosine == pytest.approx([1.0, -1.0, 1.0])
    assert found.row_cosine_min == pytest.approx(-1.0)
    vector = drift([(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float32))])
    assert vector is not None and vector.rows == 1


def test_row_cosines_are_capped_but_the_lowest_is_over_every_row():
    rng = np.random.default_rng(0)
    b = rng.normal(size=(DRIFT_ROWS + 500, 4)).astype(np.float32)
    a = b.copy()
    a[DRIFT_ROWS + 100] *= -1  # past the kept rows
    found = drift([(a, b)])
    assert found is not None
    assert found.rows == DRIFT_ROWS + 500 and len(found.row_cosine) == DRIFT_ROWS
    assert min(found.row_cosine) > 0.99 and found.row_cosine_min == pytest.approx(-1.0)


def test_non_float_or_mismatched_outputs_have_no_drift():
    ints = np.arange(4)
    assert drift([(ints, ints)]) is None
    assert drift([(np.zeros(3, np.float32), np.zeros(4, np.float32))]) is None
    assert drift([(np.zeros(0, np.float32), np.zeros(0, np.float32))]) is None


def test_merging_adds_counts_and_keeps_rows_in_order():
    one = drift([(np.array([[1.0, 0.0]]), np.array([[1.0, 1e-3]]))])
    two = drift([(np.array([[0.0, 1.0]]), np.array([[0.0, 1.0]]))])
    merged = merge_drift([one, None, two])
    assert isinstance(merged, Drift) and one is not None and two is not None
    assert merged.counts == [x + y for x, y in zip(one.counts, two.counts, strict=True)]
    assert merged.zeros == one.zeros + two.zeros and merged.rows == 2
    assert merged.row_cosine == one.row_cosine + two.row_cosine
    assert merge_drift([None, None]) is None


def test_compare_reports_the_drift_of_every_float_output_over_all_samples(tmp_path):
    model = save(mlp(), tmp_path / "mlp.onnx")
    report = compare(
        model, CompareConfig(against="reference", feeds=FeedSettings(dims={"batch": [1, 5]}))
    )
    (output,) = report.outputs
    assert output.drift is not None
    assert output.drift.rows == 6  # 1 + 5 rows of the two samples
    assert output.drift.elements == output.elements == 18
    assert output.drift.row_cosine_min is not None and output.drift.row_cosine_min > 0.999999
    again = type(report).model_validate_json(report.model_dump_json())
    assert again.outputs[0].drift == output.drift
