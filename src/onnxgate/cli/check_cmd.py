"""``onnxgate check MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from onnxgate import __version__
from onnxgate.check import CheckReport, Severity, check_model
from onnxgate.cli._common import CheckFormat, emit_json, finish, handles_errors, out, progress_line

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render(report: CheckReport) -> None:
    """Print findings for people."""
    out.print(
        f"[bold]{escape(report.model)}[/] against [bold]{report.runtime}[/] on {', '.join(report.providers)}"
    )
    for f in report.findings:
        subject = f.node or f.tensor
        where = f" [dim]({escape(subject)})[/]" if subject and subject not in f.message else ""
        out.print(
            f"  [{_STYLE[f.severity]}]{f.severity.value:7}[/] {f.code}  {escape(f.message)}{where}"
        )
        if f.hint and f.severity != Severity.INFO:
            out.print(f"           [dim]fix: {escape(f.hint)}[/]")
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    load = "loads" if report.predicted_load else "does not load"
    c = report.counts
    out.print(
        f"{verdict}  {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s); "
        f"predicted: {load} on {report.runtime}"
    )


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
        typer.Option(
            "--providers",
            "-p",
            help="Execution providers in preference order, comma-separated or repeated "
            "(CUDAExecutionProvider or just cuda). CPU is appended, as the runtime does.",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", help="Finding codes to leave out, e.g. SHP001,STR008."),
    ] = None,
    fail_on: Annotated[
        Severity, typer.Option("--fail-on", help="Lowest severity that fails the check (exit 1).")
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
        ),
    ] = CheckFormat.text,
) -> None:
    """Will this model load and run on the runtime and providers you deploy to?

    Static findings with stable codes (see docs/checks.md), each with a severity, the node or
    tensor concerned and a fix: structure (checker, shape inference, order, names), versions (IR
    and opsets against the target's measured limits), operators (a kernel for each node's schema
    version and input types on the requested providers), shapes, external data and size.

    Exit codes: 0 no finding at or above --fail-on; 1 some; 2 the model is malformed or unsafe, or
    an option is wrong; 3 the target runtime cannot be installed or probed.
    """
    from onnxgate.compat.runtime import runtime_profile

    with progress_line(fmt == CheckFormat.text) as progress:
        profile = runtime_profile(runtime, refresh=refresh, progress=progress)
        report = check_model(
            model,
            runtime=profile,
            providers=providers,
            ignore=ignore,
            fail_on=fail_on,
            progress=progress,
        )
    if fmt == CheckFormat.json:
        emit_json(report.model_dump(mode="json"))
    elif fmt == CheckFormat.sarif:
        emit_json(report.to_sarif(__version__))
    elif fmt == CheckFormat.github:
        text = report.to_github()
        if text:
            out.print(text, markup=False)
    else:
        render(report)
    finish(report.passed)
