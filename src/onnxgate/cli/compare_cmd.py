"""``onnxgate compare MODEL --against OTHER``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FROM_FLAGS,
    OUTPUT,
    TOLERANCES,
    AtolOpt,
    DimOpt,
    FormatOpt,
    InputsOpt,
    RangeOpt,
    RtolOpt,
    SeedOpt,
    SessionFlags,
    TolOpt,
    build,
    feed_settings,
    session_options,
    tolerance_settings,
)
from onnxgate.compare import CompareConfig, compare, render_text
from onnxgate.runners import SPEC_HELP


@handles_errors
@session_options(
    "providers", "provider_options", "opt_level", "threads", "session_config", "ops_libraries"
)
def compare_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    against: Annotated[
        str, flag_option("against", "--against", "-a", help=f"The reference execution: {SPEC_HELP}")
    ] = "reference",
    candidate: Annotated[
        str,
        flag_option(
            "candidate",
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
            rich_help_panel=TOLERANCES,
        ),
    ] = None,
    localize: Annotated[
        bool,
        flag_option(
            "localize",
            "--localize",
            help="When an output fails, find the first node (topological order) whose outputs "
            "differ while its inputs agree. Needs two ONNX executions.",
        ),
    ] = False,
    runtime: Annotated[
        str,
        flag_option(
            "runtime",
            "--runtime",
            "-r",
            help="Run the ONNX Runtime candidate on another release or package, such as "
            "onnxruntime==1.20.1 or onnxruntime-openvino==1.24.1 (with --providers openvino), "
            "in an isolated environment created once in the user cache.",
        ),
    ] = "installed",
    session: SessionFlags = FROM_FLAGS,
    save_optimized: Annotated[
        Path | None,
        flag_option(
            "save_optimized",
            "--save-optimized",
            help="Save the model as ONNX Runtime optimised it for the candidate.",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    trust_pickle: Annotated[
        bool,
        flag_option(
            "trust_pickle",
            "--trust-pickle",
            help="Allow a sklearn: reference to be unpickled (unpickling runs code from the file).",
        ),
    ] = False,
    fmt: FormatOpt = Format.text,
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
    config = build(
        CompareConfig,
        against=against,
        candidate=candidate,
        feeds=feed_settings(inputs, dim, value_range, seed),
        session=session.settings(),
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        localize=localize,
        runtime=runtime,
        save_optimized=save_optimized,
        trust_pickle=trust_pickle,
    )
    run(fmt, lambda progress: compare(model, config, progress=progress), render_text)
