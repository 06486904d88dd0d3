"""``onnxgate bench MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out, progress_bar
from onnxgate.cli._options import (
    DimOpt,
    OptLevelOpt,
    ProviderOptionOpt,
    ProvidersOpt,
    RangeOpt,
    SeedOpt,
    SessionConfigOpt,
    ort_options,
    parse_pairs,
)
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.errors import ConfigError
from onnxgate.perf import BenchReport, bench
from onnxgate.perf._bench import BenchConfig


def _ints(items: list[str] | None, option: str) -> list[int]:
    try:
        return [int(v) for item in items or () for v in item.split(",") if v.strip()]
    except ValueError as err:
        raise ConfigError(f"{option} takes integers, comma-separated or repeated.") from err


def _ms(value: float) -> str:
    """Four significant figures at most, three decimals at most: 0.012, 26.31, 189.5."""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def render(report: BenchReport) -> None:
    """Print the figures for people; with --vs, each configuration's two rows and the ratio."""
    providers = ", ".join(report.providers)
    out.print(f"[bold]{escape(report.model)}[/] on {escape(report.runtime)} ({escape(providers)})")
    if report.vs is not None:
        out.print(f"against [bold]{escape(report.vs.name)}[/] on {escape(report.vs.runtime)}")
    table = Table(box=None, header_style="bold", pad_edge=False)
    # short headers (latencies in ms, said below the table) so --vs fits 80 columns
    columns = ["shape", "threads", "runs", "p50", "p90", "p99", "mean", "samples/s", "cv"]
    if report.vs is not None:
        columns[0:0] = ["side"]
        columns.append("ratio")
    for column in columns:
        table.add_column(
            column, justify="left" if column in ("shape", "side") else "right", no_wrap=True
        )
    rows = [(r, "model") for r in report.results]
    if report.vs is not None:
        rows = [
            row
            for ours, theirs in zip(report.results, report.vs.results, strict=True)
            for row in ((ours, "model"), (theirs, "vs"))
        ]
    for index, (r, side) in enumerate(rows):
        shape = ",".join(f"{k}={v}" for k, v in r.dims.items()) or "fixed"
        cells = [
            escape(shape),
            str(r.threads or "auto"),
            str(r.runs),
            _ms(r.p50_ms),
            _ms(r.p90_ms),
            _ms(r.p99_ms),
            _ms(r.mean_ms),
            f"{r.throughput:.1f}",
            ("[yellow]" if r.noisy else "") + f"{r.cv:.1%}" + ("[/]" if r.noisy else ""),
        ]
        if report.vs is not None:
            ratio = report.ratio[index // 2].ratio
            cells = [side, *cells, f"{ratio:.2f}x" if side == "vs" else ""]
        table.add_row(*cells)
    # Never cut a figure to fit: a table wider than the terminal wraps instead of losing digits.
    needed = Measurement.get(out, out.options.update_width(10_000), table).maximum
    width = out.width
    out.width = max(width, needed)
    try:
        out.print(table)
    finally:
        out.width = width
    out.print("[dim]latencies in ms; samples/s at the mean latency.[/]")
    if report.vs is not None:
        out.print(
            "[dim]ratio: the contender's p50 over the model's (above 1: the model is faster). "
            f"{escape(report.method)}.[/]"
        )
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}")


