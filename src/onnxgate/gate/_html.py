"""``report.html``: the gate's verdict as one page a person reads instead of the logs.

Why this shape: the page travels as a CI artefact and is opened from disk, often where there is
no network, so it is one file with nothing to fetch (inline CSS, no script, no web font, each plot
an SVG data URI; an ``<img>`` keeps each SVG's ids to itself). Every step renders from its report
as JSON (``StepResult.report``), not from the library's model, so a ``report.json`` written by
another onnxgate version still renders; a report this page does not know shows its figures.
Every value that reaches the page goes through ``html.escape``: model names, node names and
reasons come from files the gate was handed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from onnxgate.gate._markup import (
    CSS,
    Figures,
    Html,
    badge,
    esc,
    notes,
    pairs,
    seconds_text,
    size_text,
    table,
)
from onnxgate.gate._records import DETAIL
from onnxgate.gate._report import GateReport, StepResult
from onnxgate.gate._shadow_html import shadow_section
from onnxgate.shadow import ShadowReport


def _step(step: StepResult, fig: Figures) -> str:
    out = [
        f'<section class="card step" id="step-{esc(step.name)}">'
        f"<h2>{esc(step.name)} {badge(step.status)}</h2>"
        f'<p class="summary">{esc(step.summary or "")}</p>'
    ]
    if step.reason:
        out.append(f'<p class="reason">{esc(step.reason)}</p>')
    render = DETAIL.get(step.name)
    if step.report and render is not None:
        try:
            out.append(render(step.report, fig))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            out.append(
                f'<p class="muted">This report could not be drawn ({esc(type(err).__name__)}: {esc(err)}); its figures follow.</p>'
            )
    if step.figures:
        listing = pairs(list(step.figures.items()))
        out.append(f"<details><summary>figures ({len(step.figures)})</summary>{listing}</details>")
    out.append("</section>")
    return "".join(out)


def _steps_table(report: GateReport) -> str:
    rows = [
        [
            Html(f'<a href="#step-{esc(s.name)}">{esc(s.name)}</a>'),
            badge(s.status),
            seconds_text(s.seconds),
            "cached" if s.cached else "",
            s.summary,
            s.reason or "",
        ]
        for s in report.steps
    ]
    return table(["step", "status", "time", "", "summary", "reason"], rows, numeric=(2,))


def _tally(steps: Sequence[StepResult]) -> str:
    """``6 passed · 1 failed · 1 not run`` over the steps."""
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.status] = counts.get(step.status, 0) + 1
    order = ("passed", "failed", "inconclusive", "error", "not_run")
    parts = [f"{counts[k]} {k.replace('_', ' ')}" for k in order if counts.get(k)]
    return f"{len(steps)} steps: " + " · ".join(parts) if parts else "no steps"


def _environment(report: GateReport) -> str:
    env = report.environment
    return pairs(
        [
            ("onnxgate", env.onnxgate),
            ("ONNX Runtime", env.onnxruntime),
            ("onnx", env.onnx),
            ("Python", env.python),
            ("platform", env.platform),
            ("CPU", f"{env.cpu} ({env.cores} cores)"),
            ("instruction sets", ", ".join(env.isa) or "—"),
            ("fingerprint", Html(f"<code>{esc(env.fingerprint)}</code>")),
        ]
    )


def render_html(report: GateReport, *, shadow: ShadowReport | None = None) -> str:
    """The gate's verdict as one self-contained HTML page (``report.html``).

    Args:
        report: the verdict of one ``onnxgate gate`` run.
        shadow: a shadow verdict on the same version, drawn as a section after the steps
            (the gate runs before any traffic; a page made later, from the registry, may have one).

    Returns:
        The page: inline CSS, plots as SVG data URIs, no script and no external resource.
    """
    fig = Figures()
    verdict = "passed" if report.passed else "failed"
    failed = report.failed_steps
    unsure = [s for s in report.inconclusive_steps if s not in failed]
    headline = f"{report.name}: {verdict}" + (f" ({', '.join(failed)})" if failed else "")
    if unsure:
        headline += f" (inconclusive: {', '.join(unsure)})"
    facts = [
        ("source", report.source),
        ("model sha256", report.model_sha256 or "—"),
        ("started", report.started),
        ("took", seconds_text(report.seconds)),
        ("config", f"{report.config_path} (sha256 {report.config_hash[:16]})"),
        ("run folder", report.run_dir),
    ]
    if unsure:
        facts.append(
            (
                "inconclusive",
                f"{', '.join(unsure)}: timings spoiled by other load; the gate passed "
                'because on_unreliable = "warn"',
            )
        )
    if report.registered is not None:
        reg = report.registered
        aliases = f" ({', '.join(reg.aliases)})" if reg.aliases else ""
        facts.append(("registered", f"{reg.name} v{reg.version}{aliases} in {reg.registry}"))
        if (m := reg.mlflow) is not None:
            moved = f" ({m.name}@{m.alias})" if m.alias_moved else ""
            facts.append(("MLflow", f"models:/{m.name}/{m.version}{moved} on {m.tracking_uri}"))
    details = "".join(_step(s, fig) for s in report.steps)
    toc = "".join(
        f'<a class="to-{esc(s.status)}" href="#step-{esc(s.name)}">{esc(s.name)} · '
        f"{esc(s.status.replace('_', ' '))}</a>"
        for s in report.steps
    )
    artefacts = table(
        ["role", "file", "size", "sha256"],
        [
            [a.role, a.path, size_text(a.size), Html(f"<code>{esc(a.sha256[:16])}…</code>")]
            for a in report.artefacts
        ],
        numeric=(2,),
    )
    config = esc(json.dumps(report.config, indent=2, default=str))
    shadow_link = ""
    if shadow is not None:
        status = shadow.verdict.status
        shadow_link = f'<a class="to-{esc(status)}" href="#shadow">shadow · {esc(status)}</a>'
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',
            f"<title>onnxgate gate · {esc(headline)}</title><style>{CSS}</style></head><body>",
            f'<header class="verdict {verdict}" id="verdict"><div class="inner">',
            f'<h1><span class="mark">{esc(verdict)}</span>{esc(report.name)}</h1>',
            f'<div class="tally">{esc(_tally(report.steps))}</div>',
            "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>",
            "</div></header><main>",
            f'<nav class="toc">{toc}{shadow_link}<a href="#environment">environment</a></nav>',
            f'<section class="card" id="steps"><h2>Steps</h2>{_steps_table(report)}{notes(report.notes)}</section>',
            details,
            shadow_section(shadow) if shadow is not None else "",
            f'<section class="card" id="environment"><h2>Environment</h2>{_environment(report)}</section>',
            f'<section class="card" id="artefacts"><h2>Artefacts</h2>{artefacts}'
            f"<details><summary>configuration as validated</summary><pre>{config}</pre></details></section>",
            f"<footer>{esc(report.format)} · {fig.count} plots · made by onnxgate {esc(report.environment.onnxgate)}</footer>",
            "</main></body></html>\n",
        ]
    )
