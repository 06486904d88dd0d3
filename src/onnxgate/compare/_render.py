"""A ``CompareReport`` as text for people: per output, then the first diverging node."""

from __future__ import annotations

from rich.markup import escape

from onnxgate._rich import Lines, line, verdict
from onnxgate.compare._report import CompareReport


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if value else "0"


def render_text(report: CompareReport) -> Lines:
    """Each output's verdict and figures, notes, the first diverging node, the verdict."""
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/]: [bold]{escape(report.candidate)}[/] (candidate) vs "
            f"[bold]{escape(report.reference)}[/] (reference), {len(report.samples)} sample(s): "
            + ", ".join(escape(s.label) for s in report.samples)
        )
    ]
    if report.value_ranges:
        lines.append(
            line(
                f"  [dim]{escape(report.data)}: "
                + "; ".join(f"{escape(k)} {escape(v)}" for k, v in report.value_ranges.items())
                + "[/]"
            )
        )
    for o in report.outputs:
        mark = "[green]ok[/]" if o.passed else "[bold red]FAIL[/]"
        lines.append(line(f"  {mark} [bold]{escape(o.name)}[/]  {escape(o.criterion)}"))
        figures = [
            f"max_abs {_fmt(o.max_abs)}",
            f"max_rel {_fmt(o.max_rel)}",
            f"mean_abs {_fmt(o.mean_abs)}",
            f"p99_abs {_fmt(o.p99_abs)}",
            f"mismatches {o.mismatches}/{o.elements}",
            f"cosine {_fmt(o.cosine, 7)}",
        ]
        if o.top1 is not None:
            figures.append(f"top1 {_fmt(o.top1)}")
        if not o.shape_equal or not o.dtype_equal:
            figures.append(
                f"{o.candidate_dtype} {o.candidate_shape} vs {o.dtype} {o.shape} (reference)"
            )
        lines.append(line("       " + "  ".join(figures)))
    for o in report.outputs:
        if o.reason:
            lines.append(
                line(
                    f"  [red]{escape(o.name)}[/]: {escape(o.reason)} "
                    f"(sample {escape(o.worst_sample or '')})"
                )
            )
        if o.nan != (0, 0) or o.inf != (0, 0):
            lines.append(
                line(
                    f"  {escape(o.name)}: NaN {o.nan[0]} vs {o.nan[1]}, inf {o.inf[0]} vs "
                    f"{o.inf[1]} (candidate vs reference)"
                )
            )
    for note in report.notes:
        lines.append(line(f"  [dim]note: {escape(note)}[/]"))
    d = report.first_divergence
    if d is not None:
        if d.found:
            lines.append(
                line(
                    f"[bold]first diverging node:[/] {escape(d.node or '')} ({d.op_type}, "
                    f"position {d.position}) on sample {escape(d.sample)}"
                )
            )
            for label, tensors in (("input", d.inputs), ("output", d.outputs)):
                for t in tensors:
                    state = "agrees" if t.agrees else "[red]differs[/]"
                    kind = " (weight)" if t.initializer else ""
                    lines.append(
                        line(
                            f"  {label} {escape(t.name)}{kind}: {state}, max_abs "
                            f"{_fmt(t.max_abs)}, mismatches {t.mismatches}/{t.elements}"
                        )
                    )
            if d.note:
                lines.append(line(f"  {escape(d.note)}"))
            if d.chain:
                lines.append(line(f"  then: {escape(' → '.join(d.chain))}"))
        else:
            lines.append(line(f"[bold]no diverging node found:[/] {escape(d.note or '')}"))
        lines.append(line(f"  [dim]method: {escape(d.method)}[/]"))
    failing = sum(not o.passed for o in report.outputs)
    lines.append(
        line(
            f"{verdict(report.passed)}  {len(report.outputs) - failing} output(s) agree, "
            f"{failing} do not"
        )
    )
    return lines
