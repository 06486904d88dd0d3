"""What every command shares: output formats, error reporting, progress, logging, and ``run``."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from onnxgate._fs import exhaustion_as_error
from onnxgate._pathtext import shown
from onnxgate._rich import Scrub
from onnxgate._words import speaking
from onnxgate.cli._flags import cli_offers, cli_words, translated
from onnxgate.data import Synthesized, listen_synthetic
from onnxgate.errors import ConfigError, ExitCode, GateError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rich.console import RenderableType

P = ParamSpec("P")
R = TypeVar("R")

INTERNAL_ERROR = int(ExitCode.INTERNAL)
"""Exit code of a bug in onnxgate itself (an exception that is not a GateError)."""

INTERRUPTED = 130
"""Exit code after Ctrl-C, as shells report a SIGINT, so CI never reads it as a failed check."""

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)
for _console in (out, err):  # text from models never reaches the terminal as control codes
    _console.push_render_hook(Scrub())


_started: list[float] = []
"""When the running command's process started (``mark_started``): empty in-process."""


def process_started(now: Callable[[], float] = time.monotonic) -> float:
    """A reading of ``now`` (a monotonic clock) when this process started.

    Linux says when (``/proc/self/stat``, in clock ticks since boot, against the boot-time
    clock); elsewhere, now.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime; the fields here start at field 3
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, IndexError, ValueError):
        return now()
    return now() - max(age, 0.0)


def mark_started() -> None:
    """Remember when this command's process started (``main``, before a supervised fork)."""
    _started[:] = [process_started()]


def command_started() -> float | None:
    """A ``time.monotonic`` reading of the command's start, for a budget counting its start-up.

    None when the CLI runs in-process (called as a library, as tests do).
    """
    return _started[0] if _started else None


class Format(StrEnum):
    """Output formats every command offers."""

    text = "text"
    json = "json"


class CheckFormat(StrEnum):
    """Output formats of ``check``: also GitHub annotations and SARIF."""

    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


FORMAT_HELP = "Output format; json prints one JSON document on stdout."


def emit_json(document: Any) -> None:
    r"""Print one JSON document on stdout.

    File names that are not UTF-8 reach strings as lone surrogates, which strict JSON parsers
    refuse; they are written as ``shown`` gives them (``out\xff.onnx``).
    """
    sys.stdout.write(json.dumps(_representable(document), indent=2, default=str) + "\n")
    sys.stdout.flush()


class QuietPipe:
    """A standard stream whose reader may leave early, as ``onnxgate ... | head -3`` does.

    Python ignores SIGPIPE, so once the reader has closed the pipe every write fails with EPIPE
    (BrokenPipeError): rich then exits 1, ``print`` raises, and whatever is still buffered fails
    again at interpreter shutdown ("Exception ignored ... BrokenPipeError"). A closed stdout is
    not a failed check: on the first EPIPE the stream's file descriptor is pointed at
    ``os.devnull`` (Python's own advice, in the signal module's note on SIGPIPE) and the command
    goes on to its own exit code, saying nothing. Everything else is the wrapped stream's.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for text in lines:
            self.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
        with contextlib.suppress(OSError):  # what the pipe refused is dropped into devnull
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def quiet_closed_pipes() -> None:
    """Make stdout and stderr ``QuietPipe``s (``main`` does, before the command forks)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, QuietPipe):
            setattr(sys, name, QuietPipe(stream))


def _representable(value: Any) -> Any:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {_representable(k): _representable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_representable(v) for v in value]
    return value


