"""HTML building blocks of ``report.html``: escaping, tables, badges, figures, the stylesheet.

Everything here escapes by default: a cell is escaped unless it is ``Html`` (markup this module or
``_html`` built from escaped parts), so a model name or a reason can never become markup.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from html import escape

CSS = """
:root { color-scheme: light; --ink: #1e293b; --soft: #475569; --line: #e2e8f0; --bg: #f8fafc;
  --pass: #15803d; --fail: #b91c1c; --err: #9a3412; --skip: #64748b; --accent: #2563eb;
  --unsure: #b45309; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); line-height: 1.45;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 0 24px 48px; }
header.verdict { color: #fff; padding: 22px 0 18px; margin-bottom: 20px; }
header.verdict.passed { background: linear-gradient(90deg, #166534, #15803d); }
header.verdict.failed { background: linear-gradient(90deg, #7f1d1d, #b91c1c); }
header.verdict.inconclusive { background: linear-gradient(90deg, #78350f, #b45309); }
header.verdict .inner { max-width: 1180px; margin: 0 auto; padding: 0 24px; }
header.verdict h1 { margin: 0 0 4px; font-size: 26px; letter-spacing: .2px; }
header.verdict .mark { display: inline-block; padding: 2px 10px; margin-right: 10px; border-radius: 6px;
  background: rgba(255,255,255,.18); font-size: 15px; vertical-align: 4px; text-transform: uppercase; }
header.verdict dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 10px 0 0;
  font-size: 13px; }
header.verdict dt { opacity: .8; } header.verdict dd { margin: 0; word-break: break-all; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
nav.toc { display: flex; flex-wrap: wrap; gap: 6px; margin: 0 0 18px; }
nav.toc a.to-passed { border-left: 4px solid var(--pass); } nav.toc a.to-failed { border-left: 4px solid var(--fail); }
nav.toc a.to-error { border-left: 4px solid var(--err); } nav.toc a.to-not_run { border-left: 4px solid var(--skip); }
nav.toc a.to-inconclusive { border-left: 4px solid var(--unsure); }
nav.toc a { text-decoration: none; color: var(--ink); background: #fff; border: 1px solid var(--line);
  border-radius: 999px; padding: 3px 12px; font-size: 13px; }
section.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px;
  margin: 0 0 18px; box-shadow: 0 1px 2px rgba(15,23,42,.04); }
section.card > h2 { margin: 0 0 10px; font-size: 18px; display: flex; align-items: center; gap: 10px; }
h3 { font-size: 14.5px; margin: 18px 0 8px; }
p.summary { margin: 4px 0 10px; } p.reason { margin: 4px 0 10px; color: var(--fail); white-space: pre-wrap; }
p.muted, .muted { color: var(--soft); }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; font-size: 13px; }
th, td { text-align: left; padding: 5px 9px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #f1f5f9; font-weight: 600; color: #334155; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafcfe; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.wrap { word-break: break-word; }
table.kv td:first-child { width: 210px; color: var(--soft); white-space: nowrap; }
table.kv td { word-break: break-word; }
.badge { display: inline-block; min-width: 64px; text-align: center; padding: 1px 8px; border-radius: 999px;
  font-size: 12px; font-weight: 600; color: #fff; text-transform: uppercase; letter-spacing: .3px; }
.st-passed { background: var(--pass); } .st-failed { background: var(--fail); }
.st-error { background: var(--err); } .st-not_run { background: var(--skip); }
.st-inconclusive { background: var(--unsure); }
.st-info { background: #0369a1; } .st-warning { background: #b45309; }
figure.plot { margin: 10px 0 16px; padding: 8px; border: 1px solid var(--line); border-radius: 8px; background: #fff; }
figure.plot img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
figure.plot figcaption { font-size: 12.5px; color: var(--soft); margin-top: 4px; }
ul.notes { margin: 6px 0 10px; padding-left: 20px; } ul.notes li { margin: 2px 0; }
ul.notes.warn li { color: #92400e; }
details { margin: 6px 0 10px; } details > summary { cursor: pointer; color: var(--accent); }
pre { background: #f1f5f9; padding: 10px; border-radius: 6px; overflow-x: auto; font-size: 12px; }
.yes { color: var(--pass); font-weight: 600; } .no { color: var(--fail); font-weight: 600; }
footer { color: var(--soft); font-size: 12px; margin-top: 24px; }
"""


class Html(str):
    """Text that is already HTML: ``cell`` inserts it as it is; everything else is escaped."""


def esc(value: object) -> str:
    """``value`` as text, escaped for an element or a quoted attribute."""
    return escape(str(value), quote=True)


def num(value: object) -> str:
    """A figure for a table: ``1.23e-05``, ``0.9999``, ``1,234``, ``yes``, ``—``."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "NaN"
        if value == 0:
            return "0"
        if abs(value) >= 1e6:
            return f"{value:.3g}"
        if abs(value) >= 1e3:
            return f"{value:,.0f}"
        if abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


def cell(value: object) -> str:
    """A table cell: ``Html`` as it is, anything else formatted by ``num`` and escaped."""
    return value if isinstance(value, Html) else esc(num(value))


def table(
    head: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Iterable[int] = ()
) -> str:
    """A table; ``numeric`` columns are right-aligned. Cells are escaped unless ``Html``."""
    right = set(numeric)
    cls = [' class="num"' if i in right else "" for i in range(len(head))]
    out = ["<table><thead><tr>"]
    out += [f"<th{cls[i]}>{esc(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td{cls[i]}>{cell(v)}</td>" for i, v in enumerate(row)))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def pairs(items: Iterable[tuple[str, object]]) -> str:
    """A two-column table of names and values (``class="kv"``), without a header."""
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{cell(v)}</td></tr>" for k, v in items)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def ratio_text(value: object) -> str:
    """A speed-up: ``1.374×``."""
    return f"{value:.3f}×" if isinstance(value, int | float) else "—"


def size_text(size: object) -> str:
    """A file size in bytes for people: ``11.6 kB``, ``1.2 GB``."""
    if not isinstance(size, int | float):
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{int(size)} B"


def badge(status: str) -> Html:
    """A coloured status pill: passed, failed, error, not run (or a severity)."""
    return Html(f'<span class="badge st-{esc(status)}">{esc(status.replace("_", " "))}</span>')


def yes(flag: object) -> Html:
    """A coloured ✓ yes / ✗ no, or a dash for None (not checked)."""
    if flag is None:
        return Html('<span class="muted">—</span>')
    return Html('<span class="yes">✓ yes</span>' if flag else '<span class="no">✗ no</span>')


def notes(items: Iterable[object], *, warn: bool = False) -> str:
    """A bulleted list of notes (amber with ``warn``); empty when there is none."""
    shown = [f"<li>{esc(i)}</li>" for i in items if i]
    if not shown:
        return ""
    return f'<ul class="notes{" warn" if warn else ""}">{"".join(shown)}</ul>'


class Figures:
    """Numbers every ``<figure>`` of the page: ``fig-1``, ``fig-2`` and on."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, svg: str | None, caption: str, kind: str) -> str:
        """A numbered ``<figure>`` holding ``svg`` as a data URI; empty when there is no plot."""
        if not svg:
            return ""
        self.count += 1
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return (
            f'<figure class="plot plot-{esc(kind)}" id="fig-{self.count}" data-kind="{esc(kind)}">'
            f'<img alt="{esc(caption)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )


def seconds_text(value: float) -> str:
    """A duration for people: ``26 ms``, ``7.0 s``, ``2 min 03 s``."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(int(round(value)), 60)
    return f"{minutes} min {seconds:02d} s"
