"""Text renderings of registry records: rich renderables that fit 80 columns, printed by the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.markup import escape
from rich.table import Table

from onnxgate._rich import Lines, line
from onnxgate.registry._records import (
    FetchResult,
    FsckReport,
    ModelSummary,
    ModelVersion,
    ShadowRunRecord,
    VersionDetail,
)
from onnxgate.shadow import ShadowReport, ShadowRunInfo

_STATUS = {"ready": "[green]ready[/]", "failed": "[red]failed[/]"}
_VERDICT = {
    "passed": "[bold green]PASSED[/]",
    "failed": "[bold red]FAILED[/]",
    "inconclusive": "[bold yellow]INCONCLUSIVE[/]",
}
_STEP = {
    "passed": "[green]passed[/]",
    "failed": "[bold red]failed[/]",
    "error": "[bold red]error[/]",
    "not_run": "[dim]not run[/]",
}


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M")


def _size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _table(*columns: str, whole: tuple[str, ...] = ()) -> Table:
    """A borderless table; cells fold at the width, except those of ``whole`` columns."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in whole)
    return table


def _figures(figures: dict[str, Any], limit: int = 6) -> str:
    shown = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in list(figures.items())[:limit]
    ]
    more = len(figures) - limit
    return ", ".join(shown) + (f", … (+{more})" if more > 0 else "")


def render_models(models: list[ModelSummary], registry: str) -> Lines:
    """The table of ``registry list``."""
    if not models:
        return [line(f"no registered models in {escape(registry)}")]
    table = _table("MODEL", "VERSIONS", "LATEST", "ALIASES", "UPDATED")
    for m in models:
        aliases = ", ".join(f"{escape(a)}→{n}" for a, n in m.aliases.items()) or "[dim]-[/]"
        table.add_row(
            escape(m.name), str(m.versions), str(m.latest or "-"), aliases, _when(m.updated_at)
        )
    return [table]


def render_versions(name: str, versions: list[ModelVersion]) -> Lines:
    """The table of ``registry list NAME``."""
    table = _table("VERSION", "STATUS", "ALIASES", "CREATED", "BY", "MODEL SHA256")
    for v in versions:
        table.add_row(
            f"{escape(name)}@{v.number}",
            _STATUS.get(v.status, escape(v.status)),
            escape(", ".join(v.aliases)) or "[dim]-[/]",
            _when(v.created_at),
            escape(v.created_by),
            (v.artefacts.get("model") or "-")[:12],
        )
    return [table]


def render_detail(detail: VersionDetail) -> Lines:
    """The page of ``registry show``."""
    v = detail.version
    aliases = f"  [bold]@{escape(', @'.join(v.aliases))}[/]" if v.aliases else ""
    lines: Lines = [
        line(f"[bold]{escape(v.ref)}[/]  {_STATUS.get(v.status, escape(v.status))}{aliases}"),
        line(f"  registered {_when(v.created_at)} UTC by {escape(v.created_by)}"),
    ]
    if detail.description:
        lines.append(line(f"  {escape(detail.description)}"))
    if detail.tags:
        tags = ", ".join(f"{k}={val}" for k, val in sorted(detail.tags.items()))
        lines.append(line(f"  tags: {escape(tags)}"))
    source = ", ".join(f"{k}={val}" for k, val in detail.source.items() if val is not None)
    if source:
        lines.append(line(f"  source: {escape(source)}"))
    lines.append(line())
    artefacts = _table("ROLE", "FILE", "SIZE", "SHA256")
    for a in detail.artefacts:
        artefacts.add_row(escape(a.role), escape(a.filename), _size(a.size), a.sha256[:16])
    lines += [line("[bold]artefacts[/]"), artefacts]
    for index, run in enumerate(detail.gate_runs):
        verdict = "[bold green]PASS[/]" if run.passed else "[bold red]FAIL[/]"
        which = "registering gate run" if index == 0 else f"gate run {run.id}"
        lines += [
            line(),
            line(f"[bold]{which}[/] {verdict}  {run.seconds:.1f}s"),
            line(f"  started {escape(run.started)}, machine {escape(run.fingerprint)}"),
        ]
        steps = _table("STEP", "STATUS", "SECONDS", "SUMMARY")
        for s in run.steps:
            steps.add_row(
                escape(s.name),
                _STEP.get(s.status, escape(s.status)),
                f"{s.seconds:.1f}",
                escape(s.reason if s.status in ("failed", "error") and s.reason else s.summary),
            )
        lines.append(steps)
    if detail.performance:
        table = _table("MACHINE", "STEP", "FIGURES")
        for p in detail.performance:
            table.add_row(escape(p.fingerprint), escape(p.step), escape(_figures(p.figures)))
        lines += [line(), line("[bold]performance[/] (per machine fingerprint)"), table]
    if detail.promotions:
        table = _table("ALIAS", "WHEN", "BY", "FROM", "NOTE")
        for p in detail.promotions:
            note = f"[bold red]FORCED[/]: {escape(p.reason or '')}" if p.forced else ""
            if not p.forced and p.reason:
                note = escape(p.reason)
            table.add_row(
                "@" + escape(p.alias),
                _when(p.at),
                escape(p.by),
                str(p.previous) if p.previous else "-",
                note,
            )
        lines += [line(), line("[bold]promotions[/] onto this version"), table]
        for p in detail.promotions:
            if p.evidence and p.evidence.get("kind") == "shadow":
                lines += _evidence(p.alias, p.evidence)
    return lines + _shadow_runs(detail.shadow_runs)


