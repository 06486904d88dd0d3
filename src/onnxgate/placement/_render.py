"""A ``PlacementReport`` as text for people: nodes per provider, what fell back, the verdict."""

from __future__ import annotations

from collections import Counter

from rich.markup import escape

from onnxgate._rich import Lines, line
from onnxgate.placement._placement import MEMCPY, NodePlacement, PlacementReport

MAX_LISTED = 8
"""Nodes listed by name before the rest are counted (``--format json`` lists all)."""


def _node(n: NodePlacement) -> str:
    kind = n.op_type if n.qualified_op == n.op_type else f"{n.op_type}, {n.domain}"
    return f"{escape(n.node or '(unnamed)')} ({escape(kind)})"


def _verdict(report: PlacementReport) -> str:
    required = report.required
    ran = report.method == "profiling"
    if not report.passed:
        return f"[bold red]FAIL[/]  {len(report.violations)} compute node(s) are not on {required}"
    if not report.exempted:
        scope = "that ran on these feeds " if ran else ""
        return f"[bold green]PASS[/]  every compute node {scope}is on {required}"
    on = sum(1 for n in report.nodes if n.provider == required and n.op_type not in MEMCPY)
    kinds = sorted({n.qualified_op for n in report.exempted})
    return (
        f"[bold green]PASS[/]  {on} compute node(s) on {required}; {len(report.exempted)} "
        f"exempted by --allow-op (op types {escape(', '.join(kinds))})"
        + (", of the nodes that ran on these feeds" if ran else "")
    )


def render_text(report: PlacementReport) -> Lines:
    """Counts per provider and op type, the nodes off the first provider, and the verdict."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/] on {report.runtime}, requested "
            f"{', '.join(report.requested)} (method: {report.method})"
        )
    ]
    for provider, count in sorted(report.assignments.items(), key=lambda kv: -kv[1]):
        ops = ", ".join(f"{op} {n}" for op, n in report.op_types[provider].items())
        lines.append(line(f"  [bold]{provider}[/]: {count} node(s): {escape(ops)}"))
    if report.memcpy:
        lines.append(line(f"  {report.memcpy} Memcpy node(s) copy tensors between providers"))
    if report.fallback:
        lines.append(
            line(
                f"[yellow]{len(report.fallback)} compute node(s) are not on "
                f"{report.requested[0]}:[/]"
            )
        )
        if len(report.fallback) > MAX_LISTED:
            kinds = Counter(n.qualified_op for n in report.fallback)
            by_type = ", ".join(f"{op} {k}" for op, k in kinds.most_common())
            lines.append(line(f"  by op type: {escape(by_type)}"))
        for n in report.fallback[:MAX_LISTED]:
            lines.append(line(f"  {_node(n)} → {n.provider}"))
        if len(report.fallback) > MAX_LISTED:
            lines.append(
                line(
                    f"  ... and {len(report.fallback) - MAX_LISTED} more (--format json lists all)"
                )
            )
    if report.violations and report.required != report.requested[0]:
        # the fallback list above is against the first provider; name what --require rejects
        lines.append(line(f"[red]not on {report.required}:[/]"))
        for n in report.violations[:MAX_LISTED]:
            lines.append(line(f"  {_node(n)} → {n.provider}"))
        if len(report.violations) > MAX_LISTED:
            lines.append(line(f"  ... and {len(report.violations) - MAX_LISTED} more"))
    for note in report.notes:
        lines.append(line(f"  [dim]note: {escape(note)}[/]"))
    if report.required:
        lines.append(line(_verdict(report)))
    return lines
