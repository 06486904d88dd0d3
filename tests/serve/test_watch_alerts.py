"""The alerting rules in docs/ name only what the server exports, with labels it has; the watch's
flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.cli import app
from onnxgate.serve._metrics import Metrics

yaml = pytest.importorskip("yaml")  # PyPI's PyYAML, of the kserve extra

RULES = Path(__file__).resolve().parents[2] / "docs" / "alerts" / "onnxgate.rules.yml"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}
LABEL_FUNCTIONS = {"le", "quantile"}


def _exported() -> dict[str, set[str]]:
    """Every sample name the server can export, with the label names of its family."""
    metrics = Metrics()
    found: dict[str, set[str]] = {}
    for collector in list(metrics.registry._collector_to_names):
        for family in collector.describe() or collector.collect():
            labels = set(getattr(collector, "_labelnames", ()))
            for suffix in SUFFIXES[family.type]:
                found[family.name + suffix] = labels
    return found


def _rules() -> list[dict]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_metric_an_alert_names_is_exported_with_the_labels_it_uses():
    exported = _exported()
    rules = _rules()
    assert {r["alert"] for r in rules} >= {
        "OnnxgateDrift",
        "OnnxgateNonFiniteOutputs",
        "OnnxgateInputsOutsideGolden",
        "OnnxgateProviderFallback",
    }
    for rule in rules:
        expr = rule["expr"]
        names = set(re.findall(r"\bonnxgate_\w+", expr))
        assert names, rule["alert"]
        unknown = names - set(exported)
        assert not unknown, f"{rule['alert']} names {unknown}, not exported"
        labels = set().union(*(exported[n] for n in names))
        made = set(re.findall(r'label_replace\([^"]*"(\w+)"', expr))
        for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in labels | made, f"{rule['alert']}: no label {label!r} on {names}"
        for label in re.findall(r"\$labels\.(\w+)", str(rule.get("annotations", {}))):
            assert label in labels | made, f"{rule['alert']}: annotation label {label!r}"
        assert expr.count("(") == expr.count(")"), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}


def test_the_docs_page_explains_every_alert():
    page = (RULES.parents[1] / "alerts.md").read_text()
    for rule in _rules():
        assert f"### {rule['alert']}" in page, rule["alert"]


def test_a_refused_watch_setting_names_its_flag():
    result = CliRunner().invoke(
        app, ["serve", "model.onnx", "--watch-threshold", "0", "--format", "json"]
    )
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["field"] == "watch.threshold"
    assert error["message"].startswith("--watch-threshold 0.0")
