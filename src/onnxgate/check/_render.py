"""A ``CheckReport`` as text for people (its JSON, SARIF and GitHub forms are on the report)."""

from __future__ import annotations

from rich.markup import escape

from onnxgate._rich import Lines, line, verdict
from onnxgate.check._report import CheckReport, Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render_text(report: CheckReport) -> Lines:
    """The findings with their fixes, then the verdict and the load prediction."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/] against [bold]{report.runtime}[/] on "
            f"{', '.join(report.providers)}"
        )
    ]
    for f in report.findings:
        subject = f.node or f.tensor
        where = f" [dim]({escape(subject)})[/]" if subject and subject not in f.message else ""
        lines.append(
            line(
                f"  [{_STYLE[f.severity]}]{f.severity.value:7}[/] {f.code}  "
                f"{escape(f.message)}{where}"
            )
        )
        if f.hint and f.severity != Severity.INFO:
            lines.append(line(f"           [dim]fix: {escape(f.hint)}[/]"))
    load = "loads" if report.predicted_load else "does not load"
    c = report.counts
    lines.append(
        line(
            f"{verdict(report.passed)}  {c['error']} error(s), {c['warning']} warning(s), "
            f"{c['info']} note(s); predicted: {load} on {report.runtime}"
        )
    )
    return lines
