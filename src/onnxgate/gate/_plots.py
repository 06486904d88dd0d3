"""The plots of the gate's report page, drawn with matplotlib and returned as SVG text.

Each function takes the step report as its JSON dict (``StepResult.report``), not the library's
model, so a ``report.json`` written by another onnxgate version still draws. matplotlib is
imported here only, and only when a page is rendered; figures are made with its object API
(``matplotlib.figure.Figure``), which needs no pyplot and changes no global backend. Glyphs are
written as paths, so the page looks the same on a machine without the font.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MODEL = "#2563eb"
"""The model's colour in every plot."""
CONTENDER = "#ea580c"
"""The contender's (``bench --vs``) colour."""
PASS = "#15803d"
FAIL = "#b91c1c"
MUTED = "#94a3b8"
EXACT_COSINE = 1e-15
"""Rows whose 1 - cosine is at most this are drawn at it, as identical."""
INK = "#1e293b"
OP_COLOURS = (
    "#2563eb",
    "#0d9488",
    "#d97706",
    "#7c3aed",
    "#db2777",
    "#65a30d",
    "#0891b2",
    "#dc2626",
    "#4f46e5",
)
GROUPS_PER_PLOT = 6
"""Shapes per latency figure; more shapes make more figures."""
LOG_SPREAD = 4.0
"""A latency row whose slowest shown run is this many times its fastest gets a log axis."""
LEGEND_COLUMNS = 8
"""Op types per row of the placement plot's legend."""
WIDE = 11.0
"""Inches of a full-width plot: the page's column at its natural size (1 pt = 4/3 px)."""

_STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 8.5,
    "axes.titlesize": 9,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.edgecolor": "#cbd5e1",
    "axes.labelcolor": INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e2e8f0",
    "grid.linewidth": 0.6,
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "legend.frameon": False,
    "svg.fonttype": "path",
    "svg.hashsalt": "onnxgate",
}


@contextmanager
def _figure(width: float, height: float) -> Iterator[Figure]:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_STYLE):
        yield Figure(figsize=(width, height), layout="constrained")


def _log(ax: Axes, which: str) -> None:
    """A log axis labelled on the decades only (minor labels cost time and say little)."""
    from matplotlib.ticker import NullFormatter

    if which == "x":
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None}, facecolor="white")
    return buffer.getvalue()


def ms_text(value: float | None) -> str:
    """A latency for people: ``7.12 µs``, ``1.34 ms``, ``2.5 s``."""
    if value is None or not math.isfinite(value):
        return "—"
    if value < 1:
        return f"{value * 1000:.3g} µs"
    if value < 1000:
        return f"{value:.3g} ms"
    return f"{value / 1000:.3g} s"


def cos_text(value: object) -> str:
    """A cosine: ``0.999927``, or ``1 − 1.8e-14`` when it is too close to 1 for digits."""
    if not isinstance(value, int | float):
        return "—"
    gap = 1.0 - float(value)
    if gap <= 0:
        return "1"
    return f"1 − {gap:.2g}" if gap < 1e-5 else f"{value:.6f}"


def shape_label(result: Mapping[str, Any]) -> str:
    """``batch=16, threads=1`` for a bench configuration."""
    dims = result.get("dims") or {}
    parts = [f"{k}={v}" for k, v in dims.items()]
    if not parts and result.get("batch") is not None:
        parts.append(f"batch={result['batch']}")
    threads = result.get("threads")
    parts.append(f"threads={threads or 'auto'}")
    return ", ".join(parts)


def _key(result: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        result.get("batch"),
        tuple(sorted((result.get("dims") or {}).items())),
        result.get("threads"),
    )


# --- latency ------------------------------------------------------------------------------------


