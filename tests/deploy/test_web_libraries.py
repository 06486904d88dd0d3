"""deploy web and the gate's [steps.web] refuse custom operator libraries up front: the browser's
ONNX Runtime (WebAssembly) loads no native shared library, so a model whose contract records one
is refused before anything is written or any browser is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate._opslib import EXTENSIONS
from onnxgate.cli import app
from onnxgate.deploy import WebConfig, deploy_web
from onnxgate.errors import ConfigError
from onnxgate.gate import load_config

runner = CliRunner()


@pytest.fixture
def gated(negpos_gated: Path) -> Path:
    """The NegPos model with a contract that records onnxruntime-extensions."""
    return negpos_gated


def test_deploy_web_refuses_a_model_whose_contract_records_a_library(gated, tmp_path):
    out = tmp_path / "web"
    with pytest.raises(ConfigError) as raised:
        deploy_web(gated, WebConfig(out=out, allow_ungated=True))
    message = raised.value.message
    assert "records the custom operator library onnxruntime-extensions" in message
    assert "onnxruntime-web==" in message
    assert not out.exists() or not any(out.iterdir())


def test_deploy_web_from_the_cli_is_exit_2_naming_the_library(gated, tmp_path):
    args = ["deploy", "web", str(gated), "--out", str(tmp_path / "web"), "--allow-ungated"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "onnxruntime-extensions" in " ".join(result.output.split())


def test_a_gate_with_the_web_step_and_libraries_is_refused_as_it_loads(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "m"\nsource = "m.onnx"\n'
        f'[targets]\nops_libraries = ["{EXTENSIONS}"]\n[steps.web]\nenabled = true\n'
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = raised.value.message
    assert "[steps.web]" in message and EXTENSIONS in message
    assert "enabled = false" in (raised.value.hint or "")
