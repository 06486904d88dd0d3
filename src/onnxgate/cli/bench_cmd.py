"""``onnxgate bench MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FEEDS,
    FROM_FLAGS,
    SESSION,
    DimOpt,
    FormatOpt,
    InputsOpt,
    RangeOpt,
    SeedOpt,
    SessionFlags,
    build,
    feed_settings,
    session_options,
)
from onnxgate.errors import ConfigError
from onnxgate.perf import BenchConfig, bench, render_bench


def _ints(items: list[str] | None, option: str) -> list[int]:
    try:
        return [int(v) for item in items or () for v in item.split(",") if v.strip()]
    except ValueError as err:
        raise ConfigError(f"{option} takes integers, comma-separated or repeated.") from err


@handles_errors
@session_options(
    "providers",
    "provider_options",
    "opt_level",
    "inter_op_threads",
    "parallel",
    "cpu_mem_arena",
    "session_config",
    "ops_libraries",
)
def bench_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    batch: Annotated[
        list[str] | None,
        flag_option(
            "batches",
            "--batch",
            "-b",
            help="Batch sizes, e.g. 1,8,32 (the first input's axis 0).",
            show_default=False,
            rich_help_panel=FEEDS,
        ),
    ] = None,
    inputs: InputsOpt = None,
    dim: DimOpt = None,
    threads: Annotated[
        list[str] | None,
        flag_option(
            "threads",
            "--threads",
            help="Intra-op thread counts to sweep, e.g. 1,2 (0 lets ONNX Runtime choose).",
            show_default=False,
            rich_help_panel=SESSION,
        ),
    ] = None,
    warmup: Annotated[
        int, flag_option("warmup", "--warmup", help="Runs before timing starts, not counted.")
    ] = 10,
    runs: Annotated[
        int | None,
        flag_option(
            "runs",
            "--runs",
            help="Timed runs per configuration (default: as many as --budget allows, at least 10).",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        float, flag_option("budget", "--budget", help="Seconds of timed runs per configuration.")
    ] = 2.0,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    vs: Annotated[
        str | None,
        flag_option(
            "vs",
            "--vs",
            help="A contender on the same inputs: torch:package.module:factory (a PyTorch "
            "module, run under inference_mode with the same thread count) or OTHER.onnx (same "
            "session options). Both sides run in worker processes of their own, interleaved.",
            show_default=False,
        ),
    ] = None,
    tuned: Annotated[
        bool,
        flag_option(
            "tuned",
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
    session: SessionFlags = FROM_FLAGS,
    timeout: Annotated[
        float,
        flag_option("timeout", "--timeout", help="Seconds a --vs worker may take for one answer."),
    ] = 600.0,
    fmt: FormatOpt = Format.text,
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
    settings = session.settings()  # first, as the session flags have always been refused
    config = build(
        BenchConfig,
        batches=tuple(_ints(batch, "--batch")),
        feeds=feed_settings(inputs, dim, value_range, seed),
        threads=tuple(_ints(threads, "--threads")),
        warmup=warmup,
        runs=runs,
        budget=budget,
        session=settings,
        vs=vs,
        tuned=tuned,
        objective=objective,
        timeout=timeout,
        runtime=runtime,
    )
    run(
        fmt,
        lambda progress: bench(model, config, progress=progress),
        render_bench,
        progress="bar",
        passed=None,
    )
