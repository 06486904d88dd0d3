"""Drift seen while serving: brighter traffic fires the alert, traffic like the goldens does not.

Real ONNX Runtime, a real Hub, an image-like classifier made here; every request and every
golden image is seeded, and the assertions count windows and values, never time.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from onnxgate.serve._hub import Hub
from onnxgate.serve._types import InferRequest, RequestTensor

from ._serve_helpers import VOCAB
from ._watch_helpers import (
    config,
    images,
    infer,
    make_image_contract,
    make_log_contract,
    run_hub,
    samples,
    value,
)

WINDOW = 128
"""Rows per window: 16 requests of 8 images."""
THRESHOLD = 0.25


@pytest.fixture(scope="module")
def image_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_contract(tmp_path_factory.mktemp("watch-img") / "img.onnx")


def _traffic(model: Path, shifts: list[float], **watch: object) -> str:
    """Requests of 8 images, one per shift (seed 2); the metrics text once all are summarised."""

    async def body(hub: Hub) -> str:
        rng = np.random.default_rng(2)
        for shift in shifts:
            await infer(hub, "img", images(rng, 8, shift))
        assert hub.watch.wait_idle(60)
        return hub.metrics.text().decode()

    settings = {"window_rows": WINDOW, "threshold": THRESHOLD, **watch}
    return run_hub(model, config(**settings), body)


def _drifted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "drifted" in r.getMessage()]


def test_brighter_images_fire_the_drift_alert_on_input_output_and_class(image_model, caplog):
    caplog.set_level(logging.WARNING, logger="onnxgate.serve._watch")
    text = _traffic(image_model, [0.0] * 32 + [0.25] * 32)  # 2 windows as the goldens, 2 brighter

    assert value(text, "onnxgate_drift_windows_total") == 4
    assert value(text, "onnxgate_drift_rows_total") == 512
    for kind, tensor in (("input", "x"), ("output", "probs"), ("class", "probs")):
        assert value(text, "onnxgate_drift_alert", kind=kind, tensor=tensor) == 1, (kind, text)
        for against in ("golden", "reference"):
            score = value(text, "onnxgate_drift_score", kind=kind, tensor=tensor, against=against)
            assert score is not None and score > 4 * THRESHOLD, (kind, against, score)
    # brighter pixels leave the span the golden images covered, upwards
    above = value(text, "onnxgate_input_outside_golden_total", input="x", side="above")
    assert above is not None and above > 5000
    # the top class moved to the brightest quarter
    classes = samples(text, "onnxgate_drift_class_total")
    assert sum(classes.values()) == 512
    assert value(text, "onnxgate_drift_class_total", output="probs", **{"class": "3"}) > 200
    assert any("input 'x' drifted" in m for m in _drifted(caplog))
    # the median of the last window is read off the bins: brighter than the goldens' 0.5
    median = value(text, "onnxgate_drift_quantile", kind="input", tensor="x", quantile="0.5")
    assert median is not None and median > 0.65


def test_traffic_drawn_like_the_goldens_never_fires(image_model, caplog):
    caplog.set_level(logging.WARNING, logger="onnxgate.serve._watch")
    text = _traffic(image_model, [0.0] * 64)

    assert value(text, "onnxgate_drift_windows_total") == 4
    assert _drifted(caplog) == []  # in none of the 4 windows
    scores = samples(text, "onnxgate_drift_score")
    assert len(scores) == 6  # 3 tensors, against the goldens and the reference
    # margin: measured at most 0.06 against the reference; 0.13 for probs against its 288 golden
    # values, on equal-width bins (too few values for quantiles: scored, never alerted on)
    assert max(v for k, v in scores.items() if "reference" in k) < THRESHOLD / 2, scores
    assert max(scores.values()) < THRESHOLD, scores
    assert set(samples(text, "onnxgate_drift_alert").values()) == {0.0}


def test_a_mild_shift_scores_between(image_model):
    """+0.1 brightness: a moderate shift, scored above the unshifted traffic's noise."""
    text = _traffic(image_model, [0.0] * 16 + [0.1] * 16)
    score = value(text, "onnxgate_drift_score", kind="input", tensor="x", against="reference")
    assert score is not None and score > THRESHOLD


def test_answers_are_unchanged_with_watching_on(image_model):
    x = images(np.random.default_rng(5), 8, 0.3)
    session = ort.InferenceSession(str(image_model), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["probs"], {"x": x})

    async def body(hub: Hub) -> np.ndarray:
        answer = (await infer(hub, "img", x))["probs"]
        assert hub.watch.wait_idle(60)
        return answer

    watched = run_hub(image_model, config(window_rows=10), body)
    unwatched = run_hub(image_model, config(drift=False), body)
    np.testing.assert_array_equal(watched, expected)
    np.testing.assert_array_equal(unwatched, expected)
    # the request's arrays were summarised, not changed: x is as it was sent
    np.testing.assert_array_equal(x, images(np.random.default_rng(5), 8, 0.3))


def test_watching_off_exports_no_drift_series(image_model):
    text = _traffic(image_model, [0.0] * 20, drift=False)
    assert samples(text, "onnxgate_drift_rows_total") == {}
    assert samples(text, "onnxgate_drift_score") == {}


