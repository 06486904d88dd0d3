"""``BenchReport``, ``TuneReport`` and ``ProfileReport`` as text for people."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from onnxgate._rich import Lines, Unclipped, line
from onnxgate.contract import Timing
from onnxgate.perf._bench_records import BenchReport
from onnxgate.perf._profile import ProfileReport, TimeShare
from onnxgate.perf._tune import TuneReport


def _ms(value: float) -> str:
    """Four significant figures at most, three decimals at most: 0.012, 26.31, 189.5."""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def render_bench(report: BenchReport) -> Lines:
    """The figures per configuration; with a contender, both sides' rows and the ratio."""
    providers = ", ".join(report.providers)
    lines: Lines = [
        line(f"[bold]{escape(report.model)}[/] on {escape(report.runtime)} ({escape(providers)})")
    ]
    if report.vs is not None:
        lines.append(
            line(f"against [bold]{escape(report.vs.name)}[/] on {escape(report.vs.runtime)}")
        )
    timed: dict[str, str] = {}
    for r in report.results:
        label = ",".join(f"{k}={v}" for k, v in r.dims.items()) or "fixed"
        timed.setdefault(
            label, ", ".join(f"{k}[{','.join(map(str, s))}]" for k, s in r.shapes.items())
        )
    for label, shapes in timed.items():
        lines.append(line(f"[dim]inputs at {escape(label)}:[/] {escape(shapes)}"))
    table = Table(box=None, header_style="bold", pad_edge=False)
    # short headers (latencies in ms, said below the table) so --vs fits 80 columns
    columns = ["shape", "threads", "runs", "p50", "p90", "p99", "mean", "samples/s", "cv"]
    if report.vs is not None:
        columns[0:0] = ["side"]
        columns.append("ratio")
    for column in columns:
        table.add_column(
            column, justify="left" if column in ("shape", "side") else "right", no_wrap=True
        )
    rows = [(r, "model") for r in report.results]
    if report.vs is not None:
        rows = [
            row
            for ours, theirs in zip(report.results, report.vs.results, strict=True)
            for row in ((ours, "model"), (theirs, "vs"))
        ]
    for index, (r, side) in enumerate(rows):
        shape = ",".join(f"{k}={v}" for k, v in r.dims.items()) or "fixed"
        cells = [
            escape(shape),
            str(r.threads or "auto"),
            str(r.runs),
            _ms(r.p50_ms),
            _ms(r.p90_ms),
            _ms(r.p99_ms),
            _ms(r.mean_ms),
            f"{r.throughput:.1f}",
            ("[yellow]" if r.noisy else "") + f"{r.cv:.1%}" + ("[/]" if r.noisy else ""),
        ]
        if report.vs is not None:
            ratio = report.ratio[index // 2]
            cells = [side, *cells, _ratio(ratio.ratio, ratio.reliable) if side == "vs" else ""]
        table.add_row(*cells)
    lines.append(Unclipped(table))
    lines.append(line("[dim]latencies in ms; samples/s at the mean latency.[/]"))
    if report.vs is not None:
        lines.append(
            line(
                "[dim]ratio: the contender's p50 over the model's (above 1: the model is "
                f"faster). {escape(report.method)}.[/]"
            )
        )
        if any(not r.reliable for r in report.ratio):
            lines.append(
                line(
                    "[yellow]ratio?: unreliable ("
                    + escape("; ".join(report.doubts))
                    + "): a figure the machine gave, not a measurement of the model[/]"
                )
            )
    for note in report.notes:
        lines.append(line(f"[dim]note:[/] {escape(note)}"))
    for warning in report.warnings:
        lines.append(line(f"[yellow]warning:[/] {escape(warning)}"))
    return lines


def _ratio(ratio: float, reliable: bool) -> str:
    """``1.84x``, or ``[yellow]1.84x?[/]`` for a ratio that is not a measurement."""
    return f"{ratio:.2f}x" if reliable else f"[yellow]{ratio:.2f}x?[/]"


def _row(t: Timing) -> list[str]:
    return [
        f"{t.p50_ms:.4g}",
        f"{t.p90_ms:.4g}",
        f"{t.cv:.1%}",
        f"{t.throughput:.1f}",
        str(t.runs),
    ]


def render_tune(report: TuneReport) -> Lines:
    """The parity gate, the search and the contest, and what was kept and written."""
    shape = ", ".join(f"{k}={v}" for k, v in report.shape.items()) or "fixed shape"
    m = report.machine
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/]: {report.objective} at {escape(shape)} on "
            f"{escape(m.cpu)}, {m.cores} CPUs, onnxruntime {m.runtime} (fingerprint {m.id})"
        ),
        line(
            f"\n[bold]Parity gate[/] against the model as given under ONNX Runtime's defaults, "
            f"{report.parity_samples} sample(s), {escape(report.parity_rule)}"
        ),
    ]
    for v in report.gate:
        mark = "[green]pass[/]" if v.passed else "[red]REJECTED[/]"
        worst = v.outputs[0] if v.outputs else None
        figures = (
            f"{worst.output}: {worst.mismatches}/{worst.elements} outside, "
            f"max |Δ| {worst.max_abs:.3g}"
            if worst is not None and worst.max_abs is not None
            else escape(v.reason or "")
        )
        on = f" on {v.note}" if v.provider else ""
        lines.append(
            line(f"  {mark}  {escape(v.graph)} @ {v.level}{escape(on)}  {escape(figures)}")
        )
    lines.append(line(f"\n[bold]Search[/]: {report.candidates} candidates, successive halving"))
    for i, r in enumerate(report.rounds, 1):
        unit = "ms p50" if report.objective == "latency" else "samples/s"
        lines.append(
            line(
                f"  round {i}: {r.candidates} × {r.runs} runs, best {r.best_score:.4g} {unit}: "
                f"{escape(r.best)}"
            )
        )
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("", "p50 ms", "p90 ms", "cv", "samples/s", "runs"):
        table.add_column(column, justify="left" if not column else "right", no_wrap=True)
    table.add_row("defaults", *_row(report.defaults))
    if report.best.label != report.defaults.label:
        table.add_row("best", *_row(report.best))
    lines.append(line("\n[bold]Contest[/] (one worker process each, runs interleaved)"))
    lines.append(table)
    if report.best.label != report.defaults.label:
        lines.append(line(f"  best: {escape(report.best.label)}"))
        low, high = report.interval
        doubt = "" if report.reliable else "[yellow]unreliable:[/] "
        lines.append(
            line(
                f"  {doubt}improvement {report.ratio:.3f}× (90% interval {low:.3f}–{high:.3f}; "
                f"needs an interval above 1 and at least {1 + report.min_gain:.2f}×)"
            )
        )
    kept = (
        f"[green]tuned:[/] {escape(report.best.label)}"
        if report.replaced_defaults
        else f"[yellow]{escape(report.decision or 'defaults kept')}[/]"
    )
    lines.append(line(f"\n{kept}"))
    runs_on = f"{report.runtime}, in its isolated environment" if report.runtime else "installed"
    lines.append(line(f"  runs on: {report.provider} (onnxruntime: {escape(runs_on)})"))
    for note in report.notes:
        lines.append(line(f"[dim]note:[/] {escape(note)}"))
    for path in report.written:
        lines.append(line(f"wrote {escape(path)}"))
    return lines