def latency_plots(report: Mapping[str, Any], contender: str | None) -> list[tuple[str, str]]:
    """Latency distributions per shape, the model against the contender: (svg, caption) each.

    One row per shape, one violin per side (the per-run latencies), with p50, p90 and p99
    marked, and the speed-up in the row's title. Shapes beyond ``GROUPS_PER_PLOT`` go on
    further figures.
    """
    results = list(report.get("results") or [])
    vs = report.get("vs") or {}
    theirs = {_key(r): r for r in vs.get("results") or []}
    ratios = {_key(r): r.get("ratio") for r in report.get("ratio") or []}
    groups = []
    for result in results:
        sides = [("model", MODEL, result)]
        if _key(result) in theirs:
            sides.append((contender or "contender", CONTENDER, theirs[_key(result)]))
        groups.append((shape_label(result), sides, ratios.get(_key(result))))
    plots = []
    for start in range(0, len(groups), GROUPS_PER_PLOT):
        chunk = groups[start : start + GROUPS_PER_PLOT]
        sides = max(len(g[1]) for g in chunk)
        with _figure(WIDE, 0.55 + len(chunk) * (0.45 + 0.42 * sides)) as fig:
            axes = fig.subplots(len(chunk), 1, squeeze=False)[:, 0]
            for ax, (label, group, ratio) in zip(axes, chunk, strict=True):
                _latency_row(ax, label, group, ratio, contender)
            axes[-1].set_xlabel("latency per run (ms)")
            _latency_legend(fig)
            svg = _svg(fig)
        shown = ", ".join(g[0] for g in chunk)
        plots.append((svg, f"Per-run latency at {shown}: model vs {contender or 'nothing'}"))
    return plots


def _latency_row(
    ax: Axes,
    label: str,
    group: Sequence[tuple[str, str, Mapping[str, Any]]],
    ratio: float | None,
    contender: str | None,
) -> None:
    import numpy as np

    names = []
    highs = []
    lows = []
    for row, (name, colour, result) in enumerate(group):
        y = len(group) - 1 - row
        names.append((y, name))
        values = np.asarray(result.get("latencies_ms") or [], dtype=float)
        p50, p90, p99 = (result.get(k) for k in ("p50_ms", "p90_ms", "p99_ms"))
        if values.size >= 2 and np.ptp(values) > 0:
            top = float(np.percentile(values, 99.5))
            shown = values[values <= top]
            parts = _violin(ax, shown, y)
            for body in parts["bodies"]:
                body.set_facecolor(colour)
                body.set_edgecolor(colour)
                body.set_alpha(0.35)
            highs.append(top)
            lows.append(float(values.min()))
        for value, marker, size in ((p90, "|", 11), (p99, "|", 15)):
            if value is not None:
                ax.plot([value], [y], marker=marker, color=colour, markersize=size, mew=1.6)
        if p50 is not None:
            ax.plot([p50], [y], "o", color="white", mec=colour, mew=1.8, markersize=6.5)
            ax.annotate(
                f"p50 {ms_text(p50)} · p90 {ms_text(p90)} · p99 {ms_text(p99)}",
                (1.0, y),
                xycoords=("axes fraction", "data"),
                xytext=(-4, 7),
                textcoords="offset points",
                ha="right",
                fontsize=7.5,
                color=colour,
            )
        highs += [v for v in (p99,) if v is not None]
        lows += [v for v in (result.get("min_ms"), p50) if v is not None]
    if highs and lows:
        low, high = min(lows), max(highs)
        if low > 0 and high / low > LOG_SPREAD:
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.set_xscale("log")
            ax.set_xlim(low / 1.15, high * 1.15)
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            pad = (high - low) * 0.08 or high * 0.05 or 1e-6
            ax.set_xlim(max(0.0, low - pad), high + pad)
    ax.set_ylim(-0.6, len(group) - 0.4)
    ax.set_yticks([y for y, _ in names], [short_name(n) for _, n in names])
    ax.grid(axis="y", visible=False)
    title = label
    if ratio is not None and contender:
        verdict = "faster" if ratio >= 1 else "slower"
        title += f"   ·   model {ratio:.2f}× {verdict} than {short_name(contender)} (p50)"
    ax.set_title(title, fontsize=8.5)


