"""``onnxgate inspect MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate._inspection_render import render_text
from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._options import FormatOpt
from onnxgate.inspection import inspect_model


@handles_errors
def inspect_command(
    model: Annotated[Path, typer.Argument(help="The .onnx file to describe.", show_default=False)],
    fmt: FormatOpt = Format.text,
) -> None:
    """Describe a model and name the oldest ONNX Runtime that loads it.

    IR, opsets, producer, signature with symbolic dims, op histogram, parameters, sizes, external
    data, custom domains and subgraphs. Reads only the .onnx file: weights kept in external data are located and checked, never read.

    Exit codes: 0 described; 2 the file is missing, not ONNX, truncated or unsafe.
    """
    run(fmt, lambda _: inspect_model(model), render_text, progress="none", passed=None)
