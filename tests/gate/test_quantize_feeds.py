from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from onnxgate.gate import _steps
from onnxgate.gate._config import GateConfig


class Captured(Exception):
    pass


def _config(tmp_path: Path, export: dict | None = None, **quantize: object) -> GateConfig:
    return GateConfig.model_validate(
        {
            "version": 1,
            "model": {"name": "m", "source": str(tmp_path / "m.onnx")},
            "feeds": {"inputs": str(tmp_path / "data.npz")},
            "steps": {"quantize": {"enabled": True, **quantize}, "export": export or {}},
        }
    )


@pytest.mark.parametrize(
    ("quantize", "expected"),
    [
        ({"mode": "dynamic"}, ("data", None)),
        ({"mode": "static"}, (None, "data")),  # never both: the same data would be refused
        ({"mode": "static", "eval": "held.npz"}, ("held.npz", "data")),
        ({"mode": "static", "calibration": "cal.npz"}, ("data", "cal.npz")),
    ],
)
def test_feeds_inputs_is_evaluation_or_calibration_data_never_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quantize: dict, expected: tuple
) -> None:
    seen = {}

    def fake(model, config, progress=None):
        seen["eval"], seen["calibration"] = config.eval, config.calibration
        raise Captured

    # the package (onnxgate.quantize is also the name of the function at the top level)
    monkeypatch.setattr(importlib.import_module("onnxgate.quantize"), "quantize", fake)
    config = _config(tmp_path, **quantize)
    ctx = _steps.Context(config=config, run_dir=tmp_path, progress=lambda message: None)
    with pytest.raises(Captured):
        _steps.quantize(ctx, config.steps.quantize)
    data = str(tmp_path / "data.npz")
    shown = tuple(data if v == "data" else v for v in expected)
    assert (seen["eval"], seen["calibration"]) == shown


@pytest.mark.parametrize("second_opinion", [True, False])
def test_the_export_s_second_opinion_key_holds_for_the_int8_contract_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second_opinion: bool
) -> None:
    # a hint about the second opinion names steps.export.second_opinion wherever it is met
    # (onnxgate._words.GATE_KEYS): quantize's contract must follow that key
    seen = {}

    def fake(model, config, progress=None):
        seen["second_opinion"] = config.second_opinion
        raise Captured

    monkeypatch.setattr(importlib.import_module("onnxgate.quantize"), "quantize", fake)
    config = _config(tmp_path, export={"second_opinion": second_opinion})
    ctx = _steps.Context(config=config, run_dir=tmp_path, progress=lambda message: None)
    with pytest.raises(Captured):
        _steps.quantize(ctx, config.steps.quantize)
    assert seen["second_opinion"] is second_opinion


@pytest.mark.parametrize("reduce_range", [None, True, False])
def test_reduce_range_the_preset_s_notice_names_reaches_the_quantiser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reduce_range: bool | None
) -> None:
    # the avx2 preset's notice offers steps.quantize.reduce_range = true: the key must exist
    # and be what quantize is given (not set: the preset's choice)
    seen = {}

    def fake(model, config, progress=None):
        seen["reduce_range"] = config.reduce_range
        raise Captured

    monkeypatch.setattr(importlib.import_module("onnxgate.quantize"), "quantize", fake)
    keys = {} if reduce_range is None else {"reduce_range": reduce_range}
    config = _config(tmp_path, **keys)
    ctx = _steps.Context(config=config, run_dir=tmp_path, progress=lambda message: None)
    with pytest.raises(Captured):
        _steps.quantize(ctx, config.steps.quantize)
    assert seen["reduce_range"] is reduce_range


@pytest.mark.parametrize(
    ("quantize", "taken"),
    [
        ({"mode": "dynamic"}, ("eval",)),
        ({"mode": "static"}, ("calibration",)),
        ({"mode": "static", "eval": "held.npz"}, ("calibration",)),
        ({"mode": "static", "calibration": "cal.npz"}, ("eval",)),
        ({"eval": "held.npz"}, ()),
    ],
)
def test_the_settings_taken_from_feeds_inputs_are_those_it_fills(
    tmp_path: Path, quantize: dict, taken: tuple
) -> None:
    # their messages name [feeds] inputs (onnxgate._words.gate_key's from_feeds)
    config = _config(tmp_path, **quantize)
    section = config.steps.quantize
    assert _steps.from_feeds("quantize", section, config.feeds) == taken
    assert _steps.from_feeds("compare", config.steps.compare, config.feeds) == ()
