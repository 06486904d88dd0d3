"""Text of ``deploy mobile`` (lines, printed by the caller)."""

from __future__ import annotations

from rich.markup import escape

from onnxgate._rich import Lines, line, verdict
from onnxgate.mobile._target import MobileReport


def render_mobile(report: MobileReport) -> Lines:
    """What was written, the proof, the figures, the budgets and the verdict."""
    where = f"{escape(report.source)} ({escape(report.gate)})" if report.source else ""
    lines: Lines = [
        line(
            f"[bold]{escape(where or report.model)}[/] → {escape(report.out)} "
            f"(ORT format, {report.optimization_style}, {escape(report.runtime)})"
        )
    ]
    for name in report.files:
        lines.append(line(f"  wrote [cyan]{escape(name)}[/]"))
    ops = sum(len(v) for v in report.operators.values())
    domains = ", ".join(escape(k) for k in report.operators)
    lines.append(line(f"  operators: {ops} in {domains}"))
    lines.append(line(f"  size: .onnx {report.onnx_mb:.3f} MB, .ort {report.ort_mb:.3f} MB"))
    lines.append(line(f"  golden samples on the .ort file: {escape(report.parity)}"))
    if report.peak_rss_mb is not None:
        lines.append(
            line(
                f"  peak RSS running the golden samples: {report.model_rss_mb:.1f} MB the "
                f"model's share ({report.peak_rss_mb:.1f} MB the whole process, "
                f"{report.baseline_rss_mb:.1f} MB before the session)"
            )
        )
    if report.p50_ms:
        shown = ", ".join(f"{escape(k)} {v:.3f} ms" for k, v in report.p50_ms.items())
        lines.append(line(f"  single-thread p50: {shown}"))
    if report.unreliable:
        lines.append(
            line(f"  [yellow]timings unreliable:[/] {escape('; '.join(report.unreliable))}")
        )
    lines += [line(f"  [dim]note:[/] {escape(note)}") for note in report.notes]
    lines += [line(f"  [red]budget missed:[/] {escape(m)}") for m in report.misses]
    lines += [line(f"  [yellow]undecided:[/] {escape(u)}") for u in report.undecided]
    if report.inconclusive:
        lines.append(line("[yellow]INCONCLUSIVE[/]  a p50 budget hangs on timings load spoiled"))
    else:
        lines.append(
            line(
                f"{verdict(report.passed)}  "
                + (
                    "the .ort file holds the contract and its budgets"
                    if report.passed
                    else "; ".join(escape(m) for m in report.misses)
                )
            )
        )
    return lines
