"""``onnxgate tune MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, command_started, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FEEDS,
    FormatOpt,
    InputsOpt,
    OpsLibraryOpt,
    ProvidersOpt,
    RangeOpt,
    SeedOpt,
    build,
    feed_settings,
)
from onnxgate.errors import ConfigError
from onnxgate.perf import TuneConfig, render_tune, tune


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


@handles_errors
def tune_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    objective: Annotated[
        str,
        flag_option("objective", "--objective", help="latency (p50 at the batch) or throughput."),
    ] = "latency",
    batch: Annotated[
        int | None,
        flag_option(
            "batch",
            "--batch",
            "-b",
            help="Batch size (the first input's axis 0).",
            show_default=False,
            rich_help_panel=FEEDS,
        ),
    ] = None,
    inputs: InputsOpt = None,
    dim: Annotated[
        list[str] | None,
        typer.Option(
            "--dim",
            "-d",
            help="Size of another free dimension, NAME=SIZE or INPUT[AXIS]=SIZE for one without "
            "a name (repeatable); left out, sized by role as for bench.",
            show_default=False,
            rich_help_panel=FEEDS,
        ),
    ] = None,
    min_gain: Annotated[
        float,
        flag_option(
            "min_gain",
            "--min-gain",
            help="Smallest improvement that replaces the defaults (0.02 = 2%).",
        ),
    ] = 0.02,
    write: Annotated[
        bool,
        flag_option(
            "write",
            "--write/--no-write",
            help="Record the result in the contract (which must exist). --no-write records "
            "nothing: a contract, if there is one, still sets the gate's samples and rules; "
            "without one the gate uses compare's default tolerances.",
            flag="--no-write",
        ),
    ] = True,
    fusions: Annotated[
        bool,
        typer.Option(
            "--fusions/--no-fusions",
            help="Try graph rewrites: attention fusion (packed and multi-head) and ONNX Runtime's transformer fusions.",
        ),
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
        float,
        flag_option(
            "time_budget",
            "--budget",
            help="Seconds the whole command may take, from its start (imports and the model's "
            "load count); 0 for no limit. The parity gate stops trying graph candidates after "
            "a third of it, the search stops in time for the final contest, and the contest "
            "ends with the budget (each side once it has its minimum runs), leaving the record "
            "its time; what was skipped or cut short is noted. A budget below what the model "
            "as given costs to gate and time is noted with the least that can be kept.",
            min=0,
        ),
    ] = 600.0,
    contest_seconds: Annotated[
        float,
        flag_option(
            "contest_seconds",
            "--contest-seconds",
            help="Seconds of timed runs per side in the final contest.",
            min=0.01,
        ),
    ] = 3.0,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    providers: ProvidersOpt = None,
    ops_library: OpsLibraryOpt = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Find the fastest ONNX Runtime settings (and graph) that still give the model's answers.

    **Parity gate.** Every graph candidate (the model as given; its attention fused into ONNX
    Runtime's Attention or MultiHeadAttention; for a BERT-like encoder, ONNX Runtime's
    transformer fusions, with and without the GELU approximation) at every optimisation
    level is compared, with the contract's tolerances per output, against the model as given
    under ONNX Runtime's defaults on the tuning shape, and against the contract's stored golden
    outputs on its golden inputs (as `verify` judges them). A candidate that fails is reported
    with its worst figures and never timed. The winner's exact settings are
    checked again before the contest.

    **Search.** The passing graphs × levels, crossed with intra-op threads (1, 2, 4 ... up to the
    usable CPUs), sequential or parallel execution, thread spinning on/off and the memory arena
    and patterns on/off (provider options on CUDA/TensorRT), are searched by successive
    halving: a few runs each, the best third goes on with three times the runs.

    **Providers.** `--providers openvino` adds OpenVINO as candidates of its own, searched in
    its own settings (num_of_threads over the same thread counts, num_streams 1 and, for
    throughput, 2, precision FP32 or ACCURACY, the CPU device's PERFORMANCE_HINT LATENCY or
    THROUGHPUT through load_config) on the model as given, each gated with its exact settings
    before it is timed. It runs on the installed ONNX Runtime when that includes OpenVINO (then
    it is searched unnamed too), else on onnxruntime-openvino==1.24.1 in its isolated
    environment (built once under ONNXGATE_ENV_DIR); the search then times every candidate in a
    worker process of its runtime, so both kinds are timed alike, and the winner's runtime is
    recorded with its settings. Other providers the installed ONNX Runtime includes (cuda,
    tensorrt) run every candidate; one it lacks is an error (exit 3).

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
    one_size = [f"{name}={size}" for name, size in _dims(dim).items()]
    config = build(
        TuneConfig,
        objective=objective,
        batch=batch,
        feeds=feed_settings(inputs, one_size, value_range, seed),
        providers=tuple(
            p.strip() for item in providers or () for p in item.split(",") if p.strip()
        ),
        ops_libraries=tuple(ops_library or ()),
        min_gain=min_gain,
        write=write,
        fusions=fusions,
        threads=tuple(threads) if threads else None,
        time_budget=budget or None,
        contest_seconds=contest_seconds,
    )
    run(
        fmt,
        lambda progress: tune(model, config, progress=progress, started=command_started()),
        render_tune,
        progress="steps",
        passed=None,
    )
