"""``onnxgate inspect MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from onnxgate.cli._common import FORMAT_HELP, Format, emit_json, handles_errors, out
from onnxgate.inspection import ModelInfo, inspect_model
from onnxgate.model import TensorSpec


def _shape(spec: TensorSpec) -> str:
    if spec.shape is None:
        return "unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render(info: ModelInfo) -> None:
    """Print a model description for people."""
    producer = " ".join(v for v in info.producer.values() if v) or "unknown"
    opsets = ", ".join(f"{d} {v}" for d, v in info.opsets.items()) or "none"
    rt = info.min_runtime
    oldest = (
        f"onnxruntime {rt['onnxruntime']} ({rt['source']})" if rt["onnxruntime"] else rt["reason"]
    )
    out.print(f"[bold]{escape(info.model)}[/]")
    out.print(escape(f"  IR {info.ir_version} · opsets {opsets} · producer {producer}"))
    ext = info.external_data
    size = _size(info.size_bytes)
    if ext.tensors:
        size += f" + {_size(ext.bytes)} external data in {len(ext.files)} file(s) ({ext.tensors} tensors)"
    out.print(f"  {info.nodes} nodes · {info.parameters:,} parameters · {size}")
    extras = []
    if info.subgraphs:
        extras.append(f"{info.subgraphs} subgraph(s)")
    if info.functions:
        extras.append(f"{info.functions} local function(s)")
    if info.custom_domains:
        extras.append("custom domains " + ", ".join(info.custom_domains))
    if info.initializer_inputs:
        extras.append(
            f"{len(info.initializer_inputs)} initializer(s) also listed as inputs (not counted as inputs)"
        )
    for line in extras:
        out.print(f"  {escape(line)}")
    out.print(escape(f"  oldest ONNX Runtime that loads it: {oldest}"))
    table = Table(show_edge=False, box=None, padding=(0, 2))
    for column in ("", "name", "dtype", "shape"):
        table.add_column(column)
    for kind, specs in (("input", info.inputs), ("output", info.outputs)):
        for spec in specs:
            table.add_row(kind, escape(spec.name), escape(spec.dtype or "?"), escape(_shape(spec)))
    out.print(table)
    top = list(info.op_counts.items())
    ops = ", ".join(f"{op} {n}" for op, n in top[:12]) + (
        f", … {len(top) - 12} more" if len(top) > 12 else ""
    )
    out.print(f"  ops: {escape(ops) or 'none'}")


@handles_errors
def inspect_command(
    model: Annotated[Path, typer.Argument(help="The .onnx file to describe.", show_default=False)],
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Describe a model and name the oldest ONNX Runtime that loads it.

    IR, opsets, producer, signature with symbolic dims, op histogram, parameters, sizes, external
    data, custom domains and subgraphs. Reads only the .onnx file: weights kept in external data are located and checked, never read.

    Exit codes: 0 described; 2 the file is missing, not ONNX, truncated or unsafe.
    """
    info = inspect_model(model)
    if fmt == Format.json:
        emit_json(info.model_dump(mode="json"))
    else:
        render(info)
