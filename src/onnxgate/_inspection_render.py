"""A ``ModelInfo`` (``inspect``) as text for people.

Every string in a ``ModelInfo`` comes from the model file (names, domains, producer, dims) or its
path, and the model is untrusted: text is printed only through ``_shown``, which writes control
and format characters as escapes, so a name cannot restyle, retitle or clear the terminal (ESC
sequences) or reorder what is shown (bidi overrides), and through ``escape`` for rich markup.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from onnxgate._rich import Lines, line
from onnxgate.inspection import Leftover, ModelInfo
from onnxgate.model import TensorSpec

MAX_OPS = 12
"""Op types named in the histogram line before the rest are counted."""


def _printable(text: str) -> str:
    r"""``text`` with every non-printable character as its escape (``\x1b``, ``\u202e``, ``\n``)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _shown(text: str) -> str:
    """Model text made safe to print: no control characters, no rich markup."""
    return escape(_printable(text))


def _shape(spec: TensorSpec) -> str:
    if spec.shape is None:
        return "unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render_text(info: ModelInfo) -> Lines:
    """Versions, producer, sizes, the signature as a table, and the op histogram."""
    producer = " ".join(v for v in info.producer.values() if v) or "unknown"
    opsets = ", ".join(f"{d} {v}" for d, v in info.opsets.items()) or "none"
    rt = info.min_runtime
    oldest = (
        f"onnxruntime {rt['onnxruntime']} ({rt['source']})" if rt["onnxruntime"] else rt["reason"]
    )
    ext = info.external_data
    size = _size(info.size_bytes)
    if ext.tensors:
        size += (
            f" + {_size(ext.bytes)} external data in {len(ext.files)} file(s) "
            f"({ext.tensors} tensors)"
        )
    lines: Lines = [
        line(f"[bold]{_shown(info.model)}[/]"),
        line(_shown(f"  IR {info.ir_version} · opsets {opsets} · producer {producer}")),
        line(f"  {info.nodes} nodes · {info.parameters:,} parameters · {size}"),
    ]
    extras = []
    if info.subgraphs:
        extras.append(f"{info.subgraphs} subgraph(s)")
    if info.functions:
        extras.append(f"{info.functions} local function(s)")
    if info.custom_domains:
        extras.append("custom domains " + ", ".join(info.custom_domains))
    if info.initializer_inputs:
        extras.append(
            f"{len(info.initializer_inputs)} initializer(s) also listed as inputs "
            "(not counted as inputs)"
        )
    lines.extend(line(f"  {_shown(extra)}") for extra in extras)
    lines.append(line(_shown(f"  oldest ONNX Runtime that loads it: {oldest}")))
    table = Table(show_edge=False, box=None, padding=(0, 2))
    for column in ("", "name", "dtype", "shape"):
        table.add_column(column)
    for kind, specs in (("input", info.inputs), ("output", info.outputs)):
        for spec in specs:
            table.add_row(kind, _shown(spec.name), _shown(spec.dtype or "?"), _shown(_shape(spec)))
    lines.append(table)
    top = list(info.op_counts.items())
    ops = ", ".join(f"{op} {n}" for op, n in top[:MAX_OPS]) + (
        f", … {len(top) - MAX_OPS} more" if len(top) > MAX_OPS else ""
    )
    lines.append(line(f"  ops: {_shown(ops) or 'none'}"))
    lines.extend(line(_shown(leftover_line(left))) for left in info.leftovers)
    return lines


def leftover_line(left: Leftover) -> str:
    """One partial file beside the model, and what will become of it."""
    fate = (
        "its writer is gone; the next onnxgate write to this folder removes it"
        if left.stale
        else f"process {left.writer} is still writing it"
    )
    return (
        f"  leftover: {left.path} ({_size(left.bytes)}), a partial write of {left.target}: {fate}"
    )