def _shadow_runs(runs: list[ShadowRunRecord]) -> Lines:
    """The runs a version was judged in, with where to read their verdict; those it was beside."""
    lines: Lines = []
    judged = [r for r in runs if r.role == "candidate"]
    if judged:
        failed = [f"[bold red]{r.failed}[/]" if r.failed else "0" for r in judged]
        table = _runs_table(judged, "FAILED", failed)
        lines += [line(), line("[bold]shadow runs[/] of this version as the candidate"), table]
        for champion in dict.fromkeys(r.champion for r in judged):  # one verdict per champion
            command = f"onnxgate registry shadow-report {judged[0].candidate} --against "
            lines.append(line(f"  [dim]verdict:[/] {escape(command + champion.rsplit('@', 1)[1])}"))
    beside = [r for r in runs if r.role == "champion"]
    if beside:
        lines += [
            line(),
            line(f"[bold]shadow runs[/] with this version as the champion: {len(beside)}"),
        ]
        for candidate in dict.fromkeys(r.candidate for r in beside):
            of = [r for r in beside if r.candidate == candidate]
            lines.append(
                line(
                    f"  {escape(candidate)}: {len(of)} run(s), {sum(r.pairs for r in of)} "
                    f"request(s), {sum(r.failed for r in of)} failed"
                )
            )
    return lines


def _evidence(alias: str, evidence: dict[str, Any]) -> Lines:
    """A shadow verdict's figures recorded with a promotion, beside the gate's."""
    buckets = ", ".join(f"{b}: {n}" for b, n in (evidence.get("buckets") or {}).items())
    lines: Lines = [
        line(),
        line(
            f"[bold]shadow verdict[/] of @{escape(alias)}: "
            f"{_VERDICT.get(str(evidence.get('status')), '?')}  {evidence.get('pairs')} "
            f"request(s) against {escape(str(evidence.get('champion')))}"
        ),
    ]
    if buckets:
        lines.append(line(f"  buckets: {escape(buckets)}"))
    table = _table("OUTPUT", "RULE", "FAILED", "MIN COSINE", "MAX ABS", "MIN TOP-1")
    for name, o in (evidence.get("outputs") or {}).items():
        table.add_row(
            escape(name),
            escape(str(o.get("rule", ""))),
            f"{o.get('failed')}/{o.get('pairs')}",
            _num(o.get("min_cosine")),
            _num(o.get("worst_max_abs")),
            _num(o.get("min_top1")),
        )
    return [*lines, table]


def _runs_table(
    runs: Sequence[ShadowRunInfo | ShadowRunRecord], column: str, cells: list[str]
) -> Table:
    """Shadow runs, one a row, against their champion; ``column`` holds ``cells``, one a run."""
    table = _table("RUN", "AGAINST", "HOST", "STARTED", "REQUESTS", column)
    for r, cell in zip(runs, cells, strict=True):
        table.add_row(
            str(r.id), escape(r.champion), escape(r.host), _when(r.started_at), str(r.pairs), cell
        )
    return table


