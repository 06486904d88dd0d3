"""Shadow serving and drift watching on a model nobody here made: ultraface RFB-320 from the corpus.

A face detector (opset 9, eight opset imports including training and experimental domains;
input ``[1, 3, 240, 320]`` as ``(pixel - 127) / 128``; outputs ``scores [1, 4420, 2]`` and
``boxes [1, 4420, 4]``) served in-process by a real Hub with its watch on and two candidates in
shadow: the same model (a copy), and the model with one Conv's weight perturbed, whose contract
(golden outputs from its own graph) holds. Traffic: smooth random-field images at normal
brightness, then the same images darkened (× 0.4), as ``benchmarks/shadow_thirdparty.py`` sends.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import CORPUS, needs_corpus
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.serve._hub import Hub, ServeConfig
from onnxgate.serve._predictor import PredictorConfig
from onnxgate.serve._shadow import ShadowSettings
from onnxgate.serve._types import InferRequest, RequestTensor
from onnxgate.serve._watch import WatchSettings
from onnxgate.settings import FeedSettings, Tolerances

from ._serve_helpers import copy_model
from ._watch_helpers import value

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _thirdparty_traffic import natural_images, perturb_conv  # noqa: E402

ULTRAFACE = CORPUS / "ultraface_rfb320.onnx"
NAME = "ultraface"
WINDOW = 12
"""Rows per watch window: one request each (the model's batch axis is fixed at 1)."""


def preprocess(images: np.ndarray) -> np.ndarray:
    return ((images * 255.0 - 127.0) / 128.0).astype(np.float32)


def contract(model: Path, golden: Path) -> Path:
    tolerances = Tolerances(atol=1e-4, rtol=1e-3)
    init_contract(model, ContractConfig(feeds=FeedSettings(inputs=golden), tolerances=tolerances))
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("ultraface")
    golden = base / "golden"
    golden.mkdir()
    for i, image in enumerate(natural_images(4, 240, 320, seed=100)):
        np.savez(golden / f"s{i}.npz", input=preprocess(image[None]))
    champion = base / "champion" / ULTRAFACE.name
    champion.parent.mkdir()
    shutil.copyfile(ULTRAFACE, champion)
    contract(champion, golden)
    bad = base / "bad" / ULTRAFACE.name
    planted = perturb_conv(champion, bad, which=0.5, scale=0.05)
    contract(bad, golden)
    return SimpleNamespace(
        champion=champion,
        faithful=copy_model(champion, base / "faithful"),
        bad=bad,
        planted=planted,
    )


def serve_config(*candidates: Path) -> ServeConfig:
    return ServeConfig(
        predictor=PredictorConfig(allow_ungated=True),
        poll_seconds=0,
        shadow=ShadowSettings(candidates=tuple(f"{NAME}={c}" for c in candidates)),
        watch=WatchSettings(window_rows=WINDOW, placement_seconds=0),
    )


async def send(hub: Hub, images: np.ndarray) -> None:
    """One request per image; each waits until the shadows and the watch have taken it."""
    for image in images:
        request = InferRequest(
            NAME, None, [RequestTensor("input", "FP32", preprocess(image[None]))]
        )
        await hub.infer(request)
        for shadow in hub.shadows.by_name[NAME]:
            assert await asyncio.to_thread(shadow.queue.wait_idle, 60)
        assert await asyncio.to_thread(hub.watch.wait_idle, 60)


def alerts(text: str) -> dict[tuple[str, str], float | None]:
    return {
        (kind, tensor): value(text, "onnxgate_drift_alert", kind=kind, tensor=tensor)
        for kind, tensor in (("input", "input"), ("output", "scores"), ("output", "boxes"))
    }


@needs_corpus(ULTRAFACE)
def test_ultraface_in_shadow_and_watched_bad_variant_fails_and_darker_traffic_alerts(
    models: SimpleNamespace,
) -> None:
    images = natural_images(2 * WINDOW, 240, 320, seed=0)
    reference, later = images[:WINDOW], images[WINDOW:]

    async def main() -> tuple[dict, str, str]:
        hub = Hub(serve_config(models.faithful, models.bad))
        await hub.load([f"{NAME}={models.champion}"])
        try:
            await send(hub, reference)
            await send(hub, later)
            unshifted = hub.metrics.text().decode()
            await send(hub, later * 0.4)
            record = {s.item: s.summary() for s in hub.shadows.by_name[NAME]}
            return record, unshifted, hub.metrics.text().decode()
        finally:
            await hub.stop()

    record, unshifted, shifted = asyncio.run(main())

    faithful = record[f"{NAME}={models.faithful}"]
    assert faithful["shadowing"], faithful["reason"]
    assert (faithful["pairs"], faithful["passed"], faithful["failed"]) == (36, 36, 0)
    bad = record[f"{NAME}={models.bad}"]
    assert bad["shadowing"], bad["reason"]
    assert bad["pairs"] == 36 and bad["failed"] == 36
    failing = {name: f for name, f in bad["outputs"].items() if f["failed"]}
    assert failing, bad["outputs"]
    for f in failing.values():
        assert f["rule"] == "allclose(atol=0.0001, rtol=0.001)"
        assert "outside allclose" in f["first_failure"]

    assert value(unshifted, "onnxgate_drift_windows_total", model=NAME) == 2.0
    assert set(alerts(unshifted).values()) == {0.0}, alerts(unshifted)
    score = value(
        shifted, "onnxgate_drift_score", kind="input", tensor="input", against="reference"
    )
    assert value(shifted, "onnxgate_drift_windows_total", model=NAME) == 3.0
    assert score is not None and score > 0.25
    assert alerts(shifted)[("input", "input")] == 1.0
    assert alerts(shifted)[("output", "scores")] == 1.0  # the face scores move too
