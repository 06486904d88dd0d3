"""``onnxgate compare MODEL --against OTHER``."""

from __future__ import annotations

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
    AtolOpt,
    DimOpt,
    InputsOpt,
    OptLevelOpt,
    ProviderOptionOpt,
    ProvidersOpt,
    RangeOpt,
    RtolOpt,
    SeedOpt,
    SessionConfigOpt,
    ThreadsOpt,
    TolOpt,
    compare_config,
    ort_options,
)
from onnxgate.compare import CompareReport, compare
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.runners import SPEC_HELP


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if value else "0"


def render(report: CompareReport) -> None:
    """Print a comparison for people."""
    out.print(
        f"[bold]{escape(report.model)}[/]: [bold]{escape(report.candidate)}[/] (candidate) vs "
        f"[bold]{escape(report.reference)}[/] (reference), {len(report.samples)} sample(s): "
        + ", ".join(escape(s.label) for s in report.samples)
    )
    if report.value_ranges:
        out.print(
            f"  [dim]{escape(report.data)}: "
            + "; ".join(f"{escape(k)} {escape(v)}" for k, v in report.value_ranges.items())
            + "[/]"
        )
    for o in report.outputs:
        verdict = "[green]ok[/]" if o.passed else "[bold red]FAIL[/]"
        out.print(f"  {verdict} [bold]{escape(o.name)}[/]  {escape(o.criterion)}")
        figures = [
            f"max_abs {_fmt(o.max_abs)}",
            f"max_rel {_fmt(o.max_rel)}",
            f"mean_abs {_fmt(o.mean_abs)}",
            f"p99_abs {_fmt(o.p99_abs)}",
            f"mismatches {o.mismatches}/{o.elements}",
            f"cosine {_fmt(o.cosine, 7)}",
        ]
        if o.top1 is not None:
            figures.append(f"top1 {_fmt(o.top1)}")
        if not o.shape_equal or not o.dtype_equal:
            figures.append(
                f"{o.candidate_dtype} {o.candidate_shape} vs {o.dtype} {o.shape} (reference)"
            )
        out.print("       " + "  ".join(figures))
    for o in report.outputs:
        if o.reason:
            out.print(
                f"  [red]{escape(o.name)}[/]: {escape(o.reason)} (sample {escape(o.worst_sample or '')})"
            )
        if o.nan != (0, 0) or o.inf != (0, 0):
            out.print(
                f"  {escape(o.name)}: NaN {o.nan[0]} vs {o.nan[1]}, inf {o.inf[0]} vs {o.inf[1]} "
                "(candidate vs reference)"
            )
    for note in report.notes:
        out.print(f"  [dim]note: {escape(note)}[/]")
    d = report.first_divergence
    if d is not None:
        if d.found:
            out.print(
                f"[bold]first diverging node:[/] {escape(d.node or '')} ({d.op_type}, "
                f"position {d.position}) on sample {escape(d.sample)}"
            )
            for label, tensors in (("input", d.inputs), ("output", d.outputs)):
                for t in tensors:
                    state = "agrees" if t.agrees else "[red]differs[/]"
                    kind = " (weight)" if t.initializer else ""
                    out.print(
                        f"  {label} {escape(t.name)}{kind}: {state}, max_abs {_fmt(t.max_abs)}, "
                        f"mismatches {t.mismatches}/{t.elements}"
                    )
            if d.note:
                out.print(f"  {escape(d.note)}")
            if d.chain:
                out.print(f"  then: {escape(' → '.join(d.chain))}")
        else:
            out.print(f"[bold]no diverging node found:[/] {escape(d.note or '')}")
        out.print(f"  [dim]method: {escape(d.method)}[/]")
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    failing = sum(not o.passed for o in report.outputs)
    out.print(f"{verdict}  {len(report.outputs) - failing} output(s) agree, {failing} do not")


