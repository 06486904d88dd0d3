"""A gate that could not run a step for a missing extra exits 3; a failed check still exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.errors import ExitCode, ExtraMissing
from onnxgate.gate import _pipeline, _steps
from onnxgate.gate._report import StepResult

QUIET = """
[steps.tune]
enabled = false

[steps.bench]
enabled = false
"""


def _config(folder: Path) -> Path:
    save(mlp(), folder / "mlp.onnx")
    path = folder / "gate.toml"
    path.write_text('version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n' + QUIET)
    return path


def _no_torch(ctx: object, step: object) -> _steps.Outcome:
    raise ExtraMissing(
        "compare against PyTorch needs the 'torch' extra (torch is not installed).", extra="torch"
    )


def test_a_step_without_its_extra_is_exit_3_naming_the_extra_and_the_report_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_pipeline.RUNNERS, "compare", _no_torch)
    run = tmp_path / "run"
    # not from the cache: an earlier test's compare of the same mlp, exported within the same
    # second (the contract's timestamp), would be taken from it instead of the faked step
    result = CliRunner().invoke(
        app, ["gate", str(_config(tmp_path)), "--out", str(run), "--no-cache"]
    )
    assert result.exit_code == 3, result.output
    step_line = next(line for line in result.output.splitlines() if "compare" in line)
    assert "error" in step_line and "'torch' extra" in step_line
    assert "[torch]'" in result.output  # the install line, below the step line
    saved = json.loads((run / "report.json").read_text())
    compare = next(step for step in saved["steps"] if step["name"] == "compare")
    assert compare["status"] == "error" and compare["exit_code"] == 3
    assert saved["passed"] is False and (run / "junit.xml").is_file()


def test_a_failed_check_wins_over_a_missing_extra_and_other_errors_stay_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_pipeline.RUNNERS, "compare", _no_torch)
    report = _pipeline.run_gate(_config(tmp_path), register=False, cache=False)
    assert _pipeline.exit_code(report) == ExitCode.ENVIRONMENT

    def replaced(name: str, **update: object) -> list[StepResult]:
        return [s.model_copy(update=update) if s.name == name else s for s in report.steps]

    failed = report.model_copy(update={"steps": replaced("check", status="failed")})
    assert _pipeline.exit_code(failed) == ExitCode.FAILED
    told_to_fail = report.model_copy(
        update={"steps": replaced("check", status="inconclusive", on_unreliable="fail")}
    )
    assert _pipeline.exit_code(told_to_fail) == ExitCode.FAILED
    warned = report.model_copy(
        update={"steps": replaced("check", status="inconclusive", on_unreliable="warn")}
    )
    assert _pipeline.exit_code(warned) == ExitCode.ENVIRONMENT
    usage = report.model_copy(update={"steps": replaced("check", status="error", exit_code=2)})
    assert _pipeline.exit_code(usage) == ExitCode.FAILED
    passed = report.model_copy(
        update={"passed": True, "steps": replaced("compare", status="passed", exit_code=None)}
    )
    assert _pipeline.exit_code(passed) == ExitCode.PASSED
