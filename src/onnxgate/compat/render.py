"""The known ONNX Runtime releases (``limits_to_dict`` rows) as a table for people."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from onnxgate._rich import Lines


def render_releases(rows: list[dict[str, Any]]) -> Lines:
    """One row per release: the newest IR and opsets it loads, and whether that was measured."""
    table = Table(box=None, padding=(0, 2))
    for column in ("onnxruntime", "max IR", "ai.onnx", "ai.onnx.ml", "source"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["release"], str(row["max_ir"]), str(row["max_opsets"].get("ai.onnx", "?")),
            str(row["max_opsets"].get("ai.onnx.ml", "?")), row["source"],
        )  # fmt: skip
    return [table]
