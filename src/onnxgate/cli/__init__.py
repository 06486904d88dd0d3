"""The ``onnxgate`` command line: thin commands over the library."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperOption

from onnxgate import __version__
from onnxgate.cli import _help
from onnxgate.cli._common import configure_logging, mark_started, quiet_closed_pipes
from onnxgate.cli._flags import declare_flags
from onnxgate.cli._supervise import run as run_supervised
from onnxgate.cli._supervise import supervised
from onnxgate.cli.bench_cmd import bench_command
from onnxgate.cli.check_cmd import check_command
from onnxgate.cli.compare_cmd import compare_command
from onnxgate.cli.contract_cmd import contract_app, verify_command
from onnxgate.cli.deploy_cmd import deploy_app
from onnxgate.cli.doctor_cmd import doctor_command
from onnxgate.cli.export_cmd import export_app
from onnxgate.cli.gate_cmd import gate_app
from onnxgate.cli.inspect_cmd import inspect_command
from onnxgate.cli.placement_cmd import placement_command
from onnxgate.cli.profile_cmd import profile_command
from onnxgate.cli.quantize_cmd import quantize_command
from onnxgate.cli.registry_cmd import registry_app
from onnxgate.cli.runtimes_cmd import runtimes_command
from onnxgate.cli.serve_cmd import HELP as SERVE_HELP
from onnxgate.cli.serve_cmd import serve_command
from onnxgate.cli.tune_cmd import tune_command

app = typer.Typer(
    name="onnxgate",
    help=(
        "Take models through ONNX into production on ONNX Runtime, and prove on the way that they "
        "load, agree and run fast where they are deployed.\n\n"
        "Exit codes: 0 passed · 1 a check or gate failed · 2 usage or input error (including a "
        "malformed or unsafe model) · 3 environment problem (missing extra, provider or runtime) "
        "· 4 internal error (a bug in onnxgate)."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"onnxgate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    verbose: Annotated[
        int,
        typer.Option("--verbose", "-v", count=True, help="More logging on stderr (-vv for debug)."),
    ] = 0,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # undone when the command ends: a command run in-process (CliRunner) leaves no handler
    ctx.call_on_close(configure_logging(verbose))


app.command("inspect")(inspect_command)
app.command("check")(check_command)
app.command("compare")(compare_command)
app.command("placement")(placement_command)
app.command("verify")(verify_command)
app.command("bench")(bench_command)
app.command("quantize")(quantize_command)
app.command("tune")(tune_command)
app.command("profile")(profile_command)
app.add_typer(contract_app, name="contract")
app.add_typer(export_app, name="export")
app.add_typer(gate_app, name="gate")
app.add_typer(registry_app, name="registry")
app.add_typer(deploy_app, name="deploy")
app.command("serve", help=SERVE_HELP)(serve_command)
app.command("runtimes")(runtimes_command)
app.command("doctor")(doctor_command)
declare_flags(app)  # FLAGS: the config field each flag sets, recorded where it is declared


VERBOSITY = re.compile(r"-v+|--verbose")


def hoist_verbosity(args: list[str]) -> list[str]:
    """``-v``/``-vv``/``--verbose`` given after the subcommand, moved before it.

    The flag belongs to the root command, and messages say "run with -vv" whatever the command,
    so ``onnxgate compare m.onnx -vv`` means what ``onnxgate -vv compare m.onnx`` does. Nothing
    after ``--`` is touched.
    """
    end = args.index("--") if "--" in args else len(args)
    moved = [a for a in args[:end] if VERBOSITY.fullmatch(a)]
    rest = [a for a in args[:end] if not VERBOSITY.fullmatch(a)]
    return [*moved, *rest, *args[end:]]


def _no_type_for_flags() -> None:
    """Help shows ``--write/--no-write`` and ``-v`` without a ``<bool>``/``<int>`` type column.

    typer 0.29's rich help prints the Python type of every option, flags and counters included,
    which reads as if they took a value.
    """
    original = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return original(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_type_for_flags()
_help.install()


def main() -> None:
    """Entry point of the ``onnxgate`` script: each command runs in a supervised child process.

    If onnx's or ONNX Runtime's native code aborts on a model, the parent still answers (exit 2
    naming the step, see ``cli/_supervise.py``).
    """
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints, escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    quiet_closed_pipes()  # `onnxgate ... | head` ends with the command's own exit code
    mark_started()  # a time budget (tune's) counts from here, the interpreter's start-up too
    args = hoist_verbosity(sys.argv[1:])
    if supervised(args):
        run_supervised(lambda: app(args=args), args)
    app(args=args)
