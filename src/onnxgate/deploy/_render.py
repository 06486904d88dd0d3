"""Text renderers of ``deploy triton``, ``check`` and ``kserve`` (they return lines, print nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from onnxgate._rich import Lines, line, verdict
from onnxgate.deploy._findings import Finding, RepositoryCheck

if TYPE_CHECKING:
    from onnxgate.deploy._kserve import KServeReport
    from onnxgate.deploy._triton import DeployReport

_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def _findings(findings: list[Finding]) -> Lines:
    lines: Lines = []
    for f in findings:
        style = _STYLE[f.severity]
        lines.append(
            line(f"  [{style}]{f.severity:<7}[/] {f.code}  {escape(f.where)}: {escape(f.message)}")
        )
        if f.hint:
            lines.append(line(f"           [dim]{escape(f.hint)}[/]"))
    return lines


def _notes(notes: list[str]) -> Lines:
    return [line(f"  [dim]note:[/] {escape(note)}") for note in notes]


def _written(text: str) -> Lines:
    """A file as written (config.pbtxt, the manifest), indented."""
    return [line(f"    [cyan]{escape(row)}[/]") for row in text.rstrip().splitlines()]


def render_check(report: RepositoryCheck) -> Lines:
    """Each finding, then the verdict."""
    errors = sum(f.severity == "error" for f in report.findings)
    lines: Lines = [
        line(f"[bold]{escape(report.repository)}[/]: {len(report.models)} model folder(s)")
    ]
    lines += _findings(report.findings)
    lines.append(
        line(
            f"{verdict(report.passed)}  "
            + (f"{errors} error(s)" if errors else "every config agrees with its model")
        )
    )
    return lines


def render_kserve(report: KServeReport) -> Lines:
    """The manifest as YAML (what `kubectl apply -f` takes), where it went, and the verdict."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.source)}[/] → InferenceService {escape(report.name)} "
            f"({escape(report.gate)}); built with kserve {escape(report.kserve)}'s types"
        )
    ]
    lines += _notes(report.notes)
    lines += _written(report.yaml)
    where = f"wrote {escape(report.written)}" if report.written else "not written (pass --out)"
    lines.append(line(f"{verdict(report.passed)}  {where}"))
    return lines


def render_triton(report: DeployReport) -> Lines:
    """The repository written, its config.pbtxt, the checks and the verdict."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.source)}[/] → {escape(report.model_dir)}/{report.version} "
            f"({escape(report.gate)})"
        )
    ]
    lines += _notes(report.notes)
    if report.kept_versions:
        kept = ", ".join(str(v) for v in report.kept_versions)
        lines.append(line(f"  kept versions already there: {kept}"))
    lines.append(line(f"  wrote {len(report.files)} file(s); config.pbtxt:"))
    lines += _written(report.config)
    lines += _findings(report.findings)
    lines.append(
        line(
            f"{verdict(report.passed)}  "
            + (
                "the config agrees with the model and its contract (deploy check)"
                if report.passed
                else "deploy check found errors in what was written"
            )
        )
    )
    return lines
