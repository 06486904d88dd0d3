"""Running each command in a child process, so that native code that aborts cannot take the answer.

onnx and ONNX Runtime are C++, and on some malformed models they abort or crash rather than raise
(see ``onnxgate._native``). In a single process that is the end: no message, no JSON document,
exit code 134 or 139, which CI reads as neither a verdict nor onnxgate's bug. So ``main`` forks:
the child runs the command exactly as before, and the parent only waits. If the child exits, the
parent exits with its code. If it dies by a fatal signal (SIGABRT, SIGSEGV, SIGBUS, SIGFPE,
SIGILL), the parent reports it: exit 2 naming the native step and file the child was in, or exit
4 when it died outside every such step (onnxgate cannot blame the model then). Any other signal
(SIGTERM, SIGKILL) ends the parent the same way, so shells and CI see what they would have seen.

Why a fork and not a subprocess: the child starts with everything already imported, so a
command costs no second interpreter start. The fork happens in ``main`` before any command runs:
nothing has started a thread but OpenBLAS's pool, which NumPy's import starts and which re-forms
itself after a fork. ``--help`` and ``--version`` run without it; ``ONNXGATE_SUPERVISE=0`` runs
every command in one process (for a debugger), as does a platform without ``fork``.

Signals: Ctrl-C from the terminal reaches the child directly (the two share the terminal's
process group), so the parent passes on only what was sent to it alone: ``kill PID`` and
``docker stop`` signal the process they started, which is the parent. On Linux it tells the two
apart by the sender (``sigwaitinfo``'s ``si_code``); elsewhere it forwards SIGTERM and SIGHUP and
leaves SIGINT to the terminal. A process that signals the whole group (``kill -TERM -PGID``,
systemd's default stop) reaches the child twice, once through the parent; that is why ``serve``,
which process managers stop that way, runs unforked (``DAEMONS``).
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import NoReturn

from onnxgate import _native
from onnxgate.errors import GateError, InternalError, NativeCrash

FATAL = frozenset({signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL})
"""Signals by which native code dies: the parent reports them instead of dying by them."""

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals the parent passes on to the child when they were sent to the parent alone."""

PR_SET_PDEATHSIG = 1
"""Linux's prctl option: a signal the child gets when its parent dies."""

SI_KERNEL = 0x80
"""Linux's ``si_code`` of a signal the kernel sent itself, such as the terminal's Ctrl-C to its
foreground process group (which the child is in too)."""

UNSUPERVISED = frozenset({"-h", "--help", "--version"})
"""Arguments that print and exit without reading a model: no child for them."""

DAEMONS = frozenset({"serve"})
"""Commands that run as a long-lived server: not forked. A process manager (systemd, Kubernetes,
Docker) supervises them already, signals their whole process group, and restarts them when they
die; a second process would only receive each of its stop signals twice."""

SWITCH = "ONNXGATE_SUPERVISE"
"""``0`` runs commands in one process, without the supervising parent."""


def supervised(args: list[str]) -> bool:
    """Whether a command with these arguments runs in a supervised child process."""
    if not hasattr(os, "fork") or os.environ.get(SWITCH, "1") == "0":
        return False
    head = args[: args.index("--")] if "--" in args else args
    command = next((arg for arg in head if not arg.startswith("-")), None)
    return bool(head) and not UNSUPERVISED.intersection(head) and command not in DAEMONS


def run(command: Callable[[], object], args: list[str]) -> NoReturn:
    """Run ``command`` (the CLI app on ``args``) in a child process and exit as it did.

    Only the child returns from a fork; it never comes back here. The parent exits with the
    child's code, reports a native crash (exit 2 or 4), or dies by the child's signal.
    """
    page = _native.open_page()
    sys.stdout.flush()
    sys.stderr.flush()
    waited = (*FORWARDED, signal.SIGCHLD)
    precise = sys.platform.startswith("linux")
    if precise:  # blocked before the fork, so none is lost before the parent waits for it
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    with warnings.catch_warnings():
        # Python 3.12+ warns of any thread at fork; the only one is OpenBLAS's pool (see above)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        if precise:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _die_with_parent(os.getppid())
        _child(command, page, args)
    status = _wait_linux(pid) if precise else _wait_portable(pid)
    _conclude(status, _native.read(page), args)


