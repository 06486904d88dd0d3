"""A contract that records where its model runs (``lineage.runs_on``) is verified there alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models import mlp, record_runs_on, save
from onnxgate.cli import app
from onnxgate.contract import VerifyConfig, init_contract, verify
from onnxgate.errors import ConfigError
from onnxgate.settings import SessionSettings

OPENVINO = "onnxruntime-openvino==1.24.1"
OV = "OpenVINOExecutionProvider"


@pytest.fixture
def on_openvino(tmp_path: Path) -> Path:
    model = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(model)
    record_runs_on(model, [OV], OPENVINO)
    return model


@pytest.mark.parametrize(
    "config",
    [
        VerifyConfig(runtimes=("onnxruntime==1.20.1",)),
        VerifyConfig(session=SessionSettings(providers=("cpu",))),
    ],
    ids=["another-runtime", "another-provider"],
)
def test_other_runtimes_or_providers_than_the_recorded_ones_are_refused(
    on_openvino: Path, config: VerifyConfig
) -> None:
    with pytest.raises(ConfigError) as caught:
        verify(on_openvino, config)
    message = caught.value.message
    assert "mlp.onnx" in message and "lineage.runs_on" in message
    assert f"{OV} on {OPENVINO}" in message
    assert "Leave the runtimes and providers out" in (caught.value.hint or "")


def test_a_contract_recording_the_installed_cpu_provider_verifies_as_before(tmp_path: Path) -> None:
    model = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(model)
    record_runs_on(model, [], None)
    report = verify(model)
    assert report.passed and report.runs_on is None
    assert report.results[0].runtime.endswith("(installed)")


@pytest.mark.slow
def test_a_contract_recording_an_isolated_build_is_verified_on_it(on_openvino: Path) -> None:
    result = CliRunner().invoke(app, ["verify", str(on_openvino), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["runs_on"] == f"as quantised: {OV} on {OPENVINO}"
    assert report["providers"][0] == OV
    (row,) = report["results"]
    assert row["runtime"] == OPENVINO
    assert row["ran"]["runtime"] == "onnxruntime-openvino"
    assert f"node(s) on {OV}" in row["placement"]["reason"]
    # asking for the recorded runtime and provider by hand is the same verification
    same = verify(
        on_openvino,
        VerifyConfig(runtimes=(OPENVINO,), session=SessionSettings(providers=("openvino",))),
    )
    assert same.passed and same.results[0].runtime == OPENVINO
