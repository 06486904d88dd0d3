"""``onnxgate check MODEL``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from onnxgate import __version__
from onnxgate.check import CheckConfig, CheckReport, Severity, check_model, render_text
from onnxgate.cli._common import CheckFormat, emit_json, handles_errors, out, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import OUTPUT, SESSION, build


def _annotations(report: CheckReport) -> None:
    text = report.to_github()
    if text:
        out.print(text, markup=False)


@handles_errors
def check_command(
    model: Annotated[Path, typer.Argument(help="The .onnx file to check.", show_default=False)],
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="Target runtime: 'installed', or a release such as onnxruntime==1.16.3, which is "
            "installed once into an isolated environment in the user cache and probed; later "
            "checks against it are instant and need no network.",
        ),
    ] = "installed",
    providers: Annotated[
        list[str] | None,
        flag_option(
            "providers",
            "--providers",
            "-p",
            help="Execution providers in preference order, comma-separated or repeated "
            "(CUDAExecutionProvider or just cuda). CPU is appended, as the runtime does.",
            rich_help_panel=SESSION,
        ),
    ] = None,
    ops_libraries: Annotated[
        list[str] | None,
        flag_option(
            "ops_libraries",
            "--ops-library",
            help="A custom operator library sessions register (PATH of a shared library, or "
            "onnxruntime-extensions), repeatable: the custom operators it provides are not "
            "reported as unknown (OP003). Found by loading them with the library registered.",
            metavar="PATH|onnxruntime-extensions",
            rich_help_panel=SESSION,
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        flag_option("ignore", "--ignore", help="Finding codes to leave out, e.g. SHP001,STR008."),
    ] = None,
    fail_on: Annotated[
        Severity,
        flag_option("fail_on", "--fail-on", help="Lowest severity that fails the check (exit 1)."),
    ] = Severity.ERROR,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Probe the target runtime again.")
    ] = False,
    fmt: Annotated[
        CheckFormat,
        typer.Option(
            "--format",
            "-f",
            help="text, json (one document), github (workflow annotations) or sarif.",
            rich_help_panel=OUTPUT,
        ),
    ] = CheckFormat.text,
) -> None:
    """Will this model load and run on the runtime and providers you deploy to?

    Static findings with stable codes (see docs/checks.md), each with a severity, the node or
    tensor concerned and a fix: structure (checker, shape inference, order, names), versions (IR
    and opsets against the target's measured limits), operators (a kernel for each node's schema
    version and input types on the requested providers), shapes (with the contract beside the
    model, outputs that produce another shape than declared), external data and size.

    Exit codes: 0 no finding at or above --fail-on; 1 some; 2 the model is malformed or unsafe, or
    an option is wrong; 3 the target runtime cannot be installed or probed, or cannot load a
    custom operator library.
    """
    from onnxgate.compat.runtime import runtime_profile
    from onnxgate.contract import observed_outputs

    config = build(
        CheckConfig,
        runtime=runtime,
        providers=tuple(providers or ()),
        ignore=tuple(ignore or ()),
        ops_libraries=tuple(ops_libraries or ()),
        fail_on=Severity(fail_on).value,
        # the contract beside the model, when it describes these bytes, says what it produced
        observed_outputs={n: o.shape for n, o in observed_outputs(model).items()},
    )

    def call(progress: Callable[[str], None]) -> CheckReport:
        profile = runtime_profile(runtime, refresh=refresh, progress=progress)
        return check_model(model, config, profile=profile, progress=progress)

    run(
        fmt,
        call,
        render_text,
        formats={
            "sarif": lambda report: emit_json(report.to_sarif(__version__)),
            "github": _annotations,
        },
    )