def test_nan_and_infinite_outputs_are_counted_and_inputs_below_the_goldens(tmp_path):
    model = make_log_contract(tmp_path / "log.onnx")
    x = np.array([[-1.0, 0.0, 1.0, 2.0]] * 3, np.float32)  # log: NaN, -inf, 0, 0.69

    async def body(hub: Hub) -> str:
        for _ in range(5):
            y = (await infer(hub, "log", x))["y"]
            assert np.isnan(y[:, 0]).all() and np.isneginf(y[:, 1]).all()
        assert hub.watch.wait_idle(60)
        return hub.metrics.text().decode()

    text = run_hub(model, config(window_rows=10), body)
    assert value(text, "onnxgate_output_nonfinite_total", output="y", value="nan") == 15
    assert value(text, "onnxgate_output_nonfinite_total", output="y", value="inf") == 15
    # -1 and 0 are below what the goldens spanned ([0.5, 1.96]), 2 above, 1 inside
    assert value(text, "onnxgate_input_outside_golden_total", input="x", side="below") == 30
    assert value(text, "onnxgate_input_outside_golden_total", input="x", side="above") == 15
    assert value(text, "onnxgate_drift_class_total", output="y") is None  # y is no classifier
    # finite values only in the histograms
    assert value(text, "onnxgate_drift_values_total", kind="output", tensor="y") == 30


def test_a_full_queue_sheds_and_counts_never_failing_a_request(image_model):
    """One slot and a worker held busy: requests are answered, the ones not queued counted."""

    async def body(hub: Hub) -> tuple[str, int]:
        release = threading.Event()
        handle = hub.watch._offpath._handle  # type: ignore[union-attr]
        hub.watch._offpath._handle = lambda item: (release.wait(30), handle(item))  # type: ignore[union-attr]
        answered = 0
        for _ in range(10):
            await infer(hub, "img", images(np.random.default_rng(0), 2))
            answered += 1
        release.set()
        assert hub.watch.wait_idle(60)
        return hub.metrics.text().decode(), answered

    text, answered = run_hub(image_model, config(max_queue=1, window_rows=10), body)
    assert answered == 10
    shed = value(text, "onnxgate_drift_shed_total")
    rows = value(text, "onnxgate_drift_rows_total")
    assert shed is not None and rows is not None
    # every request was summarised (2 rows each) or shed; at most one in hand and one queued
    assert shed + rows / 2 == 10 and shed >= 8


def test_the_arrays_held_for_the_worker_are_bounded_in_bytes(image_model):
    """Requests are referenced, not copied: beyond max_queue_mb they are shed, and released."""

    async def body(hub: Hub) -> tuple[str, int, int]:
        release = threading.Event()
        handle = hub.watch._offpath._handle  # type: ignore[union-attr]
        hub.watch._offpath._handle = lambda item: (release.wait(30), handle(item))  # type: ignore[union-attr]
        for _ in range(10):
            await infer(hub, "img", images(np.random.default_rng(0), 2))
        held = hub.watch.held_bytes
        release.set()
        assert hub.watch.wait_idle(60)
        return hub.metrics.text().decode(), held, hub.watch.held_bytes

    # a request: 2 images of 3x8x8 float32 (1,536 bytes) and probs 2x4 (32): 1,568 bytes
    limit = (5 * 1568 + 100) / (1 << 20)  # room for 5, not 6
    text, held, after = run_hub(image_model, config(max_queue_mb=limit, window_rows=10), body)
    assert held == 5 * 1568 and after == 0
    assert value(text, "onnxgate_drift_shed_total") == 5
    assert value(text, "onnxgate_drift_rows_total") == 10


def test_a_token_distribution_shift_fires_against_the_reference_window(token_model, caplog):
    """Sentences of other words: token ids from the upper half of the vocabulary after two windows
    from the lower half. The token model's few golden rows are scored, not alerted on: the
    reference window is what fires."""
    caplog.set_level(logging.WARNING, logger="onnxgate.serve._watch")

    async def body(hub: Hub) -> str:
        rng = np.random.default_rng(4)
        for step in range(48):
            low = 0 if step < 32 else VOCAB // 2
            ids = rng.integers(low, low + VOCAB // 2, (4, 16)).astype(np.int64)
            tensors = [
                RequestTensor("ids", "INT64", ids),
                RequestTensor("mask", "INT64", ids * 0 + 1),
            ]
            await hub.infer(InferRequest("tok", None, tensors))
        assert hub.watch.wait_idle(60)
        return hub.metrics.text().decode()

    text = run_hub(token_model, config(window_rows=64), body)
    assert value(text, "onnxgate_drift_windows_total") == 3
    score = value(text, "onnxgate_drift_score", kind="input", tensor="ids", against="reference")
    assert score is not None and score > 4 * THRESHOLD
    assert value(text, "onnxgate_drift_alert", kind="input", tensor="ids") == 1
    drifted = _drifted(caplog)
    assert len([m for m in drifted if "'ids'" in m]) == 1  # the third window only