def _violin(ax: Axes, values: Any, y: float) -> dict[str, Any]:
    try:  # matplotlib 3.10 and later
        return ax.violinplot(
            values, positions=[y], orientation="horizontal", widths=0.8, showextrema=False
        )
    except TypeError:
        return ax.violinplot(values, positions=[y], vert=False, widths=0.8, showextrema=False)


def _latency_legend(fig: Figure) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", color="white", mec=INK, mew=1.6, ls="", label="p50"),
        Line2D([], [], marker="|", color=INK, markersize=10, mew=1.6, ls="", label="p90"),
        Line2D([], [], marker="|", color=INK, markersize=14, mew=1.6, ls="", label="p99"),
    ]
    fig.legend(handles=handles, loc="outside lower right", ncols=3, fontsize=7.5)


def short_name(name: str, width: int = 28) -> str:
    tail = name.replace("\\", "/").rsplit("/", 1)[-1]
    return tail if len(tail) <= width else tail[: width - 1] + "…"


# --- accuracy drift -----------------------------------------------------------------------------


def drift_plot(
    drift: Mapping[str, Any],
    *,
    output: str,
    atol: float | None = None,
    floor: float | None = None,
    floor_rule: str = "cosine",
) -> str:
    """Histogram of absolute errors (log axis) and per-row cosine of one output, side by side.

    Args:
        drift: a ``compare.Drift`` as JSON.
        output: the output's name.
        atol: the absolute tolerance, drawn on the histogram.
        floor: the lowest cosine a rule allows, drawn on the cosine plot.
        floor_rule: what ``floor`` bounds, for its label (``mean row cosine``).
    """
    with _figure(WIDE, 2.6) as fig:
        left, right = fig.subplots(1, 2, width_ratios=[1.15, 1])
        _error_histogram(left, drift, atol)
        _row_cosine(right, drift, floor, floor_rule)
        return _svg(fig)


def _error_histogram(ax: Axes, drift: Mapping[str, Any], atol: float | None) -> None:
    edges = list(drift.get("edges") or [])
    counts = list(drift.get("counts") or [])
    zeros = int(drift.get("zeros") or 0)
    total = zeros + sum(counts)
    used = [i for i, c in enumerate(counts) if c]
    ax.set_title(f"|candidate − reference| over {total:,} elements")
    if not used or len(edges) != len(counts) + 1:
        ax.text(
            0.5,
            0.5,
            f"all {total:,} agree exactly",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color=PASS,
            fontsize=10,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    first, last = max(used[0] - 1, 0), min(used[-1] + 1, len(counts) - 1)
    lefts = edges[first : last + 1]
    widths = [edges[i + 1] - edges[i] for i in range(first, last + 1)]
    ax.bar(
        lefts,
        counts[first : last + 1],
        width=widths,
        align="edge",
        color=MODEL,
        alpha=0.8,
        edgecolor="white",
        linewidth=0.5,
    )
    _log(ax, "x")
    ax.set_xlabel("absolute error")
    ax.set_ylabel("elements")
    if atol and edges[first] <= atol * 3 and atol <= edges[last + 1] * 3:
        ax.axvline(atol, color=FAIL, ls="--", lw=1)
        ax.annotate(
            f"atol {atol:g}",
            (atol, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -10),
            textcoords="offset points",
            color=FAIL,
            fontsize=7.5,
        )
    if zeros:
        ax.text(
            0.01,
            0.97,
            f"{zeros:,} exact (not shown)",
            transform=ax.transAxes,
            va="top",
            fontsize=7.5,
            color="#475569",
        )


def _row_cosine(ax: Axes, drift: Mapping[str, Any], floor: float | None, rule: str) -> None:
    """1 - cosine per row, on a log axis: near 1, where outputs live, a linear axis shows nothing."""
    import numpy as np

    values = np.asarray([float(v) for v in drift.get("row_cosine") or []])
    rows = int(drift.get("rows") or values.size)
    lowest = drift.get("row_cosine_min")
    kept = f"first {values.size:,} of {rows:,} rows" if rows > values.size else f"{rows:,} rows"
    low_text = f", lowest {cos_text(lowest)}" if lowest is not None else ""
    ax.set_title(f"cosine per row ({kept}{low_text})")
    if not values.size:
        ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes)
        return
    deficit = 1.0 - values
    identical = deficit <= EXACT_COSINE
    shown = np.maximum(deficit, EXACT_COSINE)
    xs = np.arange(values.size)
    style = {"color": MODEL, "lw": 0.8, "marker": "o", "markersize": 2.5}
    if values.size <= 200:
        ax.plot(xs, shown, **style)
    else:
        ax.scatter(xs, shown, s=3, color=MODEL, linewidths=0)
    if identical.any():
        ax.scatter(xs[identical], shown[identical], s=9, color=PASS, zorder=3, linewidths=0)
        ax.text(
            0.01,
            0.04,
            f"{int(identical.sum()):,} row(s) identical (1 − cos ≤ 1e-15)",
            transform=ax.transAxes,
            fontsize=7.5,
            color=PASS,
        )
    _log(ax, "y")
    top = float(shown.max())
    if floor is not None and floor < 1:
        limit = 1.0 - floor
        ax.axhline(limit, color=FAIL, ls="--", lw=1)
        ax.annotate(
            f"rule: {rule} ≥ {floor:g}",
            (0.99, limit),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            ha="right",
            color=FAIL,
            fontsize=7.5,
        )
        top = max(top, limit)
    ax.set_ylim(float(shown.min()) / 3, top * 3)
    ax.set_ylabel("1 − cosine (lower: closer)")
    ax.set_xlabel("row (axis 0 of each sample, in order)")


