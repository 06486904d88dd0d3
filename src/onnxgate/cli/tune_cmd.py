"""``onnxgate tune MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out, progress_bar
from onnxgate.cli._options import ProvidersOpt, RangeOpt, SeedOpt
from onnxgate.contract import Timing
from onnxgate.data import parse_ranges
from onnxgate.errors import ConfigError
from onnxgate.perf import TuneConfig, TuneReport, tune


def _dims(items: list[str] | None) -> dict[str, int]:
    dims = {}
    for item in items or ():
        name, sep, size = item.partition("=")
        try:
            dims[name.strip()] = int(size)
        except ValueError as err:
            raise ConfigError(f"--dim {item!r} is not NAME=SIZE with one integer size.") from err
        if not sep or not name.strip():
            raise ConfigError(f"--dim {item!r} is not NAME=SIZE.")
    return dims


def _row(t: Timing) -> list[str]:
    return [
        f"{t.p50_ms:.4g}",
        f"{t.p90_ms:.4g}",
        f"{t.cv:.1%}",
        f"{t.throughput:.1f}",
        str(t.runs),
    ]


def render(report: TuneReport) -> None:
    """Print the gate, the search and the contest for people."""
    shape = ", ".join(f"{k}={v}" for k, v in report.shape.items()) or "fixed shape"
    m = report.machine
    out.print(
        f"[bold]{escape(report.model)}[/]: {report.objective} at {escape(shape)} on {escape(m.cpu)}, "
        f"{m.cores} CPUs, onnxruntime {m.runtime} (fingerprint {m.id})"
    )
    out.print(
        f"\n[bold]Parity gate[/] against the model as given under ONNX Runtime's defaults, "
        f"{report.parity_samples} sample(s), {escape(report.parity_rule)}"
    )
    for v in report.gate:
        mark = "[green]pass[/]" if v.passed else "[red]REJECTED[/]"
        worst = v.outputs[0] if v.outputs else None
        figures = (
            f"{worst.output}: {worst.mismatches}/{worst.elements} outside, max |Δ| {worst.max_abs:.3g}"
            if worst is not None and worst.max_abs is not None
            else escape(v.reason or "")
        )
        out.print(f"  {mark}  {escape(v.graph)} @ {v.level}  {escape(figures)}")
    out.print(f"\n[bold]Search[/]: {report.candidates} candidates, successive halving")
    for i, r in enumerate(report.rounds, 1):
        unit = "ms p50" if report.objective == "latency" else "samples/s"
        out.print(
            f"  round {i}: {r.candidates} × {r.runs} runs, best {r.best_score:.4g} {unit}: "
            f"{escape(r.best)}"
        )
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "p50 ms", "p90 ms", "cv", "samples/s", "runs"):
        table.add_column(column, justify="left" if not column else "right", no_wrap=True)
    table.add_row("defaults", *_row(report.defaults))
    if report.best.label != report.defaults.label:
        table.add_row("best", *_row(report.best))
    out.print("\n[bold]Contest[/] (one worker process each, runs interleaved)")
    out.print(table)
    if report.best.label != report.defaults.label:
        out.print(f"  best: {escape(report.best.label)}")
        low, high = report.interval
        out.print(
            f"  improvement {report.ratio:.3f}× (90% interval {low:.3f}–{high:.3f}; needs an "
            f"interval above 1 and at least {1 + report.min_gain:.2f}×)"
        )
    verdict = (
        f"[green]tuned:[/] {escape(report.best.label)}"
        if report.replaced_defaults
        else "[yellow]defaults kept[/]"
    )
    out.print(f"\n{verdict}")
    for note in report.notes:
        out.print(f"[dim]note:[/] {escape(note)}")
    for path in report.written:
        out.print(f"wrote {escape(path)}")


@handles_errors
def tune_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    objective: Annotated[
        str, typer.Option("--objective", help="latency (p50 at the batch) or throughput.")
    ] = "latency",
    batch: Annotated[
        int | None,
        typer.Option(
            "--batch", "-b", help="Batch size (the first input's axis 0).", show_default=False
        ),
    ] = None,
    dim: Annotated[
        list[str] | None,
        typer.Option(
            "--dim",
            "-d",
            help="Size of another symbolic dimension, NAME=SIZE (repeatable); unnamed ones are 3.",
            show_default=False,
        ),
    ] = None,
    min_gain: Annotated[
        float,
        typer.Option(
            "--min-gain", help="Smallest improvement that replaces the defaults (0.02 = 2%)."
        ),
    ] = 0.02,
    write: Annotated[
        bool,
        typer.Option(
            "--write/--no-write",
            help="Record the result in the contract (which must exist). --no-write records "
            "nothing: a contract, if there is one, still sets the gate's samples and rules; "
            "without one the gate uses compare's default tolerances.",
        ),
    ] = True,
    fusions: Annotated[
        bool,
        typer.Option("--fusions/--no-fusions", help="Try ONNX Runtime's transformer fusions."),
    ] = True,
    threads: Annotated[
        list[int] | None,
        typer.Option(
            "--threads",
            help="Intra-op thread counts to search (repeatable); default 1, 2, 4 ... up to the "
            "usable CPUs.",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        float, typer.Option("--budget", help="Seconds of timed runs per side in the final contest.")
    ] = 3.0,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    providers: ProvidersOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Find the fastest ONNX Runtime settings (and graph) that still give the model's answers.

    **Parity gate.** Every graph candidate (the model as given; for a BERT-like encoder, ONNX
    Runtime's transformer fusions, with and without the GELU approximation) at every optimisation
    level is compared, with the contract's tolerances per output, against the model as given
    under ONNX Runtime's defaults on the tuning shape, and against the contract's stored golden
    outputs on its golden inputs (as `verify` judges them). A candidate that fails is reported
    with its worst figures and never timed. The winner's exact settings are
    checked again before the contest.

    **Search.** The passing graphs × levels, crossed with intra-op threads (1, 2, 4 ... up to the
    usable CPUs), sequential or parallel execution, thread spinning on/off and the memory arena
    and patterns on/off (provider options on CUDA/TensorRT), are searched by successive
    halving: a few runs each, the best third goes on with three times the runs.

    **Acceptance.** The winner and the defaults are then timed in worker processes of their own,
    runs interleaved. The winner replaces the defaults only when the 90% bootstrap interval of
    its improvement (p50 ratio for latency, samples/s ratio for throughput) lies above 1 and the
    gain is at least --min-gain; otherwise the defaults are kept and the report says what the
    best candidate measured. Both sides are shown with p50, p90 and cv.

    **Written.** Into MODEL.contract.json (create it with `onnxgate contract init` first): the
    settings kept, both sides' figures and the interval, filed under this machine's fingerprint
    (CPU, usable cores, ONNX Runtime version, providers), the objective and the shape. A winning
    optimised graph is written beside the model as MODEL.tuned-FINGERPRINT-OBJECTIVE-SHAPE.onnx.

    Exit codes: 0 tuned (also when the defaults are kept); 1 the model as given fails the gate
    itself (it misses its contract's golden outputs, or does not reproduce its own), so nothing
    can be judged; 2 bad input or no contract; 3 a provider is missing.
    """
    config = TuneConfig(
        objective=objective,  # type: ignore[arg-type]  (checked by TuneConfig)
        batch=batch,
        dims=_dims(dim),
        providers=tuple(
            p.strip() for item in providers or () for p in item.split(",") if p.strip()
        ),
        min_gain=min_gain,
        write=write,
        fusions=fusions,
        threads=threads or None,
        budget_s=budget,
        ranges=parse_ranges(value_range),
        seed=seed,
    )
    with progress_bar(fmt == Format.text, bar=False) as progress:
        report = tune(model, config, progress=progress)
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
