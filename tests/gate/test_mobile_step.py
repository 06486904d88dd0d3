"""``[steps.mobile]``: the ORT format in the run folder, proven, and held to edge budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import mlp, save
from onnxgate.gate import run_gate
from onnxgate.perf._contention import Watch, judge

BASE = """
[steps.tune]
enabled = false
[steps.bench]
enabled = false
[steps.mobile]
enabled = true
budget = 0.2
"""


def _config(folder: Path, body: str = "") -> Path:
    save(mlp(), folder / "mlp.onnx")
    path = folder / "gate.toml"
    head = 'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
    path.write_text(head + BASE + body)
    return path


def _machine(monkeypatch: pytest.MonkeyPatch, others: float) -> None:
    """Every timing judged as if other processes took ``others`` of the CPUs."""

    def conditions(self, latencies=None):
        return judge(2, 1.0, others=others, steal=0.0, baseline_ms=(2.0, 2.0), drifts={})

    monkeypatch.setattr(Watch, "conditions", conditions)


def test_the_step_writes_the_ort_format_proves_it_and_is_cached(tmp_path, monkeypatch):
    _machine(monkeypatch, 0.01)
    path = _config(tmp_path, "max_size_mb = 50.0\nmax_peak_rss_mb = 4000.0\n")
    report = run_gate(path)
    step = report.step("mobile")
    assert report.passed and step.status == "passed", step.reason
    assert {a.path for a in step.artefacts} == {"mlp.ort", "mlp.required_operators.config"}
    assert step.figures["ort_mb"] > 0 and step.figures["peak_rss_mb"] > 0
    assert "single-thread p50" in step.summary
    page = (Path(report.run_dir) / "report.html").read_text()
    assert "mlp.ort" in page and "domain;opset" in page and "single-thread p50" in page
    config = Path(report.run_dir) / "mlp.required_operators.config"
    assert "# - mlp.ort\n" in config.read_text() and str(tmp_path) not in config.read_text()
    again = run_gate(path)
    assert again.step("mobile").cached and again.passed
    # restored from the cache, the config is the same file: it names no run folder
    restored = Path(again.run_dir) / config.name
    assert restored.read_text() == config.read_text()


def test_a_budget_missed_fails_the_gate_with_the_figure_and_the_key(tmp_path, monkeypatch):
    _machine(monkeypatch, 0.01)
    report = run_gate(_config(tmp_path, "max_size_mb = 0.0001\nmax_p50_ms = 0.000001\n"))
    step = report.step("mobile")
    assert not report.passed and report.failed_steps == ["mobile"]
    size = step.figures["ort_mb"]
    assert f".ort {size:.3f} MB > steps.mobile.max_size_mb = 0.0001" in step.reason
    assert "> steps.mobile.max_p50_ms = 1e-06" in step.reason


@pytest.mark.parametrize("on_unreliable", ["warn", "fail"])
def test_a_p50_budget_on_a_busy_machine_is_inconclusive(tmp_path, monkeypatch, on_unreliable):
    _machine(monkeypatch, 0.7)
    body = f'max_p50_ms = 0.000001\non_unreliable = "{on_unreliable}"\n'
    report = run_gate(_config(tmp_path, body))
    step = report.step("mobile")
    assert step.status == "inconclusive"
    assert "other processes took 70%" in step.summary
    assert report.passed is (on_unreliable == "warn")


def test_a_size_miss_on_a_busy_machine_does_not_blame_the_timings(tmp_path, monkeypatch):
    _machine(monkeypatch, 0.7)
    report = run_gate(_config(tmp_path, "max_size_mb = 0.0001\n"))
    step = report.step("mobile")
    assert step.status == "failed" and "max_size_mb" in step.reason
    assert "timings" not in step.reason and "unreliable" not in step.reason


@pytest.mark.parametrize("key", ["max_size_mb", "max_peak_rss_mb", "max_p50_ms"])
def test_a_budget_of_inf_is_refused_naming_the_key(tmp_path, key):
    from onnxgate.errors import ConfigError

    with pytest.raises(ConfigError, match=f"steps.mobile.{key}"):
        run_gate(_config(tmp_path, f"{key} = inf\n"))