# --- placement, quantisation, tuning ------------------------------------------------------------


def placement_plot(report: Mapping[str, Any]) -> str | None:
    """Nodes per provider, stacked by op type; None when nothing was placed."""
    op_types: Mapping[str, Mapping[str, int]] = report.get("op_types") or {}
    assignments: Mapping[str, int] = report.get("assignments") or {}
    providers = list(assignments) or list(op_types)
    if not providers:
        return None
    totals: dict[str, int] = {}
    for counts in op_types.values():
        for op, n in counts.items():
            totals[op] = totals.get(op, 0) + n
    ranked = sorted(totals, key=lambda op: (-totals[op], op))
    shown, rest = ranked[: len(OP_COLOURS)], ranked[len(OP_COLOURS) :]
    entries = len(shown) + bool(rest)
    legend_rows = math.ceil(entries / LEGEND_COLUMNS)
    with _figure(WIDE, 0.75 + 0.38 * len(providers) + 0.2 * legend_rows) as fig:
        ax = fig.subplots()
        ys = list(range(len(providers)))[::-1]
        labelled: set[str] = set()
        for y, provider in zip(ys, providers, strict=True):
            counts = op_types.get(provider) or {}
            left = 0
            segments = [(op, counts.get(op, 0), OP_COLOURS[i]) for i, op in enumerate(shown)]
            segments.append(("other", sum(counts.get(op, 0) for op in rest), MUTED))
            if not counts:  # no op-type breakdown: the node count alone
                segments = [("nodes", assignments.get(provider, 0), MODEL)]
            for op, n, colour in segments:
                if n:
                    label = None if op in labelled else op
                    labelled.add(op)
                    ax.barh(y, n, left=left, color=colour, height=0.5, label=label)
                    left += n
            total = assignments.get(provider, left)
            ax.annotate(
                f"{total:,} nodes",
                (left, y),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7.5,
            )
        ax.set_yticks(ys, [p.removesuffix("ExecutionProvider") for p in providers])
        ax.set_xlabel("nodes")
        ax.grid(axis="y", visible=False)
        ax.set_xlim(0, max(max(assignments.values(), default=1), 1) * 1.15)
        fig.legend(loc="outside lower center", ncols=min(entries, LEGEND_COLUMNS), fontsize=7.5)
        return _svg(fig)


def _low(report: Mapping[str, Any]) -> str:
    """The format a quantize report converted to: ``int8`` (left out of its settings) or ``fp16``."""
    return str((report.get("settings") or {}).get("to") or "int8")


