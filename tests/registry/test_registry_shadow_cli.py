"""``registry shadow-report`` and ``registry promote --when-shadow-passes`` in-process."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from onnxgate.cli.registry_cmd import registry_app

from ._registry_helpers import gate_report, make_files
from .test_registry_shadow import RULE, pair

runner = CliRunner()


def invoke(backend, *args: str):
    return runner.invoke(
        registry_app, [*args, "--registry", backend.url, "--store", str(backend.store)]
    )


@pytest.fixture
def shadowed(backend, tmp_path):
    """bert@1 @champion; bert@2 @candidate with 40 good pairs; bert@3 @bad failing 5 of 40."""
    with backend.open() as reg:
        for n in (1, 2, 3):
            files = make_files(tmp_path / f"v{n}")
            alias = {1: "champion", 2: "candidate", 3: "bad"}[n]
            reg.register("bert", files, gate_report(files), alias=alias)
        good = reg.shadow_open("bert", 2, 1, {})
        reg.shadow_add(good, [pair(i) for i in range(40)])
        bad = reg.shadow_open("bert", 3, 1, {})
        reg.shadow_add(bad, [pair(i, passed=i % 8 != 0) for i in range(40)])
    return backend


def test_shadow_report_exit_codes_and_json(shadowed, tmp_path):
    result = invoke(shadowed, "shadow-report", "bert@candidate", "--min-pairs", "40", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["passed"] is True and document["verdict"]["status"] == "passed"
    assert document["verdict"]["pairs"] == 40 and document["champion"] == "bert@1"

    result = invoke(shadowed, "shadow-report", "bert@bad", "--min-pairs", "40", "-f", "json")
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["verdict"]["status"] == "failed"
    assert "5 of 40" in document["verdict"]["reasons"][0]
    assert document["worst"][0]["passed"] is False

    result = invoke(shadowed, "shadow-report", "bert@candidate", "--json")  # needs 1000
    assert result.exit_code == 1
    assert json.loads(result.output)["verdict"]["status"] == "inconclusive"

    result = invoke(shadowed, "shadow-report", "bert@candidate", "--against", "prod")
    assert result.exit_code == 2 and "no alias 'prod'" in result.output
    result = invoke(shadowed, "shadow-report", "bert@candidate", "--against", "prod", "--json")
    assert result.exit_code == 2
    assert json.loads(result.output)["error"] == "not-found"


def test_shadow_report_text_names_the_failing_output_and_writes_html(shadowed, tmp_path):
    page = tmp_path / "out" / "shadow.html"
    page.parent.mkdir()
    result = invoke(shadowed, "shadow-report", "bert@bad", "--min-pairs", "40", "--html", str(page))
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.output and "'emb'" in result.output and RULE in result.output
    assert "worst requests" in result.output
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "st-failed" in html and "5 of 40" in html
    assert pair(0).input_digest[:16] in html and "<script" not in html
    assert os.listdir(page.parent) == ["shadow.html"]  # no temporary file left beside it


def test_promote_when_shadow_passes_on_the_command_line(shadowed):
    result = invoke(shadowed, "promote", "bert@bad", "champion", "--when-shadow-passes")
    assert result.exit_code == 1
    assert "'emb'" in result.output and "5 of 40" in result.output
    assert "shadow-report" in result.output  # the hint

    result = invoke(shadowed, "promote", "bert@candidate", "champion", "--when-shadow-passes")
    assert result.exit_code == 1 and "inconclusive" in result.output and "1000" in result.output

    result = invoke(
        shadowed,
        "promote",
        "bert@candidate",
        "champion",
        "--when-shadow-passes",
        "--min-pairs",
        "40",
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["number"] == 2

    result = invoke(shadowed, "show", "bert@2")
    assert result.exit_code == 0
    assert "shadow verdict" in result.output and "PASSED" in result.output
    assert "0/40" in result.output and "emb" in result.output
    detail = json.loads(invoke(shadowed, "show", "bert@2", "-f", "json").output)
    (promotion,) = [p for p in detail["promotions"] if p["alias"] == "champion"]
    assert promotion["evidence"]["pairs"] == 40 and promotion["evidence"]["status"] == "passed"


def test_show_lists_the_shadow_runs_of_a_candidate_with_their_figures(shadowed):
    with shadowed.open() as reg:  # a second run of bert@3 beside bert@1: one hint for both
        reg.shadow_add(reg.shadow_open("bert", 3, 1, {}), [pair(i, passed=False) for i in range(3)])
    result = invoke(shadowed, "show", "bert@bad")
    assert result.exit_code == 0, result.output
    page = result.output
    assert max(len(line) for line in page.splitlines()) <= 80
    assert "shadow runs" in page
    rows = [line.split() for line in page.splitlines() if line.split()[:1] in (["2"], ["3"])]
    assert [(r[0], r[1], r[-2], r[-1]) for r in rows] == [
        ("2", "bert@1", "40", "5"),
        ("3", "bert@1", "3", "3"),
    ]
    hint = "onnxgate registry shadow-report bert@3 --against 1"
    assert page.count(hint) == 1

    detail = json.loads(invoke(shadowed, "show", "bert@3", "-f", "json").output)
    runs = [
        (r["id"], r["role"], r["candidate"], r["champion"], r["pairs"], r["failed"])
        for r in detail["shadow_runs"]
    ]
    assert runs == [
        (2, "candidate", "bert@3", "bert@1", 40, 5),
        (3, "candidate", "bert@3", "bert@1", 3, 3),
    ]
    assert all(r["host"] and r["started_at"] for r in detail["shadow_runs"])


def test_show_of_a_champion_counts_the_runs_beside_it_and_unshadowed_shows_none(shadowed):
    result = invoke(shadowed, "show", "bert@champion")
    assert result.exit_code == 0, result.output
    assert "shadow runs with this version as the champion: 2" in result.output
    assert "bert@2: 1 run(s), 40 request(s), 0 failed" in result.output
    assert "bert@3: 1 run(s), 40 request(s), 5 failed" in result.output
    detail = json.loads(invoke(shadowed, "show", "bert@1", "-f", "json").output)
    assert [(r["role"], r["candidate"]) for r in detail["shadow_runs"]] == [
        ("champion", "bert@2"),
        ("champion", "bert@3"),
    ]

    with shadowed.open() as reg:
        files = make_files(shadowed.store.parent / "v4")
        reg.register("bert", files, gate_report(files))
    result = invoke(shadowed, "show", "bert@4")
    assert result.exit_code == 0, result.output
    assert "shadow" not in result.output
    assert json.loads(invoke(shadowed, "show", "bert@4", "-f", "json").output)["shadow_runs"] == []
