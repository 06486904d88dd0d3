"""The gate's text output: one line per step as it finishes, then the verdict."""

from __future__ import annotations

from rich.markup import escape

from onnxgate._rich import Lines, line
from onnxgate.gate._report import GateReport, StepResult

_MARK = {
    "passed": "[green]✔ passed[/]",
    "failed": "[bold red]✘ failed[/]",
    "error": "[bold red]✘ error [/]",
    "inconclusive": "[yellow]? inconclusive[/]",
    "not_run": "[dim]· not run[/]",
}
_INDENT = " " * 29


def render_step(result: StepResult) -> Lines:
    """``✔ passed  verify       4.1s  golden samples pass on ...``, and why a step failed."""
    seconds = "cached" if result.cached else f"{result.seconds:.1f}s"
    text = (result.reason if result.status == "not_run" else result.summary) or result.reason or ""
    lines = [line(f"{_MARK[result.status]}  {result.name:<9} {seconds:>7}  {escape(text)}")]
    if (
        result.status in ("failed", "error", "inconclusive")
        and result.reason
        and result.reason != text
    ):
        lines += [line(f"{_INDENT}[dim]{escape(r)}[/]") for r in result.reason.splitlines()[:8]]
    return lines


def render_text(report: GateReport) -> Lines:
    """The verdict, where the run folder is, and what was registered."""
    failed = report.failed_steps
    unsure = report.inconclusive_steps
    verdict = (
        "[bold green]GATE PASSED[/]"
        if report.passed
        else f"[bold red]GATE FAILED[/] at {', '.join(failed) or 'export'}"
    )
    if unsure and report.passed:
        verdict += (
            f" [yellow]with {len(unsure)} inconclusive step(s): {', '.join(unsure)}[/] "
            '(timings spoiled by other load; on_unreliable = "warn")'
        )
    lines = [
        line(),
        line(f"{verdict}  {escape(report.name)}  ({report.seconds:.0f} s)"),
        line(f"run folder: {escape(report.run_dir)}  (report.html, report.json, junit.xml)"),
    ]
    if report.registered is not None:
        r = report.registered
        alias = f" as {escape(r.name)}@{', '.join(r.aliases)}" if r.aliases else ""
        lines.append(
            line(f"registered: {escape(r.name)} version {r.version}{alias} in {escape(r.registry)}")
        )
        if (m := r.mlflow) is not None:
            moved = f", {escape(m.name)}@{m.alias}" if m.alias_moved else ""
            lines.append(
                line(
                    f"published: models:/{escape(m.name)}/{m.version}{moved} on {escape(m.tracking_uri)}"
                )
            )
    elif report.passed:
        lines.append(
            line(f"[dim]not registered: no {escape('[register]')} table, or --no-register[/]")
        )
    return lines
