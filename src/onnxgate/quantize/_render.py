"""A ``QuantizeReport`` as text for people: every attempt, size, speed, and the verdict."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from onnxgate._rich import Lines, line
from onnxgate._words import setting
from onnxgate.quantize._report import QuantizeReport
from onnxgate.quantize._speed import growth_text, shape_text


def _mb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e6:.1f} MB"


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def render_text(report: QuantizeReport) -> Lines:
    """Settings, data, each attempt's figures, float nodes, size, latency, speed, verdict."""
    lines = _header(report)
    lines.extend(_attempts(report))
    lines.extend(_kept_in_float(report))
    lines.extend(_size_and_latency(report))
    lines.extend(_speed(report))
    lines.extend(_candidates(report))
    for warning in report.warnings:
        lines.append(line(f"[yellow]warning:[/] {escape(warning)}"))
    lines.extend(_verdict(report))
    return lines


def _header(report: QuantizeReport) -> Lines:
    """The settings, the notices, and the calibration and evaluation data."""
    s = report.settings
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/]: {s.to} (every float node; inputs and outputs float32)"
        )
        if s.to != "int8"
        else line(
            f"[bold]{escape(report.model)}[/]: {s.mode} int8 ({s.format}, preset {s.preset}, "
            f"activations {s.activation_type}, weights {s.weight_type}"
            f"{' per-channel' if s.per_channel else ''}{', 7-bit' if s.reduce_range else ''}, "
            f"op types {','.join(s.op_types)}"
            + (f", recipe {s.recipe}" if s.recipe else "")
            + (", fused graph" if s.fused else "")
            + (f", runs on {','.join(s.providers)}" if s.providers else "")
            + (f" of {s.runtime}" if s.runtime else "")
            + ")"
        )
    ]
    for notice in report.notices:
        lines.append(line(f"  [yellow]notice:[/] {escape(notice)}"))
    if report.calibration:
        c = report.calibration
        lines.append(
            line(
                f"  calibration: {escape(c.source)} ({c.samples} sample(s), {c.rows} row(s)), "
                f"method {s.calibration_method}"
            )
        )
    e = report.evaluation
    lines.append(
        line(
            f"  evaluation: {escape(e.source)} ({e.samples} sample(s), {e.rows} row(s)); "
            f"overlap with calibration: {report.overlap_rows} row(s)"
        )
    )
    return lines


def _attempts(report: QuantizeReport) -> Lines:
    """One table row per attempt and output: its figures against the budget."""
    lines: Lines = []
    table = Table(box=None, header_style="bold", pad_edge=False)
    figures = [f for a in report.attempts for f in a.figures]
    with_float = any(f.reference is not None for f in figures)
    columns = ["float nodes", "output", "rule", "value", "float", "drop", "worst row", "verdict"]
    if not with_float:
        columns.remove("float")
    for column in columns:
        table.add_column(column, justify="left" if column in ("output", "rule") else "right")
    for attempt in report.attempts:
        for index, f in enumerate(attempt.figures):
            worst = "-" if f.worst is None else f"{f.worst:.4f} #{f.worst_row}"
            cells = [
                str(len(attempt.excluded)) if index == 0 else "",
                escape(f.output),
                escape(f.rule),
                _figure(f.value),
                *([_figure(f.reference)] if with_float else []),
                _figure(f.drop),
                worst,
                "[green]ok[/]" if f.passed else "[red]miss[/]",
            ]
            table.add_row(*cells)
    lines.append(table)
    lines.append(
        line(
            "  cosine: the mean over all evaluation rows of each row's cosine to the float model "
            "(the budget), and the worst row; top1: the share of all rows whose argmax agrees"
        )
    )
    return lines


def _kept_in_float(report: QuantizeReport) -> Lines:
    """The nodes ranked for float, those kept in float, and the quantisable ops left in float."""
    lines: Lines = []
    low, high = ("int8", "float") if report.settings.to == "int8" else (report.settings.to, "fp32")
    if report.ranking:
        worst = ", ".join(
            f"{escape(r.node)} {r.score:.2g}" + (f" (cost {r.cost:.2g})" if r.cost > 1 else "")
            for r in report.ranking[:5]
        )
        lines.append(
            line(
                f"  first nodes to keep in {high} (most error alone in {low}; near-ties by cost; "
                f"1 - mean row cosine, ranked on the {report.ranked_on} data): {worst}"
            )
        )
    if report.excluded:
        lines.append(
            line(
                f"  kept in {high} ({len(report.excluded)}): "
                + ", ".join(f"{escape(n.node)} ({n.op_type})" for n in report.excluded)
            )
        )
    if report.float_ops:
        lines.append(
            line(
                f"  {'quantisable ops' if low == 'int8' else 'nodes'} left in {high}: "
                + ", ".join(f"{op} {n}" for op, n in report.float_ops.items())
            )
        )
    return lines


