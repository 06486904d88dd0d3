"""Inside a gate, a message names the key the setting is made with, wherever the step meets it.

``[model]`` holds the settings of the export (``batch_axis``, ``dynamic``, ``opset``): the
export step meets them, and a message about one names ``model.KEY`` (``onnxgate._words``'s
``GATE_KEYS``), not ``steps.export.KEY``, which does not exist.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import export_nets
from models import mlp, save
from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.gate import run_gate

LATER_STEPS = "".join(
    f"[steps.{step}]\nenabled = false\n"
    for step in ("check", "compare", "verify", "placement", "tune", "bench")
)


def _export_error(tmp_path: Path, model: str) -> str:
    """The export step's reason for a gate whose ``[model]`` table is ``model``."""
    config = tmp_path / "gate.toml"
    config.write_text(f"version = 1\n[model]\n{model}{LATER_STEPS}")
    export = run_gate(config, register=False, cache=False).step("export")
    assert export.status == "error" and export.exit_code == 2, (export.status, export.reason)
    return export.reason or ""


def test_a_batch_axis_the_model_does_not_have_is_named_by_its_model_key(tmp_path: Path) -> None:
    save(mlp(), tmp_path / "mlp.onnx")
    reason = _export_error(tmp_path, 'name = "mlp"\nsource = "mlp.onnx"\nbatch_axis = "rows"\n')
    assert "model.batch_axis 'rows' is not the first axis of every input" in reason
    assert "steps.export.batch_axis" not in reason


@pytest.mark.torch  # names a torch: source (parse_dynamic refuses it before torch is imported)
def test_a_malformed_dynamic_axis_is_named_by_its_model_key(tmp_path: Path) -> None:
    reason = _export_error(
        tmp_path, 'name = "net"\nsource = "torch:nowhere.mod:build"\ndynamic = ["x-0"]\n'
    )
    assert reason.startswith("model.dynamic 'x-0' is not INPUT:AXIS=LABEL.")


@pytest.mark.torch
def test_an_opset_the_exporter_cannot_write_is_named_by_its_model_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    name = export_nets.install(tmp_path, monkeypatch)
    reason = _export_error(
        tmp_path, f'name = "net"\nsource = "torch:{name}:net"\ndynamic = ["x:0=batch"]\nopset = 9\n'
    )
    assert reason.startswith("model.opset 9 is below what dynamo writes (18 and later")
    assert 'Use model.exporter = "torchscript" for opsets before 18.' in reason
    assert "steps.export" not in reason


def test_a_run_folder_in_use_is_named_by_the_option_of_the_interface_in_use(
    tmp_path: Path,
) -> None:
    save(mlp(), tmp_path / "mlp.onnx")
    config = tmp_path / "gate.toml"
    config.write_text(f'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n{LATER_STEPS}')
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file") as caught:
        run_gate(config, out=tmp_path / "afile")
    assert caught.value.hint == "Give another out."  # run_gate's keyword
    result = CliRunner().invoke(
        app, ["gate", "run", str(config), "--out", str(tmp_path / "afile"), "--format", "json"]
    )
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["hint"] == "Give another --out."
