"""``onnxgate placement MODEL --providers LIST [--require PROVIDER]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FROM_FLAGS,
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
from onnxgate.placement import PlacementConfig, placement, render_text


@handles_errors
@session_options(
    "providers", "provider_options", "opt_level", "threads", "session_config", "ops_libraries"
)
def placement_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    session: SessionFlags = FROM_FLAGS,
    require: Annotated[
        str | None,
        flag_option(
            "require",
            "--require",
            help="Fail (exit 1) if any compute node is not on this provider. Memcpy nodes are not "
            "compute nodes; --allow-op exempts more op types.",
            show_default=False,
        ),
    ] = None,
    allow_op: Annotated[
        list[str] | None,
        flag_option(
            "allow_ops",
            "--allow-op",
            help="An op type allowed off the required provider (e.g. Shape, which ONNX Runtime "
            "keeps on CPU on purpose; com.microsoft:Gelu for one domain's op); repeatable.",
            show_default=False,
        ),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            help="'installed', or a release such as onnxruntime==1.20.1 or another ONNX Runtime "
            "package such as onnxruntime-openvino==1.24.1, run in an isolated environment "
            "(created once in the user cache).",
        ),
    ] = "installed",
    method: Annotated[
        str,
        flag_option(
            "method",
            "--method",
            help="auto, assignment (the partition ONNX Runtime records; 1.24 and later) or "
            "profiling (one profiled run on feeds; any release; sees only the nodes that ran).",
        ),
    ] = "auto",
    inputs: InputsOpt = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    fmt: FormatOpt = Format.text,
) -> None:
    """Which execution provider runs each node? Catch silent CPU fallback before production does.

    Counts per provider and op type, the compute nodes that fell back from the first requested
    provider, and with `--require` a verdict. ONNX Runtime appends CPU to every provider list and
    moves any node its preferred provider cannot take to CPU without an error: this command shows
    where that happened.

    Examples: `onnxgate placement model.onnx --providers cuda --require cuda` ·
    `onnxgate placement model.onnx --runtime onnxruntime==1.20.1 --method profiling` ·
    `onnxgate placement model.onnx --runtime onnxruntime-openvino==1.24.1 --providers
    openvino:precision=FP32 --require openvino`

    Exit codes: 0 placed as required (or no requirement); 1 a compute node is not on the required
    provider, or the session cannot be created; 2 bad options or inputs; 3 a requested provider
    is not in this ONNX Runtime build (the message names the package that has it) or did not
    start with the options given (the message quotes ONNX Runtime's reason).
    """
    config = build(
        PlacementConfig,
        session=session.settings(),
        require=require,
        allow_ops=tuple(allow_op or ()),
        runtime=runtime,
        method=method,
        feeds=feed_settings(inputs, dim, value_range, seed),
    )
    run(fmt, lambda progress: placement(model, config, progress=progress), render_text)
