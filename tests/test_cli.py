"""The CLI in-process: exit codes, one JSON document per --format json, formats of check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from onnx import helper
from typer.testing import CliRunner

from models import mlp, model, newer_opset, save, value
from onnxgate import __version__
from onnxgate.check import CheckConfig
from onnxgate.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def good(tmp_path):
    return save(mlp(), tmp_path / "mlp.onnx")


@pytest.fixture
def bad(tmp_path):
    """An opset the installed runtime refuses (VER003), and a node that reads a missing tensor."""
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    return save(
        model(nodes, [value("x", shape=(1, 4))], [value("y")], opsets={"": newer_opset()}, ir=13),
        tmp_path / "bad.onnx",
    )


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"onnxgate {__version__}"


def _commands() -> list[list[str]]:
    """Every leaf command of the app, groups included (export torch, contract init, ...)."""
    import typer.main

    def walk(group, prefix):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, [*prefix, name])
            else:
                yield [*prefix, name]

    return list(walk(typer.main.get_command(app), []))


@pytest.mark.parametrize("command", [[], *_commands()], ids=" ".join)
def test_help_on_every_command(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Usage" in result.stdout
    if command:
        assert "Exit codes" in result.stdout and "--format" in result.stdout


def test_inspect_json(good):
    result = run("inspect", str(good), "--format", "json")
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    for key in (
        "ir_version",
        "opsets",
        "producer",
        "inputs",
        "outputs",
        "op_counts",
        "parameters",
        "size_bytes",
        "external_data",
        "min_runtime",
    ):
        assert key in info
    assert info["inputs"] == [
        {"name": "x", "dtype": "float32", "shape": ["batch", 4], "type": "tensor(float)"}
    ]
    assert info["op_counts"] == {"MatMul": 1, "Add": 1, "Relu": 1}
    assert info["parameters"] == 4 * 3 + 3
    assert info["min_runtime"]["onnxruntime"] is not None


def test_inspect_text(good):
    result = run("inspect", str(good))
    assert result.exit_code == 0
    assert "15 parameters" in result.stdout and "[batch, 4]" in result.stdout


def test_check_passes(good):
    result = run("check", str(good))
    assert result.exit_code == 0 and "PASS" in result.stdout


def test_check_fails_with_exit_1_and_json(bad):
    result = run("check", str(bad), "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["passed"] is False and report["runtime"].startswith("onnxruntime==")
    found = {f["code"]: f for f in report["findings"]}
    assert {"VER003", "STR006"} <= set(found)
    assert found["STR006"]["node"] == "add"
    assert all(
        {"code", "severity", "message", "node", "hint"} <= set(f) for f in report["findings"]
    )


def test_check_text_names_codes_and_fixes(bad):
    result = run("check", str(bad))
    assert result.exit_code == 1
    assert "VER003" in result.stdout and "fix:" in result.stdout and "FAIL" in result.stdout


def test_check_github_annotations(bad):
    result = run("check", str(bad), "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("::error file=") and "title=VER003::" in line for line in lines)
    assert any(line.startswith("::warning file=") and "title=SHP001::" in line for line in lines)


def test_check_sarif(bad):
    result = run("check", str(bad), "--format", "sarif")
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0"
    run0 = log["runs"][0]
    rule_ids = [rule["id"] for rule in run0["tool"]["driver"]["rules"]]
    for result_ in run0["results"]:
        assert rule_ids[result_["ruleIndex"]] == result_["ruleId"]
    assert {"VER003", "STR006"} <= {r["ruleId"] for r in run0["results"]}


def test_fail_on_warning(tmp_path):
    fixed_batch = save(
        model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [value("x", shape=(1, 4))],
            [value("y", shape=(1, 4))],
        ),
        tmp_path / "m.onnx",
    )
    assert run("check", str(fixed_batch)).exit_code == 0
    assert run("check", str(fixed_batch), "--fail-on", "warning").exit_code == 1
    assert (
        run("check", str(fixed_batch), "--fail-on", "warning", "--ignore", "SHP001").exit_code == 0
    )


def test_unknown_provider_is_exit_2_and_names_it(good):
    result = run(
        "check", str(good), "--providers", "cuda,NoSuchExecutionProvider", "--format", "json"
    )
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"] == "config" and "NoSuchExecutionProvider" in doc["message"]


def test_bad_runtime_spec_is_exit_2(good):
    result = run("check", str(good), "--runtime", "onnxruntime>=1.16")
    assert result.exit_code == 2 and "not a runtime spec" in result.stderr


def test_usage_error_is_exit_2():
    assert run("check").exit_code == 2
    assert run("inspect", "a.onnx", "--format", "yaml").exit_code == 2


def test_runtimes_lists_probed_and_published_rows():
    result = run("runtimes", "--format", "json")
    assert result.exit_code == 0
    rows = {row["release"]: row for row in json.loads(result.stdout)["releases"]}
    assert rows["1.31.1"]["source"] == "probed" and rows["1.0"]["source"] == "published"


def test_rich_markup_in_model_strings_is_printed_verbatim(tmp_path):
    proto = mlp()
    proto.producer_name = "[/x] [bold]exporter"
    path = save(proto, tmp_path / "markup[1].onnx")
    result = run("inspect", str(path))
    assert result.exit_code == 0, result.output
    assert "[/x] [bold]exporter" in result.stdout and "markup[1].onnx" in result.stdout


def test_fail_on_warning_is_the_reports_verdict_too(tmp_path):
    path = save(
        model([helper.make_node("Relu", ["x"], ["y"])], [value("x", shape=(1, 4))], [value("y")]),
        tmp_path / "m.onnx",
    )
    result = run("check", str(path), "--fail-on", "warning", "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["passed"] is False and report["fail_on"] == "warning"


def test_github_annotation_escapes_the_file_property(tmp_path):
    path = save(
        model([helper.make_node("Relu", ["x"], ["y"])], [value("x", shape=(1, 4))], [value("y")]),
        tmp_path / "a,b:c.onnx",
    )
    line = run("check", str(path), "--format", "github").stdout.strip().splitlines()[0]
    assert "a%2Cb%3Ac.onnx,title=SHP001::" in line


def test_unwritable_cache_still_checks(good, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(blocker / "cache"))
    result = run("check", str(good), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True


def test_unwritable_cache_for_another_release_is_exit_3(good, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("ONNXGATE_ENV_DIR")
    result = run("check", str(good), "--runtime", "onnxruntime==1.16.3", "--format", "json")
    assert result.exit_code == 3
    assert "ONNXGATE_CACHE_DIR" in json.loads(result.stdout)["hint"]


def test_library_takes_comma_separated_strings(good):
    from onnxgate import check_model

    report = check_model(good, CheckConfig(providers=("cuda",), ignore=("SHP001,STR008",)))
    assert report.providers == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_tune_budget_is_the_whole_run_and_contest_seconds_the_contest(good):
    result = run(
        "tune", str(good), "--no-write", "--no-fusions", "--threads", "1",
        "--budget", "0", "--contest-seconds", "0.05", "-f", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["time_budget"] is None and report["passed"]
    assert not any("budget" in note for note in report["notes"])
    result = run("tune", str(good), "--no-write", "--budget", "-1")
    assert result.exit_code == 2 and "--budget" in result.output


def test_verbosity_after_the_subcommand_means_what_it_means_before(good):

    from onnxgate.cli import hoist_verbosity

    assert hoist_verbosity(["compare", "m.onnx", "-vv"]) == ["-vv", "compare", "m.onnx"]
    assert hoist_verbosity(["-v", "bench", "m.onnx", "--verbose"]) == [
        "-v", "--verbose", "bench", "m.onnx",
    ]  # fmt: skip
    assert hoist_verbosity(["x", "--", "-v"]) == ["x", "--", "-v"]
    done = subprocess.run(
        [sys.executable, "-m", "onnxgate", "inspect", str(good), "-vv"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "DEBUG onnxgate" in done.stderr and "No such option" not in done.stderr


def test_flags_are_shown_as_flags_in_help():
    result = run("--help")
    assert "<bool>" not in result.stdout and "<int>" not in result.stdout
    assert "<bool>" not in run("tune", "--help").stdout
    assert "<float>" in run("tune", "--help").stdout  # options with values keep their type


def test_vv_shows_the_exceptions_behind_an_error_and_plain_runs_do_not(tmp_path):

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    command = [sys.executable, "-m", "onnxgate", "inspect", str(bad)]
    plain = subprocess.run(command, capture_output=True, text=True)
    loud = subprocess.run([*command, "-vv"], capture_output=True, text=True)
    assert plain.returncode == loud.returncode == 2
    assert "Traceback" not in plain.stderr
    assert "Traceback" in loud.stderr and "ModelLoadError" in loud.stderr


def test_a_too_new_opset_says_how_to_export_for_the_target(bad):
    result = run("check", str(bad), "-f", "json")
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "VER003"]
    assert (
        "--runtime onnxruntime==" in finding["hint"] and "onnxgate export torch" in finding["hint"]
    )


def test_bench_and_tune_time_real_data_at_its_own_shape(good, tmp_path):
    import numpy as np

    data = tmp_path / "real.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    result = run("bench", str(good), "--inputs", str(data), "--budget", "0.1", "-f", "json")
    assert result.exit_code == 0, result.output
    assert [r["dims"] for r in json.loads(result.stdout)["results"]] == [{"batch": 5}]
    result = run(
        "tune", str(good), "--inputs", str(data), "--no-write", "--no-fusions",
        "--threads", "1", "--contest-seconds", "0.05", "-f", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shape"] == {"batch": 5}
    for command in ("bench", "tune"):
        refused = run(command, str(good), "--inputs", str(data), "--batch", "2", "-f", "json")
        assert refused.exit_code == 2 and "--inputs" in json.loads(refused.stdout)["message"]


@pytest.mark.parametrize(("verbose", "shown"), [(0, False), (1, True)])
def test_libraries_warnings_and_progress_bars_are_shown_only_with_v(verbose, shown):
    # NumPy's overflow warning and a tqdm bar (ONNX Runtime's calibration draws one) leaked into
    # plain output; with -v they are there, as log records
    script = (
        "import warnings, numpy as np\n"
        "from onnxgate.cli._common import configure_logging\n"
        f"configure_logging({verbose})\n"
        "import tqdm\n"  # as the libraries that draw bars import it: after the CLI started
        "np.float16(60000) * np.float16(2)\n"
        "for _ in tqdm.tqdm(range(3), desc='calibrating'): pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"},
        check=True,
    )
    assert ("overflow" in done.stderr) is shown
    assert ("calibrating" in done.stderr) is shown


def _commands(command, path=()):
    import click

    yield path, command
    if hasattr(command, "list_commands"):  # a group (typer carries its own click)
        context = click.Context(command)
        for name in command.list_commands(context):
            yield from _commands(command.get_command(context, name), (*path, name))


@pytest.mark.parametrize("columns", ["80", "140"])
def test_help_keeps_every_option_name_whole(columns):
    """At 80 columns typer's table cut names (``--no-second-opini…``); options stack instead."""
    import typer

    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) > 20 and ("quantize",) in dict(commands)
    for path, command in commands:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": columns})
        assert result.exit_code == 0, (path, result.output)
        lines = result.output.splitlines()
        assert max(map(len, lines)) <= int(columns), path
        cut = [line for line in lines if re.search(r"[\w-]…", line)]  # a word cut short
        assert not cut, (path, cut)
        for param in command.params:
            for name in (*param.opts, *param.secondary_opts):
                if name.startswith("--") and not param.hidden:
                    assert name in result.output, (path, name)


def test_control_characters_from_a_model_never_reach_the_terminal(tmp_path):
    """ESC sequences in node and output names (``\\x1b[8m`` hides what follows) are escaped."""
    name = "y\x1b[8mhidden"
    nodes = [helper.make_node("Relu", ["x"], [name], name="r\x1b]0;title\x07")]
    path = save(model(nodes, [value("x", shape=(1, 4))], [value(name)]), tmp_path / "ctl.onnx")
    for args in (["inspect"], ["check"], ["check", "--format", "github"], ["compare"]):
        result = runner.invoke(app, [*args, str(path)])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.stdout and "\x1b" not in result.stderr, args
    assert "y\\x1b[8mhidden" in runner.invoke(app, ["compare", str(path)]).stdout