@handles_errors
def bench_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    batch: Annotated[
        list[str] | None,
        typer.Option(
            "--batch",
            "-b",
            help="Batch sizes, e.g. 1,8,32 (the first input's axis 0).",
            show_default=False,
        ),
    ] = None,
    dim: DimOpt = None,
    threads: Annotated[
        list[str] | None,
        typer.Option(
            "--threads",
            help="Intra-op thread counts to sweep, e.g. 1,2 (0 lets ONNX Runtime choose).",
            show_default=False,
        ),
    ] = None,
    warmup: Annotated[
        int, typer.Option("--warmup", help="Runs before timing starts, not counted.")
    ] = 10,
    runs: Annotated[
        int | None,
        typer.Option(
            "--runs",
            help="Timed runs per configuration (default: as many as --budget allows, at least 10).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        float, typer.Option("--budget", help="Seconds of timed runs per configuration.")
    ] = 2.0,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    vs: Annotated[
        str | None,
        typer.Option(
            "--vs",
            help="A contender on the same inputs: torch:package.module:factory (a PyTorch "
            "module, run under inference_mode with the same thread count) or OTHER.onnx (same "
            "session options). Both sides run in worker processes of their own, interleaved.",
            show_default=False,
        ),
    ] = None,
    tuned: Annotated[
        bool,
        typer.Option(
            "--tuned",
            help="Run with the settings and graph `onnxgate tune` recorded in the contract for "
            "this machine; refused when the model, the tuned graph or the machine changed.",
        ),
    ] = False,
    objective: Annotated[
        str | None,
        typer.Option(
            "--objective",
            help="With --tuned: latency or throughput, when both were tuned.",
            show_default=False,
        ),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="Time the model on another ONNX Runtime release or package, such as "
            "onnxruntime-openvino==1.24.1 (with --providers openvino), in a worker inside its "
            "isolated environment; a --vs ONNX model then runs on the installed runtime on its "
            "own providers.",
        ),
    ] = "installed",
    providers: ProvidersOpt = None,
    provider_option: ProviderOptionOpt = None,
    opt_level: OptLevelOpt = "all",
    inter_op_threads: Annotated[
        int,
        typer.Option("--inter-op-threads", help="Threads across operators (with --parallel)."),
    ] = 0,
    parallel: Annotated[
        bool, typer.Option("--parallel", help="Run independent branches in parallel.")
    ] = False,
    no_arena: Annotated[
        bool, typer.Option("--no-arena", help="Turn off ONNX Runtime's CPU memory arena.")
    ] = False,
    session_config: SessionConfigOpt = None,
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="Seconds a --vs worker may take for one answer."),
    ] = 600.0,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """How fast is the model on ONNX Runtime here, per batch size, shape and thread count?

    Each configuration gets its own session, --warmup uncounted runs, then timed runs until
    --runs or --budget seconds; reported are p50/p90/p99, mean and min latency, throughput
    (samples/s at the mean) and the coefficient of variation, with a warning when it is above
    10% (the machine is too noisy to compare that figure).

    With --vs, the model and the contender each run in a worker process of their own (two
    runtimes in one process distort each other: their thread pools spin), interleaved in slices
    of about 0.2 s whose order flips every round, and each configuration gets a ratio: the
    contender's p50 over the model's, above 1 when the model is faster. Inputs another ONNX
    model lacks are left out and inputs it adds are generated; both are noted.

    Without --batch, --dim and --range, a model with a contract beside it is timed at the shapes
    of its golden samples (shapes it was proven at), never at made-up ones.

    Examples: `onnxgate bench model.onnx --batch 1,8,32 --dim seq=128 --threads 1,2`;
    `onnxgate bench model.onnx --batch 1 --dim seq=128 --vs torch:mypkg.models:build`;
    `onnxgate bench model.onnx -r onnxruntime-openvino==1.24.1 --providers openvino --vs
    model.onnx` (OpenVINO against ONNX Runtime's CPU provider).

    Exit codes: 0 measured (noisy figures are warnings, not failures); 1 a session could not be
    created or a run failed, on either side; 2 bad options or inputs, or --tuned settings that do
    not apply; 3 a requested provider or extra is missing, or a provider did not start.
    """
    session = ort_options(providers, opt_level, 0, None, None, provider_option)
    config = BenchConfig(
        batches=_ints(batch, "--batch"),
        dims=parse_dims(dim),
        threads=_ints(threads, "--threads") or [0],
        warmup=warmup,
        runs=runs,
        budget_s=budget,
        ranges=parse_ranges(value_range),
        seed=seed,
        providers=session.providers,
        provider_options=session.provider_options,
        optimization=opt_level,
        inter_op_threads=inter_op_threads,
        parallel=parallel,
        cpu_mem_arena=not no_arena,
        session_config=parse_pairs(session_config, "--session-config"),
        vs=vs,
        tuned=tuned,
        objective=objective,
        timeout_s=timeout,
        runtime=runtime,
    )
    with progress_bar(fmt == Format.text) as progress:
        report = bench(model, config, progress=progress)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
