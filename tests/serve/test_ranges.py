"""Serving ranges: ``serve`` and ``deploy`` accept exactly the sizes the contract proved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models import mlp, save
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.errors import InvalidRequest
from onnxgate.serve import Predictor, PredictorConfig
from onnxgate.settings import FeedSettings


@pytest.fixture
def ranged(tmp_path: Path) -> Path:
    """An MLP whose contract proves the serving range batch 1..64 (as ``[feeds] dims`` asks)."""
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 64]})))
    return path


def test_a_request_at_the_top_of_the_range_is_answered_and_one_beyond_refused(ranged):
    x = np.random.default_rng(0).random((65, 4), dtype=np.float32)
    config = PredictorConfig(allow_ungated=True)
    with Predictor.open(ranged, config) as predictor:
        assert predictor.max_batch == 64
        assert predictor.predict({"x": x[:64]})["y"].shape == (64, 3)
        assert predictor.predict({"x": x[:1]})["y"].shape == (1, 3)
        with pytest.raises(InvalidRequest, match=r"is 65, outside the sizes the contract proved "):
            predictor.predict({"x": x})


def test_triton_batches_up_to_the_top_of_the_range_and_no_further(ranged, tmp_path):
    pytest.importorskip("tritonclient")
    from onnxgate.deploy import TritonConfig, deploy_triton
    from onnxgate.errors import ConfigError

    report = deploy_triton(ranged, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    assert "max_batch_size: 64" in (tmp_path / "repo" / "mlp" / "config.pbtxt").read_text()
    with pytest.raises(ConfigError, match="beyond the largest batch the contract proves"):
        deploy_triton(
            ranged, TritonConfig(out=tmp_path / "other", allow_ungated=True, max_batch=65)
        )
