"""Text of the web target (``deploy web``; lines, printed by the caller)."""

from __future__ import annotations

from rich.markup import escape

from onnxgate._rich import Lines, line, verdict
from onnxgate.web._target import WebReport


def render_web(report: WebReport) -> Lines:
    """What was written, the browser's proof (runtime, backend, threads), size and verdict."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.source)}[/]"
            + (f" ({escape(report.gate)})" if report.gate else "")
            + f" → {escape(report.out)} "
            f"({report.model_format}, {report.size_mb:.3f} MB)"
        )
    ]
    where = "wrote" if report.written else "[dim]not written[/]"
    lines += [line(f"  {where} [cyan]{escape(name)}[/]") for name in report.files]
    lines.append(
        line(
            f"  ran on {escape(report.runtime)} in Chromium: backend {escape(report.backend)}, "
            f"{report.threads} thread(s)"
            + (
                ""
                if report.cross_origin_isolated is None
                else f", cross-origin isolated {str(report.cross_origin_isolated).lower()}"
            )
        )
    )
    lines.append(line(f"  golden samples in the browser: {escape(report.parity)}"))
    lines += [line(f"  [dim]note:[/] {escape(note)}") for note in report.notes]
    lines.append(
        line(
            f"{verdict(report.passed)}  "
            + (
                "the browser runs the written model within the contract's rules"
                if report.passed
                else "the browser breaks the contract; nothing was written"
            )
        )
    )
    return lines