_NUMBERS = {"nodes", "calls", "ms/run", "share"}


def _table(*columns: str) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in _NUMBERS else "left", no_wrap=True)
    return table


def _shares(title: str, rows: list[TimeShare]) -> Table:
    table = _table(title, "nodes", "calls", "ms/run", "share")
    for row in rows:
        table.add_row(
            escape(row.name), str(row.nodes), str(row.calls), f"{row.ms:.3f}", f"{row.share:.1%}"
        )
    return table


def render_profile(report: ProfileReport) -> Lines:
    """Time per run, by op type and provider, the slowest nodes with their shapes, the copies."""
    shapes = " ".join(f"{k}=[{','.join(map(str, v))}]" for k, v in report.shapes.items())
    kernels = report.node_ms / report.run_ms if report.run_ms else 0.0
    lines: Lines = [
        line(
            f"[bold]{escape(report.model)}[/] on {escape(report.runtime)} "
            f"({escape(report.optimization)}; {escape(', '.join(report.providers))}), "
            f"feeds: {escape(report.feeds)}" + (f" {escape(shapes)}" if shapes else "")
        ),
        line(
            f"{report.runs} profiled run(s) after {report.warmup} warm-up run(s): "
            f"{report.run_ms:.3f} ms per run, {report.node_ms:.3f} ms of it in "
            f"{report.node_count} node(s) ({kernels:.0%})"
        ),
        line(),
        _shares("op type", report.op_types),
        line(),
        _shares("provider", report.by_provider),
        line(),
    ]
    listed = len(report.nodes)
    if listed == report.node_count:
        lines.append(line(f"[bold]all {listed} node(s)[/], slowest first"))
    else:
        lines.append(
            line(f"[bold]slowest {listed} of {report.node_count} nodes[/] (--top 0 lists all)")
        )
    table = _table("node", "op type", "provider", "ms/run", "share")
    for n in report.nodes:
        table.add_row(
            escape(n.node or "(unnamed)"),
            escape(n.op_type),
            escape(n.provider),
            f"{n.ms:.3f}",
            f"{n.share:.1%}",
        )
    lines.append(table)
    if report.nodes:
        # shapes get lines of their own: in a table column they are squeezed to nothing
        lines.append(line("[bold]shapes[/] (inputs → outputs)"))
        for n in report.nodes:
            flow = f"{' '.join(map(str, n.inputs))} → {' '.join(map(str, n.outputs))}"
            lines.append(line(f"  {escape(n.node or '(unnamed)')}: {escape(flow)}"))
    lines.append(line())
    if report.memcpy:
        table = _table("memcpy node", "op type", "from → to", "ms/run", "share", "tensor")
        for m in report.memcpy:
            table.add_row(
                escape(m.node),
                escape(m.op_type),
                escape(f"{m.source} → {m.target}"),
                f"{m.ms:.3f}",
                f"{m.share:.1%}",
                escape(" ".join(map(str, m.outputs))),
            )
        lines.append(table)
    else:
        lines.append(line("no Memcpy node: no tensor was copied between providers"))
    for note in report.notes:
        lines.append(line(f"[dim]note: {escape(note)}[/]"))
    if report.trace:
        lines.append(line(f"trace: {escape(report.trace)} (chrome://tracing or ui.perfetto.dev)"))
    return lines
