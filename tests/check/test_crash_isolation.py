"""Hostile models: check's own crashes on mutated models, and native aborts the CLI outlives.

The first tests are regressions of crashes an adversarial probe found in ``check`` (exit 4 on
mutated models): a KeyError from a dict keyed by protobuf wrappers' ``id()`` when a model has
several local functions, and pybind's TypeError from ``get_schema`` when an opset version does
not fit a C++ int. The others run the real ``onnxgate`` script in a subprocess (CliRunner would
not go through ``main``, where the supervising parent forks), make a native step die by a signal,
and check that the parent answers: exit 2, a message naming the step and the file, one JSON
document with ``--format json``, and signals passed on to the child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from onnx import FunctionProto, ModelProto, NodeProto, TensorProto, helper

from models import model, relu, save, value
from onnxgate import _native
from onnxgate.check import check_model
from onnxgate.cli._supervise import crash_error, output_format, supervised
from onnxgate.compat.kernels import lookup_version, onnx_schema
from onnxgate.errors import ExitCode, InternalError, NativeCrash
from onnxgate.runners._reference_fixes import schema_version

ONNXGATE = Path(sys.executable).parent / "onnxgate"
CRASH = _native.TEST_CRASH


def onnxgate(*args: str, crash: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """The installed script, as a user runs it (``crash``: the test hook's ``STEP[:SIGNAL]``)."""
    environ = {k: v for k, v in os.environ.items() if k not in (CRASH, "ONNXGATE_SUPERVISE")}
    environ.update(env, **({CRASH: crash} if crash else {}))
    return subprocess.run(
        [str(ONNXGATE), *args], capture_output=True, text=True, env=environ, timeout=300
    )


def _call(name: str) -> NodeProto:
    return helper.make_node(name, ["x"], ["x_" + name], domain="local", name="call_" + name)


def _gelu_in(name: str, opset: int) -> FunctionProto:
    """A local function computing Gelu under its own ai.onnx import (Gelu exists from 20)."""
    node = helper.make_node("Gelu", ["a"], ["b"], name=f"gelu_in_{name}")
    return helper.make_function(
        "local", name, ["a"], ["b"], [node], [helper.make_opsetid("", opset)]
    )


def several_functions() -> ModelProto:
    """Three local functions, two called; each judged under its own opset imports."""
    add = helper.make_node("Add", ["x_new", "x_old"], ["y"], name="sum")
    proto = model(
        [_call("new"), _call("old"), add],
        [value("x")],
        [value("y")],
        opsets={"": 20, "local": 1},
    )
    proto.functions.extend([_gelu_in("new", 20), _gelu_in("old", 9), _gelu_in("unused", 20)])
    return proto


def test_several_local_functions_are_each_judged_in_their_own_scope(tmp_path, installed_profile):
    """Was a KeyError (exit 4): scopes were keyed by id() of wrappers protobuf had freed."""
    report = check_model(save(several_functions(), tmp_path / "f.onnx"), profile=installed_profile)
    missing = [f for f in report.findings if f.code == "OP004"]
    # Gelu has no schema at opset 9 (function 'old') and one at 20 ('new', 'unused')
    assert [(f.node, "opset 9" in f.message) for f in missing] == [("gelu_in_old", True)]


@pytest.mark.parametrize("version", [2**31, 2**40, 2**63 - 1])
def test_an_opset_beyond_a_c_int_is_judged_not_crashed(tmp_path, installed_profile, version):
    """Was pybind's TypeError from get_schema (exit 4); now the versions' own findings."""
    path = save(relu(opsets={"": version}), tmp_path / "m.onnx")
    codes = {f.code for f in check_model(path, profile=installed_profile).findings}
    assert {"VER003", "VER007"} <= codes


@pytest.mark.parametrize("version", [-(2**31) - 1, -(2**63)])
def test_a_negative_opset_is_judged_not_crashed(tmp_path, installed_profile, version):
    path = save(relu(opsets={"": version}), tmp_path / "m.onnx")
    codes = {f.code for f in check_model(path, profile=installed_profile).findings}
    assert "VER004" in codes


def test_a_local_function_importing_a_huge_opset_is_judged(tmp_path, installed_profile):
    proto = several_functions()
    proto.functions[1].opset_import[0].version = 2**62
    report = check_model(save(proto, tmp_path / "f.onnx"), profile=installed_profile)
    assert not [f for f in report.findings if f.code == "OP004"]  # 2**62 finds the newest Gelu


def test_schema_lookups_take_any_int64_version():
    assert lookup_version(2**63 - 1) == 2**31 - 1
    assert lookup_version(0) is None and lookup_version(-(2**40)) is None
    assert lookup_version(17) == 17
    assert schema_version("Relu", "", 2**40) == 14
    assert schema_version("Relu", "ai.onnx", -(2**40)) is None
    newest = onnx_schema("Relu", "ai.onnx", 2**63 - 1)
    assert newest is not None and newest.since_version == 14
    assert onnx_schema("Relu", "ai.onnx", -(2**63)) is None


@pytest.mark.parametrize("mutation", ["several functions", "huge opset"])
def test_check_answers_mutated_models_with_a_verdict(tmp_path, mutation):
    """The probe's reproductions, end to end: a verdict (exit 0 or 1), never exit 4."""
    proto = several_functions() if mutation == "several functions" else relu(opsets={"": 2**40})
    path = save(proto, tmp_path / "m.onnx")
    done = onnxgate("check", str(path), "--format", "json")
    document = json.loads(done.stdout)
    assert done.returncode == (0 if document["passed"] else 1), done.stderr
    assert document["model"] == str(path)


@pytest.mark.parametrize(
    ("command", "step", "signame"),
    [
        ("check", "onnx shape inference", "SIGABRT"),
        ("check", "onnx checker", "SIGSEGV"),
        ("compare", "ORT session creation", "SIGBUS"),
    ],
)
def test_a_native_abort_is_one_json_error_document_and_exit_2(tmp_path, command, step, signame):
    path = save(relu(), tmp_path / "m.onnx")
    done = onnxgate(command, str(path), "--format", "json", crash=f"{step}:{signame}")
    assert done.returncode == ExitCode.USAGE, done.stderr
    document = json.loads(done.stdout)  # exactly one document: json.loads refuses extra data
    assert document == {
        "error": "native-crash",
        "message": f"{path}: the model makes onnx/ONNX Runtime abort in {step} "
        f"({signame}, {signal.strsignal(signal.Signals[signame]).lower()}).",
        "hint": document["hint"],
        "exit_code": 2,
    }
    assert "Re-export the model" in document["hint"]


def test_a_native_abort_in_text_mode_says_so_on_stderr(tmp_path):
    path = save(relu(), tmp_path / "m.onnx")
    done = onnxgate("check", str(path), crash="onnx shape inference")
    assert done.returncode == ExitCode.USAGE
    said = " ".join(done.stderr.split())
    assert f"error: {path}: the model makes onnx/ONNX Runtime abort in onnx shape inference" in said
    assert "SIGABRT" in said and "hint:" in said and "Traceback" not in said
    assert done.stdout == ""


def test_without_the_supervisor_the_same_abort_kills_the_process(tmp_path):
    """The hook's abort is real: one process dies by it, with no answer at all."""
    path = save(relu(), tmp_path / "m.onnx")
    done = onnxgate(
        "check", str(path), "-f", "json", crash="onnx shape inference", ONNXGATE_SUPERVISE="0"
    )
    assert done.returncode == -signal.SIGABRT
    assert done.stdout == ""


def test_exit_codes_and_help_pass_through_the_supervisor(tmp_path):
    failing = save(relu(opsets={"": 2**40}), tmp_path / "m.onnx")
    assert onnxgate("check", str(failing)).returncode == ExitCode.FAILED
    missing = onnxgate("check", str(tmp_path / "absent.onnx"), "-f", "json")
    assert missing.returncode == ExitCode.USAGE
    assert json.loads(missing.stdout)["error"] == "model-load"
    helped = onnxgate("check", "--help")
    assert helped.returncode == 0 and "Usage: onnxgate check" in helped.stdout
    assert onnxgate("--version").stdout.startswith("onnxgate ")


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _until(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(
    ("number", "returncode"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)],
)
def test_a_signal_sent_to_the_cli_reaches_the_command(tmp_path, number, returncode):
    """``kill PID`` signals the parent; the child running the command must get it, once.

    The hook stops the child inside a native step, so the forwarded signal waits in its pending
    set, where it can be seen before the child is let go: no race with the command's end.
    """
    path = save(relu(), tmp_path / "m.onnx")
    environ = {**os.environ, CRASH: "onnx checker:SIGSTOP"}
    environ.pop("ONNXGATE_SUPERVISE", None)
    parent = subprocess.Popen(
        [str(ONNXGATE), "check", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        # a shell without job control starts background commands with SIGINT ignored (POSIX),
        # as `make test &` does; a user's `kill -INT` reaches a command that has it by default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        (child,) = _until(lambda: _children(parent.pid), "the command's process")
        _until(lambda: _status(child)["State"].startswith("T"), "the child to stop in its step")
        parent.send_signal(number)
        bit = 1 << (number - 1)
        _until(lambda: int(_status(child)["ShdPnd"], 16) & bit, "the forwarded signal")
        assert not int(_status(parent.pid)["ShdPnd"], 16) & bit  # the parent took it, not died
        os.kill(child, signal.SIGCONT)
        _, stderr = parent.communicate(timeout=120)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == returncode, stderr
    if number == signal.SIGINT:
        assert "interrupted" in stderr


SCRIPT = """
import atexit, os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # deliberate crashes leave no core files
from onnxgate.cli import _supervise
from onnxgate.cli._common import emit_json

def command():
    if sys.argv[1] == "outside a step":
        os.abort()
    emit_json({"passed": False})
    atexit.register(os.abort)  # a library's destructor that crashes while the process exits
    raise SystemExit(1)

_supervise.run(command, sys.argv[2:])
"""


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=120
    )


def test_a_crash_while_exiting_after_the_result_keeps_the_result():
    done = _script("while exiting", "check", "m.onnx", "-f", "json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"passed": False}  # still one document
    assert "while exiting" in done.stderr and "SIGABRT" in done.stderr


def test_a_crash_outside_every_native_step_is_an_internal_error():
    done = _script("outside a step", "check", "m.onnx", "--format=json")
    assert done.returncode == ExitCode.INTERNAL
    document = json.loads(done.stdout)
    assert document["error"] == "internal" and document["exit_code"] == 4
    assert "`onnxgate check m.onnx --format=json` was killed by SIGABRT" in document["message"]


def test_the_page_holds_the_running_steps_and_the_exit_code(monkeypatch):
    page = _native.open_page()
    assert _native.read(page) == _native.Record()
    monkeypatch.setattr(_native, "_active", [])
    monkeypatch.setattr(_native, "_exit_code", None)
    monkeypatch.setattr(_native, "_page", page)
    monkeypatch.setattr(_native, "_writer", os.getpid())
    with _native.native_step("onnx checker", Path("a.onnx")):
        with _native.native_step("ORT session creation"):
            inner = _native.read(page)
        outer = _native.read(page)
    assert inner.steps == (("onnx checker", "a.onnx"), ("ORT session creation", None))
    assert outer.steps == (("onnx checker", "a.onnx"),)
    assert _native.read(page) == _native.Record()
    _native.finished(None)
    assert _native.read(page).exit_code == 0
    _native.finished("a message")  # SystemExit("text") exits 1
    assert _native.read(page).exit_code == 1


def test_a_long_file_name_is_cut_to_fit_the_page(monkeypatch):
    page = _native.open_page()
    monkeypatch.setattr(_native, "_active", [])
    monkeypatch.setattr(_native, "_page", page)
    monkeypatch.setattr(_native, "_writer", os.getpid())
    with _native.native_step("onnx checker", "d/" * 20000 + "m.onnx"):
        ((_, file),) = _native.read(page).steps
    assert file is not None and file.endswith("/m.onnx") and len(file) <= 1000


def test_the_error_names_the_most_recent_step():
    record = _native.Record(steps=(("onnx checker", "a.onnx"), ("onnx shape inference", None)))
    error = crash_error(signal.SIGSEGV, record, ["check", "a.onnx"])
    assert isinstance(error, NativeCrash) and error.exit_code == ExitCode.USAGE
    assert error.message.startswith("the model makes onnx/ONNX Runtime abort in onnx shape")
    unlabelled = crash_error(signal.SIGSEGV, _native.Record(), ["check", "a.onnx"])
    assert isinstance(unlabelled, InternalError) and unlabelled.exit_code == ExitCode.INTERNAL


@pytest.mark.parametrize(
    ("args", "fmt"),
    [
        (["check", "m", "--format", "json"], "json"),
        (["check", "m", "-f", "json"], "json"),
        (["check", "m", "--format=json"], "json"),
        (["check", "m", "-fjson"], "json"),
        (["check", "m", "-f", "sarif"], "sarif"),
        (["check", "m"], "text"),
        (["check", "--", "-f", "json"], "text"),
    ],
)
def test_the_parent_reads_the_output_format_as_the_commands_do(args, fmt):
    assert output_format(args) == fmt


def test_shape_types_with_an_unknown_element_type_do_not_crash_body_descriptions():
    from onnxgate.check._functions import _describe

    assert _describe(helper.make_tensor_type_proto(99, [2])) == "unknown(99) of rank 1"
    assert _describe(helper.make_tensor_type_proto(TensorProto.BFLOAT16, None)) == (
        "bfloat16 of unknown rank"
    )


def test_nothing_that_starts_threads_is_imported_before_the_fork():
    """``main`` forks after importing the CLI: ONNX Runtime and torch must not be loaded by then.

    Their thread pools would not survive into the child (only OpenBLAS's re-forms after a fork).
    """
    probe = (
        "import sys, threading, onnxgate.cli\n"
        "print(threading.active_count(), sorted({'onnxruntime', 'torch'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split(maxsplit=1) == ["1", "[]\n"], done.stderr


def test_a_process_the_command_forks_does_not_write_the_page(monkeypatch):
    page = _native.open_page()
    monkeypatch.setattr(_native, "_active", [])
    monkeypatch.setattr(_native, "_page", page)
    monkeypatch.setattr(_native, "_writer", os.getpid() + 1)  # as seen from a forked worker
    with _native.native_step("onnx checker", "w.onnx"):
        assert _native.read(page) == _native.Record()


TERMINAL_SCRIPT = """
import signal, sys, time
from onnxgate.cli import _supervise

def command():
    seen = []
    signal.signal(signal.SIGINT, lambda *_: seen.append(1))
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(1.0)  # a copy passed on by the parent would arrive well within this
    raise SystemExit(10 + len(seen))

_supervise.run(command, ["serve"])
"""


def test_ctrl_c_at_a_terminal_reaches_the_command_once():
    """The terminal signals the whole foreground group: the parent must not pass on a copy.

    ``serve`` reads a second SIGINT as "stop at once", so a copy would turn every Ctrl-C into
    an abrupt stop. The command here counts the SIGINTs it gets and exits 10 + that count.
    """
    import pty
    import select

    pid, terminal = pty.fork()
    if pid == 0:  # the session leader of a new terminal, as a shell's foreground job is
        os.execv(sys.executable, [sys.executable, "-c", TERMINAL_SCRIPT])
    said = b""
    deadline = time.monotonic() + 120
    while b"ready" not in said and time.monotonic() < deadline:
        if select.select([terminal], [], [], 0.1)[0]:
            said += os.read(terminal, 4096)
    os.write(terminal, b"\x03")  # Ctrl-C, as typed
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 11, said


@pytest.mark.parametrize(
    ("args", "forked"),
    [
        (["check", "m.onnx"], True),
        (["-v", "compare", "m.onnx"], True),
        (["serve", "m.onnx"], False),  # a daemon: its process manager signals the whole group
        (["-vv", "serve", "m.onnx", "--http-port", "0"], False),
        (["quantize", "--help"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_which_commands_run_in_a_supervised_child(args, forked, monkeypatch):
    monkeypatch.delenv("ONNXGATE_SUPERVISE", raising=False)
    assert supervised(args) is forked


ORPHAN_SCRIPT = """
import os, time
from onnxgate.cli import _supervise

def command():
    print(os.getpid(), flush=True)
    time.sleep(60)

_supervise.run(command, ["inspect", "m.onnx"])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_command_dies_with_a_killed_parent_instead_of_running_orphaned():
    """Found in review: after ``kill -9`` of the parent (a CI timeout), a tune ran on, orphaned."""
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 10
    state = "R"
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("Z", "X", "gone"):
            break
        time.sleep(0.05)
    assert state in ("Z", "X", "gone"), (
        f"the command still runs (state {state}) after its parent died"
    )