@handles_errors
def compare_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    against: Annotated[
        str, typer.Option("--against", "-a", help=f"The reference execution: {SPEC_HELP}")
    ] = "reference",
    candidate: Annotated[
        str,
        typer.Option(
            "--candidate",
            help="The execution under test, in the same notation; by default ONNX Runtime with "
            "the session options below.",
        ),
    ] = "ort",
    inputs: InputsOpt = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="Judge an output by one figure instead of the element rule: "
            "[OUTPUT:]METRIC OP VALUE, e.g. embedding:cosine>=0.999, or max_abs<=1e-3 for every "
            "output. Metrics: cosine, max_abs, mean_abs, p99_abs, max_rel, mismatches, "
            "mismatch_fraction, and for [rows, classes] float outputs top1 (argmax agreement) "
            "and topk (overlap of the top 5, or fewer when there are fewer classes). An "
            "unmatched NaN or infinity fails whatever the metric.",
            show_default=False,
        ),
    ] = None,
    localize: Annotated[
        bool,
        typer.Option(
            "--localize",
            help="When an output fails, find the first node (topological order) whose outputs "
            "differ while its inputs agree. Needs two ONNX executions.",
        ),
    ] = False,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="Run the ONNX Runtime candidate on another release or package, such as "
            "onnxruntime==1.20.1 or onnxruntime-openvino==1.24.1 (with --providers openvino), "
            "in an isolated environment created once in the user cache.",
        ),
    ] = "installed",
    providers: ProvidersOpt = None,
    provider_option: ProviderOptionOpt = None,
    opt_level: OptLevelOpt = "all",
    threads: ThreadsOpt = 0,
    session_config: SessionConfigOpt = None,
    save_optimized: Annotated[
        Path | None,
        typer.Option(
            "--save-optimized",
            help="Save the model as ONNX Runtime optimised it for the candidate.",
            show_default=False,
        ),
    ] = None,
    trust_pickle: Annotated[
        bool,
        typer.Option(
            "--trust-pickle",
            help="Allow a sklearn: reference to be unpickled (unpickling runs code from the file).",
        ),
    ] = False,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Do two executions of a model agree? Per output, with the first node that went wrong.

    The candidate (ONNX Runtime by default) and the reference (`--against`, the ONNX reference
    evaluator by default) run the same samples. Each output is judged by the element rule
    `|a - b| <= atol + rtol * |b|` (a the candidate, b the reference; NaN matches NaN, an
    infinity the same infinity), with defaults by dtype: float32 atol 1e-5 rtol 1e-4, float16
    1e-3/1e-3, bfloat16 1e-2/1e-2, float64 1e-7/1e-7, other types exact. `--metric` judges an
    output by one figure instead. Shapes must be equal.

    Reported per output: max, mean and p99 absolute error, max relative error, mismatching
    elements, cosine similarity, top-1 and top-5 agreement for [rows, classes] float outputs,
    NaN and infinity counts, dtype and shape equality.

    Examples: `onnxgate compare model.onnx` · `onnxgate compare model.onnx --against ort:disable`
    · `onnxgate compare quantized.onnx --against model.onnx --localize` ·
    `onnxgate compare model.onnx --against torch:mypkg.nets:build --dim batch=1,7` ·
    `onnxgate compare model.onnx --runtime onnxruntime-openvino==1.24.1 --providers openvino
    --against ort:disable --localize`

    With `--localize`, the first diverging node is also replayed alone on both sides with the
    same input tensors: the report says whether the two implementations disagree on identical
    inputs, or whether the node amplified a difference in its inputs (with the ratio measured),
    and which side the specification supports when onnxgate knows the deviation.

    When the reference evaluator itself crashes on the model (it has bugs of its own), the
    command exits 3 naming the operator; use ONNX Runtime as the reference: `--against
    ort:disable`.

    Exit codes: 0 every output agrees; 1 an output does not, or a runner failed on the model;
    2 bad options or inputs that do not fit the model; 3 a provider or extra is missing, a
    provider did not start, or the reference evaluator crashed.
    """
    config = compare_config(atol, rtol, tol, metric)
    options = ort_options(
        providers, opt_level, threads, session_config, save_optimized, provider_option
    )
    with progress_line(fmt == Format.text) as progress:
        report = compare(
            model,
            against,
            candidate=candidate,
            inputs=inputs,
            dims=parse_dims(dim),
            ranges=parse_ranges(value_range),
            seed=seed,
            ort_options=options,
            trust_pickle=trust_pickle,
            config=config,
            localize=localize,
            runtime=runtime,
            progress=progress,
        )
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
    finish(report.passed)
