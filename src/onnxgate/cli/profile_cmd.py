"""``onnxgate profile MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FEEDS,
    FROM_FLAGS,
    OUTPUT,
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
from onnxgate.perf import ProfileConfig, profile, render_profile


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


@handles_errors
@session_options(
    "providers", "provider_options", "opt_level", "threads", "session_config", "ops_libraries"
)
def profile_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    top: Annotated[
        int, flag_option("top", "--top", "-n", help="Slowest nodes to list; 0 lists every node.")
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
        flag_option(
            "trace",
            "--trace",
            help="Keep ONNX Runtime's Chrome trace (every run, warm-up included) at this path; "
            "without it the trace is deleted.",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    inputs: InputsOpt = None,
    batch: Annotated[
        int | None,
        typer.Option(
            "--batch",
            "-b",
            help="Batch size (the first input's axis 0).",
            show_default=False,
            rich_help_panel=FEEDS,
        ),
    ] = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    session: SessionFlags = FROM_FLAGS,
    fmt: FormatOpt = Format.text,
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
    feeds = feed_settings(inputs, dim, value_range, seed)
    _one_size(feeds.sizes())
    config = build(
        ProfileConfig,
        feeds=feeds,
        batch=batch,
        session=session.settings(),
        warmup=warmup,
        runs=runs,
        top=top,
        trace=trace,
    )
    run(
        fmt,
        lambda progress: profile(model, config, progress=progress),
        render_profile,
        progress="steps",
        passed=None,
    )
