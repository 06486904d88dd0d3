"""``onnxgate runtimes``: what each ONNX Runtime release loads, and probing a new one."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out, progress_line
from onnxgate.compat.runtime import runtime_profile
from onnxgate.compat.versions import known_limits, limits_to_dict


@handles_errors
def runtimes_command(
    probe: Annotated[
        list[str] | None,
        typer.Option(
            "--probe",
            help="Also probe these releases (onnxruntime==X.Y.Z or 'installed') in isolated "
            "environments and include their measured limits.",
        ),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """List the IR and opset limits of every known ONNX Runtime release.

    Rows marked 'probed' were measured by loading one-node models in that release; 'published'
    rows come from ONNX Runtime's compatibility table (1.0 to 1.20), used only where no
    measurement exists.

    Exit codes: 0 listed; 2 a malformed spec; 3 a release could not be installed or probed.
    """
    extra = []
    with progress_line(fmt == Format.text) as progress:
        for spec in probe or []:
            extra.append(runtime_profile(spec, progress=progress).limits())
    rows = [limits_to_dict(limits) for limits in known_limits(tuple(extra))]
    if fmt == Format.json:
        emit_json({"releases": rows})
        return
    table = Table(box=None, padding=(0, 2))
    for column in ("onnxruntime", "max IR", "ai.onnx", "ai.onnx.ml", "source"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["release"], str(row["max_ir"]), str(row["max_opsets"].get("ai.onnx", "?")),
            str(row["max_opsets"].get("ai.onnx.ml", "?")), row["source"],
        )  # fmt: skip
    out.print(table)