def _num(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "-"


def render_shadow(report: ShadowReport) -> Lines:
    """The page of ``registry shadow-report``: verdict, reasons, outputs, buckets, worst requests."""
    v = report.verdict
    c = v.criteria
    lines: Lines = [
        line(
            f"[bold]{escape(report.candidate)}[/] in shadow against "
            f"[bold]{escape(report.champion)}[/] (@{escape(report.against)}): "
            f"{_VERDICT[v.status]}"
        ),
        line(
            f"  {v.pairs} judged, {v.failed_pairs} failed; needs {c.min_pairs}, "
            f"{c.min_per_bucket} per bucket, failure rate <= {c.max_failure_rate:g}"
        ),
    ]
    lines += [line(f"  [red]•[/] {escape(r)}") for r in v.reasons]
    lines += [line(f"  [dim]{escape(n)}[/]") for n in report.notes]
    if v.outputs:
        table = _table("OUTPUT", "RULE", "FAILED", "MIN COSINE", "MAX ABS", "MIN TOP-1")
        for o in v.outputs:
            failed = f"{o.failed}/{o.pairs}"
            table.add_row(
                escape(o.output),
                escape(o.rule),
                failed if o.passed else f"[bold red]{failed}[/]",
                _num(o.min_cosine),
                _num(o.worst_max_abs),
                _num(o.min_top1),
            )
        lines += [line(), table]
    if v.buckets:
        table = _table("BUCKET", "REQUESTS")
        for bucket, count in v.buckets.items():
            short = count < c.min_per_bucket
            table.add_row(escape(bucket), f"[yellow]{count}[/]" if short else str(count))
        lines += [line(), table]
    if report.runs:
        counted = ["yes" if r.counted else "[yellow]no[/]" for r in report.runs]
        lines += [line(), _runs_table(report.runs, "COUNTED", counted)]
    if report.worst:
        table = _table(
            "PAIR", "BUCKET", "FAILED", "MIN COSINE", "MAX ABS", "INPUT SHA256",
            whole=("PAIR", "BUCKET", "INPUT SHA256"),
        )  # fmt: skip
        for w in report.worst:
            kept = " (kept)" if w.inputs_kept else ""
            table.add_row(
                str(w.id),
                escape(w.bucket),
                escape("\n".join(w.failed_outputs)) or "-",  # one output per line
                _num(w.min_cosine),
                _num(w.max_abs),
                w.input_digest[:16] + kept,
            )
        lines += [
            line(),
            line("[bold]worst requests[/] (failing first, then lowest cosine)"),
            table,
        ]
    return lines


def render_promoted(version: ModelVersion, alias: str, forced: bool) -> Lines:
    """The line ``registry promote`` prints."""
    how = " [bold red](forced; reason recorded)[/]" if forced else ""
    return [line(f"{escape(version.name)}@{escape(alias)} → version {version.number}{how}")]


def render_fetch(result: FetchResult) -> Lines:
    """What ``registry fetch`` wrote."""
    lines: Lines = [
        line(f"fetched [bold]{escape(result.version.ref)}[/] into {escape(result.out)}")
    ]
    table = _table("ROLE", "FILE", "SIZE", "SHA256 (checked)")
    for f in result.files:
        table.add_row(escape(f.role), escape(f.path), _size(f.size), f.sha256[:16])
    lines.append(table)
    if result.model_path:
        lines.append(line(f"verify it here: onnxgate verify {escape(result.model_path)}"))
    return lines


def render_fsck(report: FsckReport) -> Lines:
    """The verdict of ``registry fsck``."""
    lines: Lines = [
        line(f"registry {escape(report.registry)}"),
        line(f"store    {escape(report.store)}"),
        line(
            f"  {report.models} model(s), {report.versions} version(s), {report.artefacts} "
            f"artefact(s); {report.blobs} blob(s), {_size(report.blob_bytes)}"
            + ("" if report.hashed else " (sizes checked, not sha256)")
        ),
    ]
    if report.problems:
        table = _table("PROBLEM", "WHERE", "DETAIL")
        for p in report.problems:
            table.add_row(f"[red]{escape(p.kind)}[/]", escape(p.where), escape(p.detail))
        lines.append(table)
    for label, items in (
        ("orphan blob(s), referenced by no version", report.orphans),
        ("temporary file(s) in the store", report.temp_files),
        ("stray file(s) in the blob folder", report.stray),
    ):
        if items:
            lines.append(line(f"  {len(items)} {label}"))
    if report.removed:
        lines.append(line(f"  removed {len(report.removed)} file(s)"))
    elif report.orphans or report.temp_files:
        lines.append(line("  [dim]remove them with --remove (older than --min-age only)[/]"))
    verdict = "[bold green]CONSISTENT[/]" if report.consistent else "[bold red]INCONSISTENT[/]"
    lines.append(line(verdict))
    return lines