def _size_and_latency(report: QuantizeReport) -> Lines:
    """The size before and after, and the latency at each measured shape."""
    lines: Lines = []
    ratio = f" (x{report.size_ratio:.2f})" if report.size_ratio is not None else ""
    counted = "integer/conversion node(s)" if report.settings.to == "int8" else "node(s) in float16"
    lines.append(
        line(
            f"  size: {_mb(report.size_before)} -> {_mb(report.size_after)}{ratio}; "
            f"{report.quantized_nodes} {counted}"
        )
    )
    for row in report.latency:
        price = (
            f" (all {report.settings.to}: {row.all_int8_ms:.3g} ms)"
            if row.all_int8_ms is not None
            else ""
        )
        low, high = row.interval or (row.speedup, row.speedup)
        verdict = {"slower": "[red]slower[/]", "faster": "[green]faster[/]"}.get(
            row.verdict or "", row.verdict or ""
        )
        lines.append(
            line(
                f"  latency at {escape(shape_text(row.dims))}: {row.float_ms:.3g} ms -> "
                f"{row.quantized_ms:.3g} ms (x{row.speedup:.2f}, 90% interval "
                f"{low:.2f}-{high:.2f}, {verdict}; {row.float_runs} float and "
                f"{row.quantized_runs} quantised runs){price}"
                f"{' [yellow]noisy[/]' if row.noisy else ''}"
            )
        )
    return lines


def _verdict(report: QuantizeReport) -> Lines:
    """PASS with what was written and how speed was judged, or FAIL with the reason."""
    lines: Lines = []
    if report.passed:
        written = f"wrote {escape(report.out or '')}"
        if report.contract:
            written += f" and {escape(Path(report.contract).name)}"
        speed = (
            "speed not gated"
            if not report.speed.gated
            else f"slower on this CPU (expected of {report.settings.to}, not refused)"
            if report.speed.verdict == "slower" and report.settings.to != "int8"
            else f"slower, allowed ({setting('allow_slower', True)})"
            if report.speed.verdict == "slower"
            else "speed unreliable, not judged"
            if report.speed.verdict == "inconclusive"
            else f"speed {report.speed.verdict}"
        )
        lines.append(
            line(
                f"[bold green]PASS[/]  within the budget (max drop {report.max_drop:g}), "
                f"{speed}; {written}"
            )
        )
    else:
        lines.append(
            line(
                f"[bold red]FAIL[/]  {escape(report.reason or 'the budget was missed')}; "
                "nothing written"
            )
        )
    return lines


def _speed(report: QuantizeReport) -> Lines:
    """The speed gate's verdict and, when slower, where the time went."""
    speed = report.speed
    gain = [line(f"  [bold]where it pays:[/] {escape(report.gain)}")] if report.gain else []
    if not speed.gated:
        return [line(f"  speed: [yellow]{escape(speed.note)}[/]"), *gain]
    colour = {"slower": "red", "faster": "green", "inconclusive": "yellow"}.get(
        speed.verdict or "", "default"
    )
    lines: Lines = [
        line(f"  speed: [{colour}]{escape(speed.note)}[/]"),
        line(f"    ({escape(speed.method)})"),
        *gain,
    ]
    cost = speed.cost
    if cost is None:
        return lines
    lines.append(
        line(
            f"  where the time goes (ONNX Runtime's profiler at {escape(shape_text(cost.dims))}, "
            f"{cost.runs} runs): per run {cost.float_run_ms:.3g} ms float -> "
            f"{cost.quantized_run_ms:.3g} ms quantised, of which kernels {cost.float_ms:.3g} ms "
            f"-> {cost.quantized_ms:.3g} ms"
            + ("; grown most:" if cost.grown else "; no op type's kernel time grew")
        )
    )
    for growth in cost.grown:
        lines.append(line(f"    {escape(growth_text(growth))}"))
    if cost.nodes:
        lines.append(line("  slowest quantised nodes:"))
        for node in cost.nodes:
            shapes = f"{', '.join(node.inputs)} -> {', '.join(node.outputs)}"
            lines.append(
                line(
                    f"    {escape(node.node)} ({node.op_type}) {node.ms:.3g} ms "
                    f"({node.share:.0%}): {escape(shapes)}"
                )
            )
    lines.append(line(f"  [bold]hint:[/] {escape(cost.hint)}"))
    return lines


def _candidates(report: QuantizeReport) -> Lines:
    """One line per int8 recipe tried: accuracy, size, speed against float, kept or why not."""
    if not report.candidates:
        return []
    lines: Lines = [
        line(
            "  int8 recipes tried (cosine: the mean row cosine of the worst output, and its worst "
            "row; speed-up: float median / recipe median, geometric mean over the shapes, all "
            "in one contest):"
        )
    ]
    for c in report.candidates:
        figures = []
        if c.error is not None or c.passed_accuracy:
            figures.append(
                ("[green]met the budget[/]" if c.passed_accuracy else "[red]missed the budget[/]")
                + ("" if c.error is None else f", cosine {1 - c.error:.4f}")
                + ("" if c.worst_cosine is None else f", worst row {c.worst_cosine:.4f}")
                + (f", {c.kept_in_float} node(s) in float" if c.kept_in_float else "")
            )
        if c.size_ratio is not None:
            figures.append(f"{_mb(c.size_bytes)} (x{c.size_ratio:.2f} of float)")
        if c.speedup is not None:
            figures.append(f"x{c.speedup:.2f} vs float ({c.verdict})")
        name = f"[bold]{escape(c.recipe)}[/]" if c.chosen else escape(c.recipe)
        lines.append(line(f"    {name} ({escape(c.where)}): {'; '.join(figures)}"))
        lines.append(line(f"      {escape(c.why)}"))
    return lines
