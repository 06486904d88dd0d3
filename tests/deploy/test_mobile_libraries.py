"""deploy mobile with a custom operator library: ONNX Runtime's converter, the proof on the .ort
file and the timing worker register the library the contract records (the real
onnxruntime-extensions); more than the converter can take is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate._opslib import EXTENSIONS
from onnxgate.cli import app
from onnxgate.deploy import MobileDeployConfig, deploy_mobile
from onnxgate.errors import ConfigError
from onnxgate.mobile import required_operators

runner = CliRunner()


@pytest.fixture
def gated(negpos_gated: Path) -> Path:
    """The NegPos model with a contract that records onnxruntime-extensions."""
    return negpos_gated


def test_the_contracts_library_converts_proves_and_times_the_ort_file(gated, tmp_path):
    out = tmp_path / "mobile"
    args = ["deploy", "mobile", str(gated), "-o", str(out), "--allow-ungated", "--budget", "0.1"]
    result = runner.invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert report["p50_ms"]  # timed in a worker that registered the library
    assert any(EXTENSIONS in note for note in report["notes"])
    operators = required_operators(out / "negpos.required_operators.config")
    assert any(key.startswith("ai.onnx.contrib;") for key in operators)
    assert (out / "negpos.ort").is_file()


def test_two_libraries_are_refused_naming_them(gated, tmp_path):
    other = tmp_path / "libother.so"
    other.write_bytes(b"not a library")
    config = MobileDeployConfig(
        out=tmp_path / "mobile", allow_ungated=True, ops_libraries=(EXTENSIONS, str(other))
    )
    with pytest.raises(ConfigError) as raised:
        deploy_mobile(gated, config)
    assert "registers one" in raised.value.message
    assert EXTENSIONS in raised.value.message and "libother.so" in raised.value.message
