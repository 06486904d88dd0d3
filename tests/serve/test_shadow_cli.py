"""``onnxgate serve --shadow ...``: the flags teach, refuse bad values by name, reach the config."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.cli import app

from ._serve_helpers import copy_model


def words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_help_teaches_shadowing() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = words(result.output)
    for flag in ("--shadow ", "--shadow-fraction", "--shadow-queue", "--shadow-keep-inputs",
                 "--shadow-record", "--shadow-busy", "--shadow-threads"):  # fmt: skip
        assert flag in text
    assert "GET /v2/models/NAME/shadow" in text and "onnxgate_shadow_" in text
    assert "shed" in text and "queue_full" in text and "champion_busy" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shadow-fraction", "1.5"], "--shadow-fraction 1.5"),
        (["--shadow-queue", "0"], "--shadow-queue 0"),
        (["--shadow", "other=cand.onnx"], "'other', which this server does not serve"),
    ],
)
def test_a_bad_shadow_setting_is_a_usage_error_naming_its_flag(
    token_model: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    model = copy_model(token_model, tmp_path / "m")
    result = CliRunner().invoke(
        app,
        ["serve", str(model), "--allow-ungated", "--http-port", "0", "--grpc-port", "0", *args],
    )
    assert result.exit_code == 2, result.output
    assert message in words(result.output)
    assert "Traceback" not in result.output
