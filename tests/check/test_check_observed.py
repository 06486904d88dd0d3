"""SHP003: an output whose declared shape contradicts what the model was seen to produce."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from models import misdeclared, mlp, save
from onnxgate.check import CheckConfig, check_model
from onnxgate.cli import app
from onnxgate.contract import ContractConfig, init_contract

runner = CliRunner()


def shp003(report) -> list:
    return [f for f in report.findings if f.code == "SHP003"]


def test_an_observed_shape_that_contradicts_the_declaration_is_a_warning(
    tmp_path, installed_profile
):
    path = save(misdeclared(), tmp_path / "ocr.onnx")
    # onnx's inference cannot see it: without evidence, check has nothing to say
    assert shp003(check_model(path, profile=installed_profile)) == []
    config = CheckConfig(observed_outputs={"y": ("N", 1, 10)})
    report = check_model(path, config, profile=installed_profile)
    (found,) = shp003(report)
    assert found.severity == "warning" and found.tensor == "y"
    assert found.message == (
        "output 'y' is declared [1, seqlen] but the model produces [N, 1, 10] "
        "(its contract's golden outputs)"
    )
    # the model loads and runs as it is: a warning passes by default, fails when asked
    assert report.passed and report.predicted_load
    strict = CheckConfig(observed_outputs={"y": ("N", 1, 10)}, fail_on="warning")
    assert not check_model(path, strict, profile=installed_profile).passed
    ignored = CheckConfig(observed_outputs={"y": ("N", 1, 10)}, ignore=("SHP003",))
    assert shp003(check_model(path, ignored, profile=installed_profile)) == []


def test_an_observed_shape_equal_to_the_declaration_or_of_another_output_is_no_finding(
    tmp_path, installed_profile
):
    path = save(mlp(), tmp_path / "mlp.onnx")
    same = CheckConfig(observed_outputs={"y": ("batch", 3), "other": (1,)})
    assert shp003(check_model(path, same, profile=installed_profile)) == []


def test_the_cli_reads_the_contract_beside_the_model(tmp_path):
    path = save(misdeclared(), tmp_path / "ocr.onnx")
    before = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert before.exit_code == 0, before.output
    assert "SHP003" not in before.output  # no contract yet: no evidence
    init_contract(path, ContractConfig())
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (found,) = [f for f in json.loads(result.output)["findings"] if f["code"] == "SHP003"]
    assert "declared [1, seqlen] but the model produces [N, 1, 10]" in found["message"]
    failed = runner.invoke(app, ["check", str(path), "--fail-on", "warning"])
    assert failed.exit_code == 1 and "SHP003" in failed.output
