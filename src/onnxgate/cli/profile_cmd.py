"""``onnxgate profile MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out, progress_bar
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
    parse_pairs,
)
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.errors import ConfigError
from onnxgate.perf import ProfileConfig, ProfileReport, profile
from onnxgate.perf._profile import TimeShare


def _one_size(dims: dict[str, list[int]]) -> dict[str, int]:
    """One size per dimension: a profile describes one shape."""
    for name, sizes in dims.items():
        if len(sizes) != 1:
            raise ConfigError(
                f"--dim {name} has {len(sizes)} sizes; profile describes one shape at a time.",
                hint=f"Run once per size (--dim {name}={sizes[0]}), or use `onnxgate bench` "
                "to sweep sizes.",
            )
    return {name: sizes[0] for name, sizes in dims.items()}


_NUMBERS = {"nodes", "calls", "ms/run", "share"}


def _table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMBERS else "left", no_wrap=True)
    return table


def _shares(title: str, rows: list[TimeShare]) -> Table:
    table = _table(title, "nodes", "calls", "ms/run", "share")
    for row in rows:
        table.add_row(
            escape(row.name), str(row.nodes), str(row.calls), f"{row.ms:.3f}", f"{row.share:.1%}"
        )
    return table


def render(report: ProfileReport) -> None:
    """Print the tables for people."""
    shapes = " ".join(f"{k}=[{','.join(map(str, v))}]" for k, v in report.shapes.items())
    out.print(
        f"[bold]{escape(report.model)}[/] on {escape(report.runtime)} ({escape(report.optimization)};"
        f" {escape(', '.join(report.providers))}), feeds: {escape(report.feeds)}"
        + (f" {escape(shapes)}" if shapes else "")
    )
    kernels = report.node_ms / report.run_ms if report.run_ms else 0.0
    out.print(
        f"{report.runs} profiled run(s) after {report.warmup} warm-up run(s): "
        f"{report.run_ms:.3f} ms per run, {report.node_ms:.3f} ms of it in {report.node_count} "
        f"node(s) ({kernels:.0%})"
    )
    out.print()
    out.print(_shares("op type", report.op_types))
    out.print()
    out.print(_shares("provider", report.by_provider))
    out.print()
    listed = len(report.nodes)
    if listed == report.node_count:
        out.print(f"[bold]all {listed} node(s)[/], slowest first")
    else:
        out.print(f"[bold]slowest {listed} of {report.node_count} nodes[/] (--top 0 lists all)")
    table = _table("node", "op type", "provider", "ms/run", "share")
    for n in report.nodes:
        table.add_row(
            escape(n.node or "(unnamed)"),
            escape(n.op_type),
            escape(n.provider),
            f"{n.ms:.3f}",
            f"{n.share:.1%}",
        )
    out.print(table)
    if report.nodes:
        # shapes get lines of their own: in a table column they are squeezed to nothing
        out.print("[bold]shapes[/] (inputs → outputs)")
        for n in report.nodes:
            flow = f"{' '.join(map(str, n.inputs))} → {' '.join(map(str, n.outputs))}"
            out.print(f"  {escape(n.node or '(unnamed)')}: {escape(flow)}")
    out.print()
    if report.memcpy:
        table = _table("memcpy node", "op type", "from → to", "ms/run", "share", "tensor")
        for m in report.memcpy:
            table.add_row(
                escape(m.node),
                escape(m.op_type),
                escape(f"{m.source} → {m.target}"),
                f"{m.ms:.3f}",
                f"{m.share:.1%}",
                escape(" ".join(map(str, m.outputs))),
            )
        out.print(table)
    else:
        out.print("no Memcpy node: no tensor was copied between providers")
    for note in report.notes:
        out.print(f"[dim]note: {escape(note)}[/]")
    if report.trace:
        out.print(f"trace: {escape(report.trace)} (chrome://tracing or ui.perfetto.dev)")


@handles_errors
def profile_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    top: Annotated[
        int, typer.Option("--top", "-n", help="Slowest nodes to list; 0 lists every node.")
    ] = 10,
    warmup: Annotated[
        int,
        typer.Option("--warmup", help="Runs before the counted ones; profiled, then dropped."),
    ] = 5,
    runs: Annotated[
        int, typer.Option("--runs", help="Counted runs; figures are per run, their mean.")
    ] = 10,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="Keep ONNX Runtime's Chrome trace (every run, warm-up included) at this path; "
            "without it the trace is deleted.",
            show_default=False,
        ),
    ] = None,
    inputs: InputsOpt = None,
    batch: Annotated[
        int | None,
        typer.Option(
            "--batch", "-b", help="Batch size (the first input's axis 0).", show_default=False
        ),
    ] = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    providers: ProvidersOpt = None,
    provider_option: ProviderOptionOpt = None,
    opt_level: OptLevelOpt = "all",
    threads: ThreadsOpt = 0,
    session_config: SessionConfigOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Where does the time go inside one run? ONNX Runtime's profiler, as tables.

    Measured: each node's kernel time as ONNX Runtime's own profiler records it, per run,
    summed by op type and by provider with its share of all kernel time; the slowest nodes
    (--top) with the shapes they read and wrote; how many nodes ran on each provider. Node names
    and op types are those of the graph as ONNX Runtime optimised it at --opt-level (fused nodes
    under fused names), because that is what ran. "ms per run" also counts ONNX Runtime's work
    between kernels, and profiling adds overhead: for latency figures use `onnxgate bench`.

    Warm-up: every run is profiled (profiling cannot start mid-session), and each run is marked
    in the trace; the kernel calls of the --warmup first runs are dropped and only the last --runs
    count. Feeds: the first sample of --inputs; else, with a contract beside the model and no
    --dim/--batch, its largest golden sample (a shape the model was proven at); else synthetic.
    One shape per profile (one size per --dim; sweep sizes with `onnxgate bench`).

    Memcpy rows: with a GPU provider, ONNX Runtime inserts MemcpyFromHost (host/CPU memory into
    the provider's) and MemcpyToHost (back to CPU) wherever a tensor crosses between providers;
    each is listed with the providers it bridges. Many copies mean the graph is split across
    providers, usually by nodes that fell back to CPU (see `onnxgate placement`). On CPU alone
    there are none.

    Examples: `onnxgate profile model.onnx --top 20` · `onnxgate profile model.onnx --providers
    cuda --trace profile.json` · `onnxgate profile model.onnx --format json`

    Exit codes: 0 profiled; 1 the session cannot be created or a run failed; 2 bad options or
    inputs; 3 a requested provider is not in this ONNX Runtime build, or did not start.
    """
    session = ort_options(providers, opt_level, threads, None, None, provider_option)
    config = ProfileConfig(
        dims=_one_size(parse_dims(dim)),
        batch=batch,
        ranges=parse_ranges(value_range),
        seed=seed,
        inputs=inputs,
        providers=session.providers,
        provider_options=session.provider_options,
        optimization=opt_level,
        threads=threads,
        session_config=parse_pairs(session_config, "--session-config"),
        warmup=warmup,
        runs=runs,
        top=top,
        trace=trace,
    )
    with progress_bar(fmt == Format.text, bar=False) as progress:
        report = profile(model, config, progress=progress)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
