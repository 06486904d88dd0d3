"""``onnxgate bench MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out, progress_line
from onnxgate.cli._options import DimOpt, OptLevelOpt, ProvidersOpt, RangeOpt, SeedOpt
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.errors import ConfigError
from onnxgate.perf import BenchReport, bench
from onnxgate.perf._bench import BenchConfig


def _ints(items: list[str] | None, option: str) -> list[int]:
    try:
        return [int(v) for item in items or () for v in item.split(",") if v.strip()]
    except ValueError as err:
        raise ConfigError(f"{option} takes integers, comma-separated or repeated.") from err


def render(report: BenchReport) -> None:
    """Print the figures for people."""
    out.print(f"[bold]{escape(report.model)}[/] on {escape(report.runtime)}")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in (
        "shape",
        "threads",
        "runs",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "mean ms",
        "samples/s",
        "cv",
    ):
        table.add_column(column, justify="left" if column == "shape" else "right", no_wrap=True)
    for r in report.results:
        shape = ",".join(f"{k}={v}" for k, v in r.dims.items()) or "fixed"
        table.add_row(
            escape(shape),
            str(r.threads or "auto"),
            str(r.runs),
            f"{r.p50_ms:.3f}",
            f"{r.p90_ms:.3f}",
            f"{r.p99_ms:.3f}",
            f"{r.mean_ms:.3f}",
            f"{r.throughput:.1f}",
            ("[yellow]" if r.noisy else "") + f"{r.cv:.1%}" + ("[/]" if r.noisy else ""),
        )
    out.print(table)
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
    providers: ProvidersOpt = None,
    opt_level: OptLevelOpt = "all",
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """How fast is the model on ONNX Runtime here, per batch size, shape and thread count?

    Each configuration gets its own session, --warmup uncounted runs, then timed runs; reported
    are p50/p90/p99, mean and min latency, throughput (samples/s at the mean) and the
    coefficient of variation, with a warning when it is above 10% (too noisy to compare).
    Comparing against PyTorch or another model in separate processes is not built yet.
    """
    config = BenchConfig(
        batches=_ints(batch, "--batch"),
        dims=parse_dims(dim),
        threads=_ints(threads, "--threads") or [0],
        warmup=warmup,
        runs=runs,
        budget_s=budget,
        ranges=parse_ranges(value_range),
        seed=seed,
        providers=tuple(providers or ()),
        optimization=opt_level,
    )
    with progress_line(fmt == Format.text) as progress:
        report = bench(model, config, progress=progress)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
