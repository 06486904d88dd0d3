"""The gate's check step judges the shapes the export's golden outputs have (SHP003)."""

from __future__ import annotations

from pathlib import Path

from models import misdeclared, save
from onnxgate.gate import run_gate

ONLY_CHECK = "".join(
    f"\n[steps.{step}]\nenabled = false\n"
    for step in ("compare", "verify", "placement", "tune", "quantize", "bench")
)


def _gate(folder: Path, check: str = "") -> Path:
    save(misdeclared(), folder / "ocr.onnx")
    path = folder / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "ocr"\nsource = "ocr.onnx"\n'
        + ONLY_CHECK
        + f"\n[steps.check]\n{check}"
    )
    return path


def test_the_check_step_warns_of_an_output_that_contradicts_its_declaration(tmp_path):
    report = run_gate(_gate(tmp_path), cache=False)
    step = report.step("check")
    assert report.passed and step.passed
    assert step.figures["warnings"] == 1
    (findings,) = [r["findings"] for r in step.report["runtimes"].values()]
    assert [f["code"] for f in findings] == ["SHP003"]
    assert "declared [1, seqlen] but the model produces [N, 1, 10]" in findings[0]["message"]


def test_fail_on_warning_fails_the_gate_on_it(tmp_path):
    report = run_gate(_gate(tmp_path, 'fail_on = "warning"\n'), cache=False)
    assert not report.passed and report.failed_steps == ["check"]
