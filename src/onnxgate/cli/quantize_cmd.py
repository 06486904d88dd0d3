"""``onnxgate quantize MODEL --out OUT.onnx``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import FEEDS, FormatOpt, OpsLibraryOpt, build
from onnxgate.errors import ConfigError
from onnxgate.quantize import (
    PRESET_HELP,
    RECIPES_HELP,
    TARGET_HELP,
    QuantizeConfig,
    quantize,
    render_text,
)

_DATA = (
    "an .npz (one sample), a folder of .npz files or test_data_set_* folders, a JSON file, or "
    "package.module:function returning an iterable of feeds ({input name: array})"
)


def _split(items: list[str] | None) -> tuple[str, ...]:
    return tuple(v.strip() for item in items or () for v in item.split(",") if v.strip())


def _ints(items: list[str] | None) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in _split(items))
    except ValueError as err:
        raise ConfigError("--bench-batch takes integers, comma-separated or repeated.") from err


@handles_errors
def quantize_command(
    model: Annotated[Path, typer.Argument(help="The float .onnx model.", show_default=False)],
    out_path: Annotated[
        Path, typer.Option("--out", "-o", help="The .onnx file to write (only if the gate passes).")
    ],
    to: Annotated[str, flag_option("to", "--to", help=TARGET_HELP)] = "int8",
    mode: Annotated[
        str,
        flag_option(
            "mode",
            "--mode",
            help="dynamic (weights int8, activations quantised at run time; no calibration) or "
            "static (activation ranges from --calibration).",
        ),
    ] = "dynamic",
    quant_format: Annotated[
        str | None,
        flag_option(
            "format",
            "--quant-format",
            help="Static only: qdq (default; QuantizeLinear/DequantizeLinear pairs that ONNX "
            "Runtime fuses into int8 kernels) or qoperator (QLinear* operators).",
            show_default=False,
        ),
    ] = None,
    preset: Annotated[str, flag_option("preset", "--preset", help=PRESET_HELP)] = "auto",
    recipes: Annotated[
        list[str] | None,
        flag_option(
            "recipes",
            "--recipes",
            help=RECIPES_HELP + " Comma-separated or repeated.",
            show_default=False,
        ),
    ] = None,
    per_channel: Annotated[
        bool | None,
        flag_option(
            "per_channel",
            "--per-channel/--per-tensor",
            help="One scale per output channel of each weight (the presets' choice), or one per "
            "tensor.",
            show_default=False,
        ),
    ] = None,
    reduce_range: Annotated[
        bool | None,
        flag_option(
            "reduce_range", "--reduce-range/--full-range", help="7-bit weights.", show_default=False
        ),
    ] = None,
    activation_type: Annotated[
        str | None,
        flag_option(
            "activation_type",
            "--activation-type",
            help="uint8 or int8 (static).",
            show_default=False,
        ),
    ] = None,
    weight_type: Annotated[
        str | None,
        flag_option("weight_type", "--weight-type", help="int8 or uint8.", show_default=False),
    ] = None,
    op_types: Annotated[
        list[str] | None,
        flag_option(
            "op_types",
            "--op-types",
            help="Op types to quantise, comma-separated (default Conv,ConvTranspose,Gemm,MatMul, "
            "less those the mode cannot quantise: dynamic has no Gemm or ConvTranspose, "
            "qoperator no ConvTranspose; add Gather to quantise embedding tables).",
            show_default=False,
        ),
    ] = None,
    calibration: Annotated[
        str | None,
        flag_option(
            "calibration", "--calibration", help=f"Calibration data: {_DATA}.", show_default=False
        ),
    ] = None,
    method: Annotated[
        str,
        flag_option(
            "calibration_method",
            "--calibration-method",
            help="Static ranges: minmax, entropy or percentile.",
        ),
    ] = "minmax",
    eval_data: Annotated[
        str | None,
        flag_option(
            "eval",
            "--eval",
            help=f"Held-apart evaluation data, not the calibration data: {_DATA}. Without it the "
            "gate runs on synthetic inputs, with a warning.",
            show_default=False,
        ),
    ] = None,
    labels: Annotated[
        Path | None,
        flag_option(
            "labels",
            "--labels",
            help="True class of each evaluation row (.npy, .npz, .json or whitespace-separated "
            ".txt): the gate then compares label accuracy with the float model's.",
            show_default=False,
        ),
    ] = None,
    max_drop: Annotated[
        float,
        flag_option(
            "max_drop",
            "--max-drop",
            help="The budget: 1 - the mean row cosine to the float model (embeddings, any float "
            "output; each output reshaped to [rows, -1], the worst row reported beside it), 1 - "
            "top-1 agreement over all rows (class scores), or accuracy lost with --labels (0.01 = "
            "1 point). Figures are taken over all evaluation rows, however they are batched.",
        ),
    ] = 0.01,
    gate_metric: Annotated[
        str,
        flag_option(
            "gate_metric",
            "--gate-metric",
            help="auto (accuracy with --labels on class scores; top1 for [rows, classes] outputs "
            "from a Softmax or named logits/probabilities; cosine otherwise), cosine, top1 or "
            "accuracy.",
        ),
    ] = "auto",
    metric: Annotated[
        list[str] | None,
        flag_option(
            "metrics",
            "--metric",
            help="A compare rule replacing the budget for an output: [OUTPUT:]METRIC OP VALUE, "
            "e.g. logits:max_abs<=0.5 (see `compare --help`).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        list[str] | None,
        flag_option(
            "outputs",
            "--output",
            help="Outputs the gate judges (default: every float output).",
            show_default=False,
        ),
    ] = None,
    search: Annotated[
        bool,
        flag_option(
            "search",
            "--search/--no-search",
            help="When the budget is missed, rank nodes by their error alone in int8 and keep the "
            "worst in float until it is met. Nodes are ranked on the calibration data in static "
            "mode; in dynamic mode the nodes kept in float are chosen on the evaluation data, "
            "which then flatters the result a little.",
        ),
    ] = True,
    max_excluded: Annotated[
        int | None,
        flag_option(
            "max_excluded",
            "--max-excluded",
            help="The most nodes the search may keep in float (0 or more; default all but "
            "one; 0 = no node may stay in float, like --no-search).",
            show_default=False,
        ),
    ] = None,
    no_bench: Annotated[
        bool,
        flag_option(
            "bench",
            "--no-bench",
            help="Do not time float vs quantised: the speed is then not gated, and the report "
            "says so.",
        ),
    ] = False,
    allow_slower: Annotated[
        bool,
        flag_option(
            "allow_slower",
            "--allow-slower",
            help="Write the quantised model even when it is slower than the float one beyond "
            "noise (a warning, and the figures in the report and the contract's lineage). "
            "Without it such a model fails the gate: exit 1, nothing written.",
        ),
    ] = False,
    bench_budget: Annotated[
        float,
        flag_option(
            "bench_budget_s",
            "--bench-budget",
            help="Seconds of timed runs per model and shape (at least 10 runs each).",
        ),
    ] = 1.0,
    bench_batch: Annotated[
        list[str] | None,
        flag_option(
            "bench_batches",
            "--bench-batch",
            help="Batch sizes to time (default: the parent contract's batch bounds, else 1 and "
            "the evaluation batch; other dims at the evaluation data's sizes).",
            show_default=False,
        ),
    ] = None,
    bench_inputs: Annotated[
        str | None,
        flag_option(
            "bench_inputs",
            "--bench-inputs",
            help="Real data to time float vs quantised on, in the forms --eval takes (file, "
            "folder or module:function); each sample is timed at its own shape. Instead of "
            "--bench-batch.",
            show_default=False,
        ),
    ] = None,
    no_contract: Annotated[
        bool, typer.Option("--no-contract", help="Do not write the contract.")
    ] = False,
    no_second_opinion: Annotated[
        bool,
        typer.Option(
            "--no-second-opinion",
            help="Keep the contract's golden outputs (the float model's, from ONNX Runtime) "
            "without checking them with the reference evaluator, for models it cannot run; the "
            "contract records it.",
        ),
    ] = False,
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of synthetic evaluation feeds.", rich_help_panel=FEEDS),
    ] = 0,
    ops_library: OpsLibraryOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Quantise a float model to int8 (or convert it to fp16) inside an accuracy budget, or say why not.

    ONNX Runtime pre-processes the model (`quant_pre_process`; when symbolic shape inference fails,
    as on dynamo-exported transformers, again with `skip_symbolic_shape`; value_info entries
    naming weights are dropped), quantises it, and the gate compares it with the float model on
    `--eval` data. When the budget is missed, each candidate node is quantised alone and ranked
    by the error it causes (on the calibration data in static mode; on the evaluation data in
    dynamic mode, so nodes kept in float are then chosen on the evaluation data); the worst are
    kept in float until the budget is met. The gate takes its figures per row over all evaluation
    rows: the mean row cosine (worst row reported), top-1 agreement, or label accuracy.

    Speed is gated too: the model that met the budget is timed against the float model, each in a
    worker process of its own with runs interleaved, at each `--bench-batch` shape (or on each
    `--bench-inputs` sample, at its shape). A machine busy with other work while timing is timed
    again, and a verdict it still spoiled says so. It fails when
    the 90% bootstrap interval of the speed-up (float median / quantised median) lies entirely
    below 1 at any shape: slower beyond noise, exit 1, nothing written, and both models are
    profiled to name the op types whose time grew, with a hint. An interval that holds 1 is not
    slower beyond noise: it passes, with the figures. `--allow-slower` writes a slower model
    anyway, with a warning; `--no-bench` skips the timing and the report says speed was not gated.

    `--recipes auto` tries the int8 recipes that are fast on this CPU (VNNI: dynamic u8/s8
    per-channel, static QDQ on OpenVINO with percentile ranges; AVX2 without VNNI: u8/s8 with
    and without per-channel, static s8/s8), each through the accuracy gate on the runtime it
    runs on; those that pass are timed against the float model in one interleaved contest and the
    fastest is kept (ties within noise: the more accurate). The report lists every recipe, and
    says so as a reason when none beats the float model.

    The report shows every attempt, the nodes kept in float, size and latency before and after;
    the written model gets a contract naming its parent and the gates it passed (speed figures
    included), whose golden samples keep the gated outputs with the gate's rules as `verify`
    measures them.

    Examples: `onnxgate quantize model.onnx -o model.int8.onnx --eval eval.npz` ·
    `onnxgate quantize model.onnx -o q.onnx --mode static --calibration calib/ --eval eval.npz
    --labels eval_labels.npy`

    Exit codes: 0 the gates passed and the model was written; 1 the budget was missed, or the
    quantised model is slower beyond noise without --allow-slower, or a model failed to run
    (nothing written); 2 bad options or data, a model that is quantised already or has nothing to
    quantise (nothing written); 3 a missing extra or runtime.
    """
    config = build(
        QuantizeConfig,
        out=out_path,
        to=to,  # type: ignore[arg-type]
        mode=mode,  # type: ignore[arg-type]
        format=quant_format,  # type: ignore[arg-type]
        preset=preset,  # type: ignore[arg-type]
        recipes=_split(recipes),
        per_channel=per_channel,
        reduce_range=reduce_range,
        activation_type=activation_type,  # type: ignore[arg-type]
        weight_type=weight_type,  # type: ignore[arg-type]
        op_types=_split(op_types),
        calibration=calibration,
        calibration_method=method,  # type: ignore[arg-type]
        eval=eval_data,
        labels=labels,
        max_drop=max_drop,
        gate_metric=gate_metric,  # type: ignore[arg-type]
        metrics=tuple(metric or ()),
        outputs=_split(output),
        search=search,
        max_excluded=max_excluded,
        bench=not no_bench,
        bench_budget_s=bench_budget,
        bench_batches=_ints(bench_batch),
        bench_inputs=bench_inputs,
        allow_slower=allow_slower,
        contract=not no_contract,
        second_opinion=not no_second_opinion,
        seed=seed,
        ops_libraries=tuple(ops_library or ()),
    )
    run(fmt, lambda progress: quantize(model, config, progress=progress), render_text)
