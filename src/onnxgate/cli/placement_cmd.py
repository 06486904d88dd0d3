"""``onnxgate placement MODEL --providers LIST [--require PROVIDER]``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from onnxgate.cli._common import (
    FORMAT_HELP,
    Format,
    emit_json,
    finish,
    handles_errors,
    out,
    progress_line,
)
from onnxgate.cli._options import (
    DimOpt,
    InputsOpt,
    OptLevelOpt,
    ProviderOptionOpt,
    ProvidersOpt,
    RangeOpt,
    SeedOpt,
    SessionConfigOpt,
    ThreadsOpt,
    ort_options,
)
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.placement import MEMCPY, NodePlacement, PlacementReport, placement

MAX_LISTED = 8


def _node(n: NodePlacement) -> str:
    kind = n.op_type if n.qualified_op == n.op_type else f"{n.op_type}, {n.domain}"
    return f"{escape(n.node or '(unnamed)')} ({escape(kind)})"


def _verdict(report: PlacementReport) -> str:
    required = report.required
    ran = report.method == "profiling"
    if not report.passed:
        return f"[bold red]FAIL[/]  {len(report.violations)} compute node(s) are not on {required}"
    if not report.exempted:
        scope = "that ran on these feeds " if ran else ""
        return f"[bold green]PASS[/]  every compute node {scope}is on {required}"
    on = sum(1 for n in report.nodes if n.provider == required and n.op_type not in MEMCPY)
    kinds = sorted({n.qualified_op for n in report.exempted})
    return (
        f"[bold green]PASS[/]  {on} compute node(s) on {required}; {len(report.exempted)} "
        f"exempted by --allow-op (op types {escape(', '.join(kinds))})"
        + (", of the nodes that ran on these feeds" if ran else "")
    )


def render(report: PlacementReport) -> None:
    """Print a placement audit for people."""
    out.print(
        f"[bold]{escape(report.model)}[/] on {report.runtime}, requested "
        f"{', '.join(report.requested)} (method: {report.method})"
    )
    for provider, count in sorted(report.assignments.items(), key=lambda kv: -kv[1]):
        ops = ", ".join(f"{op} {n}" for op, n in report.op_types[provider].items())
        out.print(f"  [bold]{provider}[/]: {count} node(s): {escape(ops)}")
    if report.memcpy:
        out.print(f"  {report.memcpy} Memcpy node(s) copy tensors between providers")
    if report.fallback:
        out.print(
            f"[yellow]{len(report.fallback)} compute node(s) are not on {report.requested[0]}:[/]"
        )
        if len(report.fallback) > MAX_LISTED:
            kinds = Counter(n.qualified_op for n in report.fallback)
            by_type = ", ".join(f"{op} {k}" for op, k in kinds.most_common())
            out.print(f"  by op type: {escape(by_type)}")
        for n in report.fallback[:MAX_LISTED]:
            out.print(f"  {_node(n)} → {n.provider}")
        if len(report.fallback) > MAX_LISTED:
            out.print(
                f"  ... and {len(report.fallback) - MAX_LISTED} more (--format json lists all)"
            )
    if report.violations and report.required != report.requested[0]:
        # the fallback list above is against the first provider; name what --require rejects
        out.print(f"[red]not on {report.required}:[/]")
        for n in report.violations[:MAX_LISTED]:
            out.print(f"  {_node(n)} → {n.provider}")
        if len(report.violations) > MAX_LISTED:
            out.print(f"  ... and {len(report.violations) - MAX_LISTED} more")
    for note in report.notes:
        out.print(f"  [dim]note: {escape(note)}[/]")
    if report.required:
        out.print(_verdict(report))


@handles_errors
def placement_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    providers: ProvidersOpt = None,
    provider_option: ProviderOptionOpt = None,
    require: Annotated[
        str | None,
        typer.Option(
            "--require",
            help="Fail (exit 1) if any compute node is not on this provider. Memcpy nodes are not "
            "compute nodes; --allow-op exempts more op types.",
            show_default=False,
        ),
    ] = None,
    allow_op: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-op",
            help="An op type allowed off the required provider (e.g. Shape, which ONNX Runtime "
            "keeps on CPU on purpose; com.microsoft:Gelu for one domain's op); repeatable.",
            show_default=False,
        ),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="'installed', or a release such as onnxruntime==1.20.1 or another ONNX Runtime "
            "package such as onnxruntime-openvino==1.24.1, run in an isolated environment "
            "(created once in the user cache).",
        ),
    ] = "installed",
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="auto, assignment (the partition ONNX Runtime records; 1.24 and later) or "
            "profiling (one profiled run on feeds; any release; sees only the nodes that ran).",
        ),
    ] = "auto",
    opt_level: OptLevelOpt = "all",
    threads: ThreadsOpt = 0,
    session_config: SessionConfigOpt = None,
    inputs: InputsOpt = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Which execution provider runs each node? Catch silent CPU fallback before production does.

    Counts per provider and op type, the compute nodes that fell back from the first requested
    provider, and with `--require` a verdict. ONNX Runtime appends CPU to every provider list and
    moves any node its preferred provider cannot take to CPU without an error: this command shows
    where that happened.

    Examples: `onnxgate placement model.onnx --providers cuda --require cuda` ·
    `onnxgate placement model.onnx --runtime onnxruntime==1.20.1 --method profiling` ·
    `onnxgate placement model.onnx --runtime onnxruntime-openvino==1.24.1 --providers
    openvino:precision=FP32 --require openvino`

    Exit codes: 0 placed as required (or no requirement); 1 a compute node is not on the required
    provider, or the session cannot be created; 2 bad options or inputs; 3 a requested provider
    is not in this ONNX Runtime build (the message names the package that has it) or did not
    start with the options given (the message quotes ONNX Runtime's reason).
    """
    options = ort_options(providers, opt_level, threads, session_config, None, provider_option)
    with progress_line(fmt == Format.text) as progress:
        report = placement(
            model,
            require=require,
            runtime=runtime,
            method=method,  # type: ignore[arg-type]
            options=options,
            allow_ops=allow_op or (),
            inputs=inputs,
            dims=parse_dims(dim),
            ranges=parse_ranges(value_range),
            seed=seed,
            progress=progress,
        )
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
    finish(report.passed)
