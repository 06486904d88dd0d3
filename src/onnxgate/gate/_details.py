"""Each step's report drawn on ``report.html``: one renderer per step, named by its record.

A renderer reads the step's report as JSON (``StepResult.report``), not the library's model, so a
``report.json`` written by another onnxgate version still renders (see ``_html``). Every value
goes through ``esc``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from onnxgate.gate import _plots
from onnxgate.gate._markup import (
    Figures,
    Html,
    badge,
    esc,
    notes,
    num,
    pairs,
    ratio_text,
    size_text,
    table,
    yes,
)
from onnxgate.gate._plots import cos_text, ms_text, shape_label

MAX_DRIFT_PLOTS = 12
"""Drift plots per comparison: a model with hundreds of outputs would make a page too heavy."""


# --- accuracy -----------------------------------------------------------------------------------


def _compare_detail(report: Mapping[str, Any], fig: Figures, what: str) -> str:
    """A ``CompareReport`` (compare, or an export's parity): outputs, drift plots, samples."""
    out = [
        pairs(
            [
                ("candidate", report.get("candidate")),
                ("reference", report.get("reference")),
                ("data", report.get("data") or "—"),
                ("samples", len(report.get("samples") or [])),
            ]
        )
    ]
    outputs = list(report.get("outputs") or [])
    rows = []
    for o in outputs:
        count = f"{num(o.get('mismatches'))} / {num(o.get('elements'))}"
        rows.append(
            [
                Html(f"<code>{esc(o.get('name'))}</code>"),
                badge("passed" if o.get("passed") else "failed"),
                o.get("criterion"),
                o.get("max_abs"),
                o.get("p99_abs"),
                o.get("mean_abs"),
                o.get("max_rel"),
                cos_text(o.get("cosine")),
                count,
                o.get("reason") or "",
            ]
        )
    head = ["output", "verdict", "rule", "max abs", "p99 abs", "mean abs", "max rel", "cosine"]
    out.append(table([*head, "mismatches", "reason"], rows, numeric=range(3, 9)))
    drawn = [o for o in outputs if o.get("drift")]
    # failing outputs first, then by their largest error: the ones a reader looks for
    drawn.sort(key=lambda o: (bool(o.get("passed")), -(o.get("max_abs") or 0.0)))
    for o in drawn[:MAX_DRIFT_PLOTS]:
        svg = _plots.drift_plot(o["drift"], output=str(o.get("name")), atol=o.get("atol"))
        caption = f"Accuracy drift of output {o.get('name')} ({what})"
        out.append(fig(svg, caption, "drift"))
    if len(drawn) > MAX_DRIFT_PLOTS:
        out.append(
            f'<p class="muted">Drift of {len(drawn) - MAX_DRIFT_PLOTS} more outputs is in '
            "report.json (the failing and largest errors are drawn).</p>"
        )
    divergence = report.get("first_divergence")
    if divergence and divergence.get("node"):
        out.append("<h3>First diverging node</h3>")
        replay = divergence.get("replay") or {}
        out.append(
            pairs(
                [
                    ("node", divergence.get("node")),
                    ("op type", divergence.get("op_type")),
                    ("sample", divergence.get("sample")),
                    ("then", ", ".join(divergence.get("chain") or []) or "—"),
                    ("replayed alone", replay.get("statement") or "—"),
                ]
            )
        )
    samples = report.get("samples") or []
    if samples:
        rows = [
            [
                s.get("label"),
                badge("passed" if s.get("passed") else "failed"),
                ", ".join(s.get("failing") or []) or "",
                ms_text(s.get("candidate_ms")),
                ms_text(s.get("reference_ms")),
            ]
            for s in samples
        ]
        listing = table(
            ["sample", "verdict", "failing", "candidate", "reference"], rows, numeric=(3, 4)
        )
        out.append(f"<details><summary>{len(samples)} samples</summary>{listing}</details>")
    out.append(notes(report.get("notes") or []))
    return "".join(out)


def _contract_detail(report: Mapping[str, Any]) -> str:
    """An adopted ``.onnx`` model's contract: signature, requirements, golden samples, rules."""
    signature = report.get("signature") or {}
    rows = [
        [side, Html(f"<code>{esc(t.get('name'))}</code>"), t.get("dtype"), _shape(t.get("shape"))]
        for side in ("inputs", "outputs")
        for t in signature.get(side) or []
    ]
    out = ["<h3>Signature</h3>", table(["", "name", "dtype", "shape"], rows)]
    needs = report.get("requirements") or {}
    opsets = ", ".join(f"{k} {v}" for k, v in (needs.get("opsets") or {}).items())
    golden = report.get("golden") or {}
    opinion = golden.get("second_opinion") or {}
    out.append(
        pairs(
            [
                ("IR version", needs.get("ir_version")),
                ("opsets", opsets or "—"),
                ("oldest ONNX Runtime", needs.get("min_runtime") or "—"),
                ("golden outputs by", golden.get("produced_by") or "—"),
                ("second opinion", opinion.get("detail") or "—"),
            ]
        )
    )
    samples = golden.get("samples") or []
    if samples:
        out.append("<h3>Golden samples</h3>")
        out.append(
            table(
                ["sample", "inputs", "outputs"],
                [
                    [
                        s.get("label"),
                        ", ".join(s.get("inputs") or []),
                        ", ".join(s.get("outputs") or []),
                    ]
                    for s in samples
                ],
            )
        )
    rules = golden.get("rules") or []
    if rules:
        out.append(
            table(
                ["output", "atol", "rtol", "metric"],
                [
                    [r.get("output"), r.get("atol"), r.get("rtol"), r.get("metric") or "allclose"]
                    for r in rules
                ],
                numeric=(1, 2),
            )
        )
    return "".join(out)


def _shape(shape: object) -> str:
    if not isinstance(shape, list):
        return "—"
    return "[" + ", ".join(str(d) for d in shape) + "]"


# --- steps --------------------------------------------------------------------------------------


def check(report: Mapping[str, Any], fig: Figures) -> str:
    out = []
    for runtime, found in (report.get("runtimes") or {}).items():
        counts = found.get("counts") or {}
        said = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no findings"
        out.append(
            f"<h3>{esc(runtime)} {badge('passed' if found.get('passed') else 'failed')}</h3>"
            f'<p class="muted">predicted to load: {yes(found.get("predicted_load"))} · '
            f"providers {esc(', '.join(found.get('providers') or []))} · {esc(said)}</p>"
        )
        findings = found.get("findings") or []
        if findings:
            rows = [
                [
                    badge(str(f.get("severity"))),
                    Html(f"<code>{esc(f.get('code'))}</code>"),
                    f.get("message"),
                    f.get("node") or f.get("tensor") or "",
                    f.get("hint") or "",
                ]
                for f in findings
            ]
            out.append(table(["severity", "rule", "finding", "where", "what to do"], rows))
    return "".join(out)


def export(report: Mapping[str, Any], fig: Figures) -> str:
    if "parity" in report and isinstance(report["parity"], Mapping):  # an ExportReport
        facts = [
            ("exported from", report.get("source")),
            ("exporter", report.get("exporter")),
            ("opset / IR", f"{report.get('opset')} / {report.get('ir_version')}"),
        ]
        head = pairs((k, v) for k, v in facts if v is not None)
        return (
            head
            + notes(report.get("notices") or [])
            + _compare_detail(report["parity"], fig, "export parity")
        )
    if "outputs" in report and "samples" in report:
        return _compare_detail(report, fig, "export parity")
    if "signature" in report:
        return _contract_detail(report)
    return ""


def compare(report: Mapping[str, Any], fig: Figures) -> str:
    return _compare_detail(report, fig, "compare")


def verify(report: Mapping[str, Any], fig: Figures) -> str:
    identity = report.get("identity") or {}
    out = [
        f"<p>files match the contract: {yes(identity.get('passed'))}"
        f"{' — ' + esc(identity.get('reason')) if identity.get('reason') else ''}</p>"
    ]
    rows = []
    for result in report.get("results") or []:
        ran = (result.get("ran") or {}).get("settings") or {}
        backend = (
            f'<div class="muted">backend {esc(ran["backend"])}, '
            f"{esc(ran.get('intra_op_threads') or 'default')} thread(s)</div>"
            if ran.get("backend")
            else ""
        )
        row: list[object] = [Html(f"<strong>{esc(result.get('runtime'))}</strong>{backend}")]
        for check in ("loads", "placement", "parity"):
            found = result.get(check) or {}
            reason = (
                f'<div class="muted">{esc(found.get("reason"))}</div>'
                if found.get("reason")
                else ""
            )
            row.append(Html(f"{yes(found.get('passed'))}{reason}"))
        rows.append(row)
    out.append(table(["runtime", "loads", "placement", "parity"], rows))
    return "".join(out)


def placement(report: Mapping[str, Any], fig: Figures) -> str:
    out = [
        pairs(
            [
                ("runtime", report.get("runtime")),
                ("method", report.get("method")),
                ("requested", ", ".join(report.get("requested") or []) or "default"),
                ("session providers", ", ".join(report.get("session_providers") or [])),
                ("required", report.get("required") or "—"),
                ("copies between providers", report.get("memcpy", 0)),
            ]
        )
    ]
    out.append(fig(_plots.placement_plot(report), "Nodes per provider, by op type", "placement"))
    for key, title in (
        ("fallback", "Fallback nodes (not on the first requested provider)"),
        ("violations", "Nodes off the required provider"),
        ("exempted", "Exempted by allow_ops"),
    ):
        nodes = report.get(key) or []
        if key == "fallback" or nodes:
            out.append(f"<h3>{esc(title)}</h3>")
            if not nodes:
                out.append(
                    '<p class="muted">None: every compute node is where it was asked to run.</p>'
                )
                continue
            rows = [
                [
                    Html(f"<code>{esc(n.get('node'))}</code>"),
                    n.get("op_type"),
                    n.get("domain"),
                    n.get("provider"),
                ]
                for n in nodes
            ]
            out.append(table(["node", "op type", "domain", "provider"], rows))
    out.append(notes(report.get("notes") or []))
    return "".join(out)


def tune(report: Mapping[str, Any], fig: Figures) -> str:
    kept = (
        "the winner replaced the defaults"
        if report.get("replaced_defaults")
        else "ONNX Runtime's defaults kept"
    )
    interval = report.get("interval") or [None, None]
    out = [
        pairs(
            [
                ("choice", kept),
                ("objective", report.get("objective")),
                (
                    "shape",
                    ", ".join(f"{k}={v}" for k, v in (report.get("shape") or {}).items()) or "—",
                ),
                (
                    "speed-up",
                    f"{ratio_text(report.get('ratio'))} (90% interval {ratio_text(interval[0])} – "
                    f"{ratio_text(interval[1])})",
                ),
                ("required gain", f"{(report.get('min_gain') or 0) * 100:g}%"),
                ("candidates searched", report.get("candidates")),
                ("graph", report.get("graph")),
            ]
        )
    ]
    out.append(
        fig(_plots.tune_plot(report), "ONNX Runtime's defaults against the tuned settings", "tune")
    )
    rows = []
    for side in ("defaults", "best"):
        t = report.get(side) or {}
        rows.append(
            [
                t.get("label"),
                ms_text(t.get("p50_ms")),
                ms_text(t.get("p90_ms")),
                ms_text(t.get("mean_ms")),
                t.get("cv"),
                t.get("throughput"),
                t.get("runs"),
            ]
        )
    out.append(
        table(
            ["settings", "p50", "p90", "mean", "cv", "samples/s", "runs"], rows, numeric=range(1, 7)
        )
    )
    settings = report.get("settings") or {}
    out.append("<h3>Settings kept</h3>")
    out.append(
        pairs(
            [(k, json.dumps(v) if isinstance(v, dict | list) else v) for k, v in settings.items()]
        )
    )
    gate = report.get("gate") or []
    if gate:
        rows = [
            [
                g.get("graph"),
                g.get("level"),
                badge("passed" if g.get("passed") else "failed"),
                g.get("reason") or g.get("note") or "",
            ]
            for g in gate
        ]
        out.append("<h3>Parity gate</h3>" + table(["graph", "level", "parity", "note"], rows))
    return "".join(out)


def quantize(report: Mapping[str, Any], fig: Figures) -> str:
    settings = report.get("settings") or {}
    low = settings.get("to", "int8")
    high = "float" if low == "int8" else "fp32"
    before, after = report.get("size_before"), report.get("size_after")
    size = f"{size_text(before)} → {size_text(after)}" if after else size_text(before)
    speed = report.get("speed") or {}
    out = [
        pairs(
            [
                ("written", report.get("out") or "nothing (see the reason)"),
                (
                    "mode",
                    f"{settings.get('mode')}, {settings.get('format')}, per-channel {num(settings.get('per_channel'))}"
                    if settings.get("to", "int8") == "int8"
                    else f"{settings['to']} (inputs and outputs float32)",
                ),
                ("evaluation data", (report.get("evaluation") or {}).get("source")),
                (
                    "integer nodes" if settings.get("to", "int8") == "int8" else "float16 nodes",
                    report.get("quantized_nodes"),
                ),
                *([("where it pays", report["gain"])] if report.get("gain") else []),
                ("size", size),
                ("speed", speed.get("note") or "—"),
            ]
        )
    ]
    if report.get("reason"):
        out.append(f'<p class="reason">{esc(report["reason"])}</p>')
    rows = [
        [
            Html(f"<code>{esc(g.get('output'))}</code>"),
            badge("passed" if g.get("passed") else "failed"),
            g.get("rule"),
            cos_text(g.get("value")) if g.get("metric") == "cosine" else g.get("value"),
            g.get("drop"),
            cos_text(g.get("worst")),
            g.get("worst_row"),
            g.get("reason") or "",
        ]
        for g in report.get("gate") or []
    ]
    out.append("<h3>Accuracy against the float model</h3>")
    out.append(
        table(
            ["output", "verdict", "rule", "value", "drop", "worst row", "row", "reason"],
            rows,
            numeric=(3, 4, 5, 6),
        )
    )
    for g in report.get("gate") or []:
        if g.get("drift"):
            floor = (
                1.0 - float(report.get("max_drop") or 0) if g.get("metric") == "cosine" else None
            )
            svg = _plots.drift_plot(
                g["drift"], output=str(g.get("output")), floor=floor, floor_rule="mean row cosine"
            )
            out.append(
                fig(
                    svg,
                    f"Accuracy drift of output {g.get('output')}: {low} against {high}",
                    "drift",
                )
            )
    out.append(f"<h3>Kept in {high}</h3>")
    excluded = report.get("excluded") or []
    if excluded:
        rows = [
            [Html(f"<code>{esc(n.get('node'))}</code>"), n.get("op_type"), n.get("score")]
            for n in excluded
        ]
        out.append(
            table(["node", "op type", f"error with only this node in {low}"], rows, numeric=(2,))
        )
    else:
        out.append(f'<p class="muted">No node: every candidate node is in {low}.</p>')
    float_ops = report.get("float_ops") or {}
    if float_ops:
        out.append(
            f'<p class="muted">Left in float by op type: {esc(", ".join(f"{k} {v}" for k, v in float_ops.items()))}</p>'
        )
    out.append(
        fig(
            _plots.ranking_plot(report),
            f"Why these nodes: each node's share of the {low} error",
            "ranking",
        )
    )
    out.append(
        fig(
            _plots.quantize_latency_plot(report),
            f"Latency of the {high} and the {low} model",
            "quantize-latency",
        )
    )
    attempts = report.get("attempts") or []
    if attempts:
        rows = [
            [
                len(a.get("excluded") or []),
                ", ".join(a.get("excluded") or []) or "—",
                badge("passed" if a.get("passed") else "failed"),
                a.get("worst"),
            ]
            for a in attempts
        ]
        listing = table(["kept in float", "nodes", "verdict", "error"], rows, numeric=(0, 3))
        out.append(f"<details><summary>{len(attempts)} attempts</summary>{listing}</details>")
    out.append(notes(report.get("notices") or []))
    out.append(notes(report.get("warnings") or [], warn=True))
    return "".join(out)


def bench(report: Mapping[str, Any], fig: Figures) -> str:
    vs = report.get("vs") or {}
    contender = vs.get("name")
    out = [
        pairs(
            [
                ("runtime", report.get("runtime")),
                ("providers", ", ".join(report.get("providers") or [])),
                ("contender", f"{contender} ({vs.get('runtime')})" if contender else "—"),
                ("method", report.get("method") or "—"),
            ]
        )
    ]
    for svg, caption in _plots.latency_plots(report, contender):
        out.append(fig(svg, caption, "latency"))
    ratios = {shape_label(r): r.get("ratio") for r in report.get("ratio") or []}
    # a ratio that is not a measurement is shown only with its qualifier
    doubted = {shape_label(r) for r in report.get("ratio") or [] if r.get("reasons")}
    rows = []
    sides = [("model", report.get("results") or [])]
    if contender:
        sides.append((_plots.short_name(contender), vs.get("results") or []))
    for name, results in sides:
        for r in results:
            label = shape_label(r)
            rows.append(
                [
                    label,
                    name,
                    r.get("runs"),
                    ms_text(r.get("p50_ms")),
                    ms_text(r.get("p90_ms")),
                    ms_text(r.get("p99_ms")),
                    ms_text(r.get("mean_ms")),
                    r.get("cv"),
                    r.get("throughput"),
                    (
                        f"{ratios[label]:.2f}×" + (" (unreliable)" if label in doubted else "")
                        if name == "model" and ratios.get(label)
                        else ""
                    ),
                ]
            )
    out.append(
        table(
            ["shape", "side", "runs", "p50", "p90", "p99", "mean", "cv", "samples/s", "speed-up"],
            rows,
            numeric=range(2, 10),
        )
    )
    out.append(_bench_runtimes(report.get("runtimes") or {}))
    out.append(notes(report.get("warnings") or [], warn=True))
    return "".join(out)


def _bench_runtimes(runtimes: Mapping[str, Any]) -> str:
    """The same shapes timed on the other target runtimes: what ran (backend, threads), p50."""
    rows = []
    for target, other in runtimes.items():
        ran = other.get("session") or {}
        backend = ran.get("backend") or ", ".join(other.get("providers") or [])
        for r in other.get("results") or []:
            rows.append(
                [
                    Html(f"<strong>{esc(target)}</strong>"),
                    other.get("runtime"),
                    backend,
                    ran.get("intra_op_threads") or "default",
                    shape_label(r),
                    r.get("runs"),
                    ms_text(r.get("p50_ms")),
                    ms_text(r.get("p99_ms")),
                    "no" if other.get("reliable") is False else "yes",
                ]
            )
    if not rows:
        return ""
    head = ["target", "ran", "backend", "threads", "shape", "runs", "p50", "p99", "reliable"]
    return "<h4>on the other target runtimes</h4>" + table(head, rows, numeric=range(5, 8))


def mobile(report: Mapping[str, Any], fig: Figures) -> str:
    operators = report.get("operators") or {}
    rows = [[domain, ", ".join(ops)] for domain, ops in operators.items()]
    p50 = report.get("p50_ms") or {}
    out = [
        pairs(
            [
                ("runtime", report.get("runtime")),
                ("optimisation style", report.get("optimization_style")),
                ("files", ", ".join(report.get("files") or [])),
                (
                    "size",
                    f".onnx {num(report.get('onnx_mb'))} MB, .ort {num(report.get('ort_mb'))} MB",
                ),
                ("golden samples", report.get("parity")),
                (
                    "peak RSS",
                    f"{num(report.get('model_rss_mb'))} MB the model's, "
                    f"{num(report.get('peak_rss_mb'))} MB the whole process's",
                ),
                ("single-thread p50", ", ".join(f"{k} {ms_text(v)}" for k, v in p50.items())),
            ]
        ),
        table(["domain;opset", "operators"], rows),
    ]
    out.append(notes([*(report.get("unreliable") or []), *(report.get("notes") or [])], warn=True))
    return "".join(out)


def web(report: Mapping[str, Any], fig: Figures) -> str:
    rows = [
        [o.get("name"), yes(o.get("passed")), num(o.get("max_abs")), num(o.get("cosine"))]
        for o in report.get("outputs") or []
    ]
    out = [
        pairs(
            [
                ("ran", report.get("runtime")),
                ("backend", report.get("backend")),
                ("threads", report.get("threads")),
                ("cross-origin isolated", report.get("cross_origin_isolated")),
                ("file", f"web/{report.get('model_file')} ({num(report.get('size_mb'))} MB)"),
                ("files", ", ".join(report.get("files") or [])),
                ("golden samples in the browser", report.get("parity")),
            ]
        ),
        table(["output", "passed", "max_abs", "cosine"], rows, numeric=range(2, 4)),
    ]
    out.append(notes(report.get("notes") or []))
    return "".join(out)
