"""``onnxgate serve`` on the command line: per-model settings, and errors before anything serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.cli import app

from ._serve_helpers import copy_model


@pytest.fixture
def model(token_model: Path, tmp_path: Path) -> Path:
    return copy_model(token_model, tmp_path / "m")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("tok", "is not NAME:KEY=VALUE"),
        ("tok:max_batch", "is not NAME:KEY=VALUE"),
        ("tok:max_batch=many", "max_batch"),
        ("tok:colour=blue", "colour"),
        ("other:max_batch=2", "which this server does not serve"),
    ],
)
def test_a_bad_model_option_is_a_usage_error(model: Path, option: str, message: str) -> None:
    result = CliRunner().invoke(
        app,
        ["serve", str(model), "--allow-ungated", "--http-port", "0", "--grpc-port", "0",
         "--model-option", option],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_missing_file_and_an_unknown_registry_reference_are_usage_errors(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "nothing.onnx")])
    assert result.exit_code == 2 and "no such model file" in " ".join(result.output.split())
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    result = CliRunner().invoke(app, ["serve", "absent@prod", "--registry", registry])
    assert result.exit_code == 2, result.output
    assert "absent" in result.output


def test_per_model_settings_reach_the_batcher(start_server, model: Path) -> None:
    server = start_server(
        f"tok={model}", "--allow-ungated", "--model-option", "tok:max_batch=2",
        "--model-option", "tok:instances=2",
    )  # fmt: skip
    assert "tok@1: batches of up to 2 along 'batch' (the contract proved 8)" in server.text()
    assert "2 execution(s) at once" in server.text()


def test_a_taken_port_is_an_environment_error(start_server, model: Path) -> None:
    first = start_server(str(model), "--allow-ungated")
    second = start_server(str(model), "--allow-ungated", http_port=first.http_port, live=False)
    assert second.process.wait(60) == 3
    assert "cannot listen" in second.text()
