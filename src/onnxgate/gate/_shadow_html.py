"""A shadow verdict on ``report.html``'s terms: one section, or a page of its own.

``registry shadow-report --html`` writes the page; ``render_html(report, shadow=...)`` puts the
same section on a gate's page. The building blocks are ``report.html``'s (``_markup``), so the
page is as self-contained (inline CSS, no script, nothing fetched) and everything on it escaped.
"""

from __future__ import annotations

import os

from onnxgate._fs import atomic_write_text
from onnxgate.gate._markup import CSS, Html, badge, esc, notes, pairs, table
from onnxgate.shadow import ShadowReport


def shadow_section(report: ShadowReport) -> str:
    """The verdict, its reasons, per-output figures, buckets, runs and worst requests."""
    v = report.verdict
    c = v.criteria
    facts = pairs(
        [
            ("candidate", report.candidate),
            ("champion", f"{report.champion} (@{report.against})"),
            ("requests judged", f"{v.pairs:,} ({v.failed_pairs:,} failed)"),
            (
                "criteria",
                f"{c.min_pairs:,} requests in all, {c.min_per_bucket:,} per bucket, "
                f"failure rate ≤ {c.max_failure_rate:g}",
            ),
        ]
    )
    outputs = table(
        ["output", "rule", "failed", "of", "failure rate", "min cosine", "max abs", "min top-1"],
        [
            [
                o.output,
                Html(f"<code>{esc(o.rule)}</code>"),
                o.failed,
                o.pairs,
                o.failure_rate,
                o.min_cosine,
                o.worst_max_abs,
                o.min_top1,
            ]
            for o in v.outputs
        ],
        numeric=range(2, 8),
    )
    buckets = table(
        ["bucket", "requests", "enough"],
        [[b, n, n >= c.min_per_bucket] for b, n in v.buckets.items()],
        numeric=(1,),
    )
    runs = table(
        ["run", "against", "host", "started", "requests", "counted"],
        [
            [r.id, r.champion, r.host, r.started_at.isoformat(), r.pairs, r.counted]
            for r in report.runs
        ],
        numeric=(4,),
    )
    worst = table(
        ["pair", "bucket", "failed outputs", "reason", "min cosine", "max abs", "input sha256"],
        [
            [
                w.id,
                w.bucket,
                ", ".join(w.failed_outputs) or "—",
                w.reason or "",
                w.min_cosine,
                w.max_abs,
                Html(
                    f"<code>{esc(w.input_digest[:16])}…</code>"
                    + (" (inputs kept)" if w.inputs_kept else "")
                ),
            ]
            for w in report.worst
        ],
        numeric=(4, 5),
    )
    return "".join(
        [
            f'<section class="card" id="shadow"><h2>Shadow verdict {badge(v.status)}</h2>',
            facts,
            notes(v.reasons, warn=True),
            notes(report.notes),
            "<h3>Outputs</h3>" + outputs if v.outputs else "",
            "<h3>Shape buckets</h3>" + buckets if v.buckets else "",
            "<h3>Runs</h3>" + runs if report.runs else "",
            "<h3>Worst requests</h3>" + worst if report.worst else "",
            "</section>",
        ]
    )


def render_shadow_html(report: ShadowReport) -> str:
    """The shadow verdict as one self-contained HTML page."""
    status = report.verdict.status
    headline = f"{report.candidate} against {report.champion}: {status}"
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',
            f"<title>onnxgate shadow · {esc(headline)}</title><style>{CSS}</style></head><body>",
            f'<header class="verdict {esc(status)}"><div class="inner">',
            f'<h1><span class="mark">{esc(status)}</span>{esc(report.candidate)}</h1>',
            f"<div>in shadow against {esc(report.champion)} (@{esc(report.against)})</div>",
            "</div></header><main>",
            shadow_section(report),
            "</main></body></html>\n",
        ]
    )


def write_shadow_html(report: ShadowReport, path: str | os.PathLike[str]) -> None:
    """Write :func:`render_shadow_html` to ``path`` atomically (a reader never sees half)."""
    atomic_write_text(path, render_shadow_html(report))
