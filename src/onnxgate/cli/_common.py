"""What every command shares: output formats, error reporting, progress, logging."""

from __future__ import annotations

import functools
import json
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from onnxgate.errors import ExitCode, GateError

P = ParamSpec("P")
R = TypeVar("R")

INTERNAL_ERROR = int(ExitCode.INTERNAL)
"""Exit code of a bug in onnxgate itself (an exception that is not a GateError)."""

INTERRUPTED = 130
"""Exit code after Ctrl-C, as shells report a SIGINT, so CI never reads it as a failed check."""

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


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
    """Print one JSON document on stdout."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def configure_logging(verbose: int) -> None:
    """INFO with -v, DEBUG with -vv; warnings otherwise. Logs go to stderr."""
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True
    )


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn GateErrors into a message and their exit code; never a traceback for a user error.

    The wrapped command must take a ``fmt`` keyword argument (its ``--format``).
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        fmt = str(kwargs.get("fmt", "text"))
        try:
            return func(*args, **kwargs)
        except GateError as error:
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


def finish(passed: bool) -> None:
    """Exit 0 when passed, 1 when the check or gate failed."""
    raise typer.Exit(int(ExitCode.PASSED if passed else ExitCode.FAILED))