QUIET_LIBRARIES = {
    "TQDM_DISABLE": "1",  # the progress bars of onnxruntime.quantization's calibration, optimum
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
"""Environment that keeps libraries' own progress bars and advice off stderr without -v."""


class StderrHandler(logging.StreamHandler):
    """Writes each record to ``sys.stderr`` as it is when the record is emitted.

    A handler that kept the stream it was given would outlive it: a command run in-process
    (typer's ``CliRunner``, a test) has ``sys.stderr`` swapped for a buffer that is closed when it
    returns, and every record logged later in the process would then fail on the closed file.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # no stream of its own: ``stream`` is looked up

    @property
    def stream(self) -> Any:
        """The standard error of the moment."""
        return sys.stderr


def configure_logging(verbose: int) -> Callable[[], None]:
    """INFO with -v, DEBUG with -vv; warnings otherwise. Logs go to stderr.

    Libraries' Python warnings (NumPy's overflow, torch's deprecations) become log records of
    ``py.warnings``, shown from -v on; their progress bars stay off unless -v (or the variables in
    ``QUIET_LIBRARIES``, set by the caller, say otherwise). onnxgate's own warnings are logged and
    printed as before.

    Returns:
        What undoes it (the command line calls it when its command ends): the handlers it added
        are removed and the levels it set restored, so that a command run in-process leaves the
        logging of the process as it found it.
    """
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger()
    warned = logging.getLogger("py.warnings")
    before = (root.level, warned.level)
    for handler in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(handler)  # configured again (serve): one handler, the new level
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    warned.setLevel(logging.WARNING if verbose > 0 else logging.ERROR)
    if verbose <= 0:
        for name, value in QUIET_LIBRARIES.items():
            os.environ.setdefault(name, value)

    def undo() -> None:
        for added in [h for h in root.handlers if isinstance(h, StderrHandler)]:
            root.removeHandler(added)
        root.setLevel(before[0])
        warned.setLevel(before[1])
        logging.captureWarnings(False)

    return undo


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn GateErrors into a message and their exit code; never a traceback for a user error.

    The wrapped command must take a ``fmt`` keyword argument (its ``--format``); an ``as_json``
    one (a ``--json`` shorthand) makes errors JSON too.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        fmt = "json" if kwargs.get("as_json") else str(kwargs.get("fmt", "text"))
        heard: list[Synthesized] = []
        try:
            with (
                speaking(cli_words, cli_offers),
                listen_synthetic(functools.partial(_say_synthetic, heard, fmt)),
                exhaustion_as_error(),  # a full disk anywhere is the user's to fix, not a bug
            ):
                return func(*args, **kwargs)
        except GateError as error:
            if heard and Synthesized.may_explain(error):
                # a run on made-up inputs failed: say which, and how to give ones that fit
                with speaking(cli_words, cli_offers):
                    error.hint = " ".join(filter(None, (heard[-1].hint(), error.hint)))
            if isinstance(error, ConfigError):
                error = translated(error)
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                # -vv: the chain of exceptions behind the message (a library's own failure)
                log.debug(
                    "what raised it:\n%s", "".join(traceback.format_exception(error)).rstrip()
                )
            if fmt == "json":
                emit_json(error.to_dict())
            else:
                err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True)
                if error.hint:
                    err.print(f"[dim]hint:[/] {escape(error.hint)}", markup=True)
            raise typer.Exit(int(error.exit_code)) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(INTERRUPTED) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:  # a bug: say so plainly, keep the traceback for -v
            logging.getLogger("onnxgate").debug("internal error", exc_info=True)
            if fmt == "json":
                emit_json(
                    {
                        "error": "internal",
                        "message": f"{type(error).__name__}: {error}",
                        "exit_code": INTERNAL_ERROR,
                    }
                )
            else:
                err.print(
                    f"[bold red]internal error:[/] {escape(f'{type(error).__name__}: {error}')}"
                )
                err.print(
                    "This is a bug in onnxgate; run again with -vv for the traceback and report it."
                )
                if logging.getLogger().level <= logging.DEBUG:
                    err.print(traceback.format_exc(), markup=False)
            raise typer.Exit(INTERNAL_ERROR) from None

    return wrapper


def _say_synthetic(heard: list[Synthesized], fmt: str, feeds: Synthesized) -> None:
    """Note on stderr, once per shape, what a command is fed when it was given no data."""
    if any(h.shapes == feeds.shapes for h in heard):
        return
    heard.append(feeds)
    if fmt == "text":
        err.print(f"[dim]feeds:[/] {escape(feeds.notice())}", markup=True)
        if feeds.fits is False:
            err.print(
                f"[yellow]warning:[/] shape inference rejects these sizes: {escape(feeds.problem)}",
                markup=True,
            )
    else:
        log.info("synthetic feeds: %s", feeds.shapes)


@contextmanager
def progress_line(enabled: bool) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr for slow steps (only on a terminal and in text mode)."""
    if not enabled or not err.is_terminal:
        yield lambda message: logging.getLogger("onnxgate").info("%s", message)
        return
    with err.status("working") as status:
        yield lambda message: status.update(f"{message} ...")


@contextmanager
def progress_bar(enabled: bool, *, bar: bool = True) -> Iterator[Callable[..., None]]:
    """A line on stderr for measurements: ``update(message, fraction=None)``.

    It redraws only when told (no refresh thread, unlike ``progress_line``'s spinner), so it takes
    no CPU from what is being timed. ``bar=False`` shows the message alone, for work whose length
    is unknown. Off a terminal or in JSON mode, messages go to the log at INFO.
    """
    if not enabled or not err.is_terminal:
        yield lambda message, fraction=None: logging.getLogger("onnxgate").info("%s", message)
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    columns = [BarColumn(bar_width=30), TaskProgressColumn()] if bar else []
    with Progress(
        *columns,
        TextColumn("{task.description}"),
        console=err,
        auto_refresh=False,
        transient=True,
    ) as display:
        task = display.add_task("starting", total=1.0)

        def update(message: str, fraction: float | None = None) -> None:
            display.update(task, description=escape(message), completed=fraction)
            display.refresh()

        yield update


def finish(passed: bool, *, failed: ExitCode = ExitCode.FAILED) -> None:
    """Exit 0 when passed, ``failed`` (1: the check or gate failed) otherwise."""
    raise typer.Exit(int(ExitCode.PASSED if passed else failed))


def show(renderables: Iterable[RenderableType]) -> None:
    """Print what a text renderer returned on stdout, each item on lines of its own."""
    for renderable in renderables:
        out.print(renderable)


Display = Literal["line", "bar", "steps", "none"]
"""How ``run`` shows progress on stderr: a spinner, a bar, messages alone, or nothing."""


def _display(kind: Display, enabled: bool) -> AbstractContextManager[Callable[..., None]]:
    if kind == "bar":
        return progress_bar(enabled)
    if kind == "steps":
        return progress_bar(enabled, bar=False)
    return progress_line(enabled and kind == "line")


def _passed(report: Any) -> bool:
    return bool(report.passed)


def _document(report: Any) -> Any:
    return report.model_dump(mode="json")


def run(
    fmt: str,
    call: Callable[[Callable[..., None]], R],
    render: Callable[[R], Iterable[RenderableType]],
    *,
    progress: Display = "line",
    passed: Callable[[R], bool] | None = _passed,
    failed: ExitCode | Callable[[R], ExitCode] = ExitCode.FAILED,
    document: Callable[[R], Any] = _document,
    formats: Mapping[str, Callable[[R], None]] | None = None,
) -> R:
    """Run one command: progress on stderr, the library call, the result on stdout, the exit.

    Progress is shown in text mode only: in the other formats stdout holds the document alone
    and stderr stays quiet. GateErrors raised by ``call`` pass through to ``handles_errors``.

    Args:
        fmt: The ``--format`` value: ``json`` prints ``document(result)``, a key of ``formats``
            calls that writer, anything else prints what ``render`` returns.
        call: The library call; it receives the progress callback (``message`` for
            ``"line"``, ``message, fraction=None`` for ``"bar"`` and ``"steps"``).
        render: The result's text renderer (it returns renderables and prints nothing).
        progress: The display on stderr while ``call`` runs.
        passed: Whether the result passed; it exits 0 if so and ``failed`` if not. None: no
            verdict, ``run`` returns the result and the command exits 0 when it ends.
        failed: The exit code of a result that did not pass, or a function of the result that
            gives it (the gate's 1 or 3).
        document: The JSON document of the result (its ``model_dump``).
        formats: Writers of further formats (``check``'s sarif and github), by ``--format``.
    """
    fmt = str(fmt)  # a StrEnum's value
    with _display(progress, fmt == "text") as update:
        result = call(update)
    if fmt == "json":
        emit_json(document(result))
    elif formats and fmt in formats:
        formats[fmt](result)
    else:
        show(render(result))
    if passed is not None:
        finish(passed(result), failed=failed(result) if callable(failed) else failed)
    return result