def _die_with_parent(parent: int) -> None:
    """Linux: be killed when the parent dies (``kill -9`` by a CI timeout), never run orphaned."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the child may outlive a killed parent
        return
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(128 + signal.SIGKILL)


def _child(command: Callable[[], object], page: mmap.mmap, args: list[str]) -> NoReturn:
    _native.attach(page)
    if _verbosity(args) >= 2:
        import faulthandler

        faulthandler.enable()  # -vv: the Python stack of a native crash, on stderr
    try:
        command()
    except SystemExit as done:
        _native.finished(done.code)
        raise
    _native.finished(0)
    raise SystemExit(0)


def _wait_linux(pid: int) -> int:
    waited = {*FORWARDED, signal.SIGCHLD}
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo == signal.SIGCHLD:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
        elif info.si_code != SI_KERNEL:  # sent by a process, maybe to this one alone: pass it on
            _forward(pid, info.si_signo)


def _wait_portable(pid: int) -> int:
    signal.signal(signal.SIGINT, lambda *_: None)  # the terminal sent it to the child as well
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda signum, _: _forward(pid, signum))
    return os.waitpid(pid, 0)[1]


def _forward(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # it has just exited; SIGCHLD is on its way
        pass


def _conclude(status: int, record: _native.Record, args: list[str]) -> NoReturn:
    if os.WIFEXITED(status):
        _exit(os.WEXITSTATUS(status))
    number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    if record.exit_code is not None:
        # the result was printed and the command had ended: a library crashed while exiting
        _text(
            f"warning: onnxgate's process was killed by {_signal(number)} while exiting, after "
            "the command had finished; its result and exit code stand."
        )
        _exit(record.exit_code)
    if number in FATAL:
        error = crash_error(number, record, args)
        _report(error, args)
        _exit(int(error.exit_code))
    if number == signal.SIGKILL:  # nobody can catch it: most often the kernel's OOM killer
        _text(
            "error: onnxgate's process was killed (SIGKILL) before it could answer; if nobody "
            "killed it, the machine ran out of memory (dmesg says: Out of memory: Killed process)."
        )
    _die_by(number)


def crash_error(number: int, record: _native.Record, args: list[str]) -> GateError:
    """The error a child's death by fatal signal ``number`` is reported as."""
    if record.steps:
        step, file = record.steps[-1]
        where = f"{file}: " if file else ""
        library = "ONNX Runtime" if step.startswith(("ORT", "ONNX Runtime")) else "onnx"
        return NativeCrash(
            f"{where}the model makes onnx/ONNX Runtime abort in {step} ({_signal(number)}).",
            hint=(
                f"{library}'s native code has no check for what is malformed in this model and "
                "stopped the process instead of raising an error. Re-export the model with a "
                f"current exporter; if it loads elsewhere, report it to {library} with the model."
            ),
        )
    return InternalError(
        f"`onnxgate {' '.join(args)}` was killed by {_signal(number)} outside the steps known "
        "to hand a model to native code.",
        hint="This is a bug in onnxgate or a library it uses, not a verdict on the model; "
        "run again with -vv for the Python stack and report it with the command and the model.",
    )


def _signal(number: int) -> str:
    name = signal.Signals(number).name
    description = signal.strsignal(number)
    return f"{name}, {description.lower()}" if description else name


def _report(error: GateError, args: list[str]) -> None:
    """The error as ``handles_errors`` prints a GateError: one JSON document, or lines on stderr."""
    from rich.markup import escape

    from onnxgate.cli._common import emit_json, err

    if output_format(args) == "json":
        emit_json(error.to_dict())
        return
    err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True)
    if error.hint:
        err.print(f"[dim]hint:[/] {escape(error.hint)}", markup=True)


def _text(line: str) -> None:
    from onnxgate.cli._common import err

    err.print(line, markup=False)


def output_format(args: list[str]) -> str:
    """The value of ``--format``/``-f`` in the arguments (the last one given), else ``text``."""
    found = "text"
    head = args[: args.index("--")] if "--" in args else args
    for index, arg in enumerate(head):
        if arg in ("--format", "-f") and index + 1 < len(head):
            found = head[index + 1]
        elif arg.startswith("--format="):
            found = arg.partition("=")[2]
        elif arg.startswith("-f") and not arg.startswith("--") and len(arg) > 2:
            found = arg[2:]
    return found


def _verbosity(args: list[str]) -> int:
    count = 0
    for arg in args:
        if arg == "--verbose":
            count += 1
        elif arg.startswith("-v") and set(arg[1:]) == {"v"}:
            count += len(arg) - 1
    return count


def _exit(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the parent ran nothing: no interpreter shutdown to do twice


def _die_by(number: int) -> NoReturn:
    """End this process by the signal that ended the child, as a shell or CI would have seen it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if number not in (signal.SIGKILL, signal.SIGSTOP):  # their action cannot be set
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    os.kill(os.getpid(), number)
    os._exit(128 + number)  # a signal whose default is to be ignored