def ranking_plot(report: Mapping[str, Any], limit: int = 15) -> str | None:
    """Each node's share of the int8 (or fp16) error, worst first; kept-in-float highlighted."""
    ranking = list(report.get("ranking") or [])[:limit]
    low = _low(report)
    if not ranking:
        return None
    excluded = {s.get("node") for s in report.get("excluded") or []}
    with _figure(WIDE, 0.9 + 0.22 * len(ranking)) as fig:
        ax = fig.subplots()
        names = [f"{s.get('node')} ({s.get('op_type')})" for s in ranking][::-1]
        scores = [max(float(s.get("score") or 0.0), 1e-12) for s in ranking][::-1]
        colours = [FAIL if s.get("node") in excluded else MUTED for s in ranking][::-1]
        ax.barh(range(len(names)), scores, color=colours, height=0.65)
        ax.set_yticks(range(len(names)), names, fontsize=7.5)
        if max(scores) / min(scores) > 50:
            _log(ax, "x")
        ax.set_xlabel(f"1 − mean row cosine of the worst output, with only this node in {low}")
        ax.grid(axis="y", visible=False)
        ax.set_title("error per node (red: kept in float)")
        return _svg(fig)


def tune_plot(report: Mapping[str, Any]) -> str | None:
    """The defaults against the kept settings: p50 and p90 side by side."""
    defaults, best = report.get("defaults"), report.get("best")
    if not defaults or not best:
        return None
    with _figure(6.5, 1.9) as fig:
        ax = fig.subplots()
        labels = [
            "ONNX Runtime defaults",
            "tuned" if report.get("replaced_defaults") else "best candidate",
        ]
        for i, key in enumerate(("p50_ms", "p90_ms")):
            values = [defaults.get(key) or 0.0, best.get(key) or 0.0]
            ys = [1 + (0.18 if i == 0 else -0.18), 0 + (0.18 if i == 0 else -0.18)]
            colour = MODEL if i == 0 else "#93c5fd"
            ax.barh(ys, values, height=0.34, color=colour, label=key.removesuffix("_ms"))
            for y, v in zip(ys, values, strict=True):
                ax.annotate(
                    ms_text(v),
                    (v, y),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7.5,
                )
        ax.set_yticks([1, 0], labels)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("latency (ms)")
        top = max(defaults.get("p90_ms") or 0.0, best.get("p90_ms") or 0.0)
        ax.set_xlim(0, top * 1.3 or 1)
        ax.legend(loc="lower right", fontsize=7.5)
        return _svg(fig)


def quantize_latency_plot(report: Mapping[str, Any]) -> str | None:
    """Median latency float vs int8 (or fp16) per shape, with the speed-up's 90% interval."""
    rows = list(report.get("latency") or [])
    if not rows:
        return None
    with _figure(7.5, 0.8 + 0.55 * len(rows)) as fig:
        ax = fig.subplots()
        labels = []
        for i, row in enumerate(rows[::-1]):
            labels.append(", ".join(f"{k}={v}" for k, v in (row.get("dims") or {}).items()) or "—")
            ax.barh(
                i + 0.18,
                row.get("float_ms") or 0.0,
                height=0.34,
                color=MUTED,
                label="float" if i == 0 else None,
            )
            ax.barh(
                i - 0.18,
                row.get("quantized_ms") or 0.0,
                height=0.34,
                color=MODEL,
                label=_low(report) if i == 0 else None,
            )
            interval = row.get("interval")
            text = f"{row.get('speedup', 0):.2f}×"
            if interval:
                text += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
            top = max(row.get("float_ms") or 0.0, row.get("quantized_ms") or 0.0)
            ax.annotate(
                text, (top, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7.5
            )
        ax.set_yticks(range(len(rows)), labels)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"median latency (ms); speed-up of {_low(report)} with its 90% interval")
        ax.legend(loc="lower right", fontsize=7.5)
        right = max(max(r.get("float_ms") or 0.0, r.get("quantized_ms") or 0.0) for r in rows)
        ax.set_xlim(0, right * 1.45 or 1)
        return _svg(fig)
