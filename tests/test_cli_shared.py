"""What the commands share: ``run``, the option groups and their settings, the renderers."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.cli._common import run
from onnxgate.cli._flags import FLAGS
from onnxgate.cli._options import (
    FROM_FLAGS,
    SESSION_FLAGS,
    SessionFlags,
    feed_settings,
    session_options,
    session_settings,
)
from onnxgate.errors import ConfigError, ExitCode
from onnxgate.settings import FeedSettings, SessionSettings

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxgate"


class Report(SimpleNamespace):
    def model_dump(self, mode: str) -> dict:
        return {"passed": self.passed, "mode": mode}


def _invoke(command, *args: str):
    """Run ``command`` as a one-command typer app, in-process."""
    one = typer.Typer()
    one.command()(command)
    return CliRunner().invoke(one, list(args))


@pytest.mark.parametrize(
    ("fmt", "passed", "code"), [("text", True, 0), ("text", False, 1), ("json", False, 1)]
)
def test_run_prints_json_or_text_and_exits_by_the_verdict(fmt, passed, code):
    seen = []

    def command(fmt: str = "text") -> None:
        run(
            fmt,
            lambda progress: (progress("working"), Report(passed=passed))[1],
            lambda report: [f"[bold]verdict[/] {report.passed}"],
        )
        seen.append("not reached")

    result = _invoke(command, "--fmt", fmt)
    assert result.exit_code == code and not seen
    if fmt == "json":
        assert json.loads(result.stdout) == {"passed": passed, "mode": "json"}
    else:
        assert result.stdout == f"verdict {passed}\n"  # markup rendered, not printed raw
    assert result.stderr == ""  # progress goes to the log off a terminal


def test_run_without_a_verdict_returns_and_another_failure_code_is_kept():
    def measure(fmt: str = "text") -> None:
        report = run(fmt, lambda _: Report(passed=False), lambda r: ["measured"], passed=None)
        print(f"after {report.passed}")

    result = _invoke(measure)
    assert result.exit_code == 0 and result.stdout == "measured\nafter False\n"

    def diagnose(fmt: str = "text") -> None:
        run(fmt, lambda _: Report(passed=False), lambda r: [], failed=ExitCode.ENVIRONMENT)

    assert _invoke(diagnose).exit_code == 3


def test_run_hands_other_formats_to_their_writer():
    def command(fmt: str = "text") -> None:
        run(
            fmt,
            lambda _: Report(passed=True),
            lambda r: ["text"],
            formats={"sarif": lambda r: print("sarif document")},
        )

    assert _invoke(command, "--fmt", "sarif").stdout == "sarif document\n"
    assert _invoke(command, "--fmt", "text").stdout == "text\n"


def test_session_flags_become_the_shared_settings_part():
    settings = session_settings(
        providers=["cuda:device_id=1,cpu"],
        provider_options=["cuda:gpu_mem_limit=2"],
        opt_level="basic",
        threads=2,
        cpu_mem_arena=True,  # --no-arena given
        session_config=["session.intra_op.allow_spinning=0"],
    )
    assert settings == SessionSettings(
        providers=("cuda:device_id=1,cpu",),
        provider_options={"cuda": {"gpu_mem_limit": "2"}},
        opt_level="basic",
        threads=2,
        cpu_mem_arena=False,
        session_config={"session.intra_op.allow_spinning": "0"},
    )
    assert session_settings() == SessionSettings()


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ({"opt_level": "turbo"}, "--opt-level 'turbo' is not one of"),
        ({"threads": -1}, "--threads -1"),
        ({"inter_op_threads": -1}, "--inter-op-threads -1"),
        ({"provider_options": ["cuda"]}, "--provider-option 'cuda'"),
        ({"session_config": ["novalue"]}, "--session-config 'novalue'"),
    ],
)
def test_a_bad_session_flag_is_a_config_error_naming_the_flag(flags, flag):
    with pytest.raises(ConfigError, match=flag.replace("'", ".")):
        session_settings(**flags)


def test_every_session_option_comes_from_one_table_keyed_by_field():
    """A command offers session fields; their flags are the ones FLAGS names, declared once."""
    assert set(SESSION_FLAGS) <= set(SessionSettings.model_fields)
    assert list(SESSION_FLAGS) == [f for f in SessionSettings.model_fields if f in SESSION_FLAGS]
    for field, flag in SESSION_FLAGS.items():
        option = flag.option.__metadata__[0]
        assert option.default == FLAGS[f"session.{field}"], field
    offered = []

    @session_options("opt_level", "cpu_mem_arena")
    def command(model: str, session: SessionFlags = FROM_FLAGS, fmt: str = "text") -> None:
        offered.append(session.settings())

    assert list(inspect.signature(command).parameters) == ["model", "opt_level", "no_arena", "fmt"]
    command("m", opt_level="basic", no_arena=True, fmt="text")
    assert offered == [SessionSettings(opt_level="basic", cpu_mem_arena=False)]


def test_feed_flags_become_the_shared_settings_part(tmp_path):
    feeds = feed_settings(tmp_path, ["batch=1,7"], ["ids=0:100", "mask = 1"], 3)
    assert feeds == FeedSettings(
        inputs=tmp_path, dims={"batch": [1, 7]}, ranges={"ids": "0:100", "mask": "1"}, seed=3
    )
    assert feeds.value_ranges()["ids"].high == 100
    with pytest.raises(ConfigError, match="--range 'x' is not INPUT=LOW:HIGH"):
        feed_settings(None, None, ["x"], 0)
    with pytest.raises(ConfigError, match="--dim 'batch=0'"):
        feed_settings(None, ["batch=0"], None, 0)


def test_help_shows_the_option_groups(tmp_path):
    runner = CliRunner()
    text = runner.invoke(app, ["compare", "--help"], env={"COLUMNS": "200"}).stdout
    panels = [line.split("─")[1].strip() for line in text.splitlines() if line.startswith("╭─")]
    assert panels == ["Arguments", "Options", "Input feeds", "Tolerances", "Session", "Output"]
    session = text[text.index("╭─ Session") : text.index("╭─ Output")]
    assert all(flag in session for flag in ("--providers", "--opt-level", "--session-config"))
    assert "--format" in text[text.index("╭─ Output") :]


def test_a_bad_session_flag_exits_2_on_every_command_that_has_it(tmp_path):
    model = save(mlp(), tmp_path / "mlp.onnx")
    runner = CliRunner()
    for command in ("compare", "placement", "verify", "profile", "bench"):
        result = runner.invoke(app, [command, str(model), "--opt-level", "turbo", "-f", "json"])
        assert result.exit_code == 2, (command, result.output)
        assert "--opt-level 'turbo'" in json.loads(result.stdout)["message"]


def test_session_flags_are_refused_before_the_command_s_other_flags(tmp_path):
    # bench builds its session first, as every command always has: a bad --batch waits
    model = save(mlp(), tmp_path / "mlp.onnx")
    args = ["bench", str(model), "--batch", "x", "--provider-option", "bad", "-f", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--provider-option 'bad'" in json.loads(result.stdout)["message"]


RENDERERS = [
    "_inspection_render.py",
    "check/_render.py",
    "compare/_render.py",
    "compat/render.py",
    "contract/_render.py",
    "doctor/_render.py",
    "perf/_render.py",
    "placement/_render.py",
    "quantize/_render.py",
]


@pytest.mark.parametrize("path", RENDERERS)
def test_renderers_neither_print_nor_know_the_cli(path):
    tree = ast.parse((SRC / path).read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.startswith(("typer", "onnxgate.cli"))}
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert "print" not in calls


def test_a_renderer_returns_what_the_command_prints(tmp_path):
    from onnxgate._inspection_render import render_text
    from onnxgate.inspection import inspect_model

    model = save(mlp(), tmp_path / "mlp.onnx")
    lines = render_text(inspect_model(model))
    printed = CliRunner().invoke(app, ["inspect", str(model)]).stdout
    assert len(lines) >= 5 and "15 parameters" in printed
    assert str(lines[0]) == str(model) and str(model) in printed.splitlines()[0]


def test_a_command_run_in_process_leaves_the_logging_of_the_process_as_it_found_it(
    tmp_path, capsys
):
    import logging

    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    model = save(mlp(), tmp_path / "m.onnx")
    result = CliRunner().invoke(app, ["-vv", "check", str(model), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "DEBUG onnxgate" in result.stderr  # logged while it ran, on the stderr it was given
    assert (root.level, root.handlers) == before  # no handler on its closed stderr, no -vv
    # a record logged later (another test, another command) once met the closed stream:
    # "--- Logging error --- ValueError: I/O operation on closed file", in the next CliRunner's
    # output, where a test read JSON
    logging.getLogger("onnxgate").warning("logged after the command ended")
    assert "Logging error" not in capsys.readouterr().err
    again = CliRunner().invoke(app, ["check", str(model), "--format", "json"])
    assert json.loads(again.stdout)["passed"] is True and "DEBUG" not in again.stderr


def test_flags_are_recorded_where_they_are_declared():
    import typer.main

    from onnxgate.cli import app
    from onnxgate.cli._flags import FLAGS, OFF_FLAGS, cli_words, flag_for

    declared: set[str] = set()

    def walk(command) -> None:
        for param in command.params:
            declared.update(param.opts, param.secondary_opts)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    # every recorded flag is one a command declares, and the table is whole at import
    assert set(FLAGS.values()) | set(OFF_FLAGS.values()) <= declared
    assert flag_for("steps.bench.session.threads") == "--threads"
    assert flag_for("feeds.dims") == "--dim" and flag_for("time_budget") == "--budget"
    assert cli_words("bench", False) == "--no-bench"
    assert cli_words("per_channel", False) == "--per-tensor"
    assert cli_words("write", False) == "--no-write"


def test_one_field_has_one_flag():
    from onnxgate.cli._flags import flag_option

    flag_option("feeds.seed", "--seed", help="again, the same flag: fine")
    with pytest.raises(ValueError, match="feeds.seed is set by --seed and by --other"):
        flag_option("feeds.seed", "--other")
