"""``onnxgate registry ...`` in-process: exit codes, JSON, and the text tables."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from onnxgate.cli.registry_cmd import registry_app

from ._registry_helpers import gate_report, make_files

runner = CliRunner()


def invoke(backend, *args: str):
    return runner.invoke(
        registry_app, [*args, "--registry", backend.url, "--store", str(backend.store)]
    )


@pytest.fixture
def seeded(backend, tmp_path):
    with backend.open() as reg:
        good = make_files(tmp_path / "good")
        bad = make_files(tmp_path / "bad")
        reg.register("bert", good, gate_report(good), alias="champion", tags={"team": "nlp"})
        reg.register("bert", bad, gate_report(bad, passed=False))
    return backend


def test_list_and_show(seeded):
    result = invoke(seeded, "list")
    assert result.exit_code == 0, result.output
    assert "bert" in result.output and "champion→1" in result.output
    result = invoke(seeded, "list", "--format", "json")
    (model,) = json.loads(result.output)
    assert (model["name"], model["versions"], model["aliases"]) == ("bert", 2, {"champion": 1})

    result = invoke(seeded, "list", "bert", "-f", "json")
    assert [(v["number"], v["status"]) for v in json.loads(result.output)] == [
        (1, "ready"),
        (2, "failed"),
    ]
    result = invoke(seeded, "show", "bert@2")
    assert result.exit_code == 0, result.output
    assert "bert@2" in result.output and "failed" in result.output
    assert "p99 above the budget" in result.output  # the failed step's reason
    assert max(len(line) for line in result.output.splitlines()) <= 80
    detail = json.loads(invoke(seeded, "show", "bert@champion", "-f", "json").output)
    assert detail["version"]["number"] == 1 and detail["tags"] == {"team": "nlp"}
    report = json.loads(invoke(seeded, "show", "bert", "--report").output)
    assert report["passed"] is False and report["format"] == "onnxgate.gate-report/1"


def test_promote_refuses_then_records_the_forced_reason(seeded):
    result = invoke(seeded, "promote", "bert@2", "champion")
    assert result.exit_code == 1
    assert "did not pass" in result.output and "Traceback" not in result.output
    result = invoke(seeded, "promote", "bert@2", "champion", "--force")
    assert result.exit_code == 2 and "--reason" in result.output
    result = invoke(
        seeded, "promote", "bert@2", "champion", "--force", "--reason", "hotfix for incident 42"
    )
    assert result.exit_code == 0, result.output
    assert "forced" in result.output
    shown = invoke(seeded, "show", "bert@champion")
    assert "FORCED" in shown.output and "hotfix for incident 42" in shown.output
    detail = json.loads(invoke(seeded, "show", "bert@champion", "-f", "json").output)
    (promotion,) = detail["promotions"]
    assert promotion["forced"] and promotion["reason"] == "hotfix for incident 42"


def test_bad_references_are_exit_2_and_name_the_reference(seeded):
    result = invoke(seeded, "show", "bert@prod")
    assert result.exit_code == 2
    assert "no alias 'prod'" in result.output and "champion" in result.output
    result = invoke(seeded, "show", "bert@9", "-f", "json")
    assert result.exit_code == 2
    assert json.loads(result.output)["error"] == "not-found"
    assert invoke(seeded, "fetch", "gpt@1", "--out", "x").exit_code == 2


def test_fetch_and_fsck(seeded, tmp_path):
    out = tmp_path / "deploy"
    result = invoke(seeded, "fetch", "bert@champion", "--out", str(out), "-f", "json")
    assert result.exit_code == 0, result.output
    fetched = json.loads(result.output)
    assert fetched["version"]["number"] == 1
    assert (out / "bert.onnx").is_file() and (out / "bert.contract.json").is_file()

    result = invoke(seeded, "fsck")
    assert result.exit_code == 0 and "CONSISTENT" in result.output
    with seeded.open() as reg:
        reg.store.path(reg.get("bert@1").artefacts["model"]).unlink()
    result = invoke(seeded, "fsck", "-f", "json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["consistent"] is False
    assert [(p["kind"], p["where"]) for p in report["problems"]] == [
        ("missing-blob", "bert@1 model")
    ]
    result = invoke(seeded, "fetch", "bert@1", "--out", str(tmp_path / "again"))
    assert result.exit_code == 1 and "missing" in result.output


def test_an_unreachable_registry_is_exit_3_with_the_password_masked(tmp_path):
    url = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    for fmt in ("text", "json"):
        result = runner.invoke(
            registry_app, ["list", "--registry", url, "--store", str(tmp_path), "-f", fmt]
        )
        assert result.exit_code == 3
        assert "postgresql+psycopg://u:***@127.0.0.1:1/x" in result.output.replace("\n", "")
        assert "secret" not in result.output
        assert "Traceback" not in result.output
    assert json.loads(result.output)["error"] == "registry-unreachable"


def test_help_teaches_with_examples():
    result = runner.invoke(registry_app, ["--help"])
    assert result.exit_code == 0
    for command in ("list", "show", "promote", "fetch", "fsck"):
        assert command in result.output
    result = runner.invoke(registry_app, ["promote", "--help"])
    assert "onnxgate registry promote bert@7 champion" in result.output
    assert "--force" in result.output and "--reason" in result.output
