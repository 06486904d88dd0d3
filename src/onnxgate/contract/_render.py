"""Contracts and ``VerifyReport``s as text for people."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from onnxgate._inspection_render import leftover_line
from onnxgate._pathtext import shown
from onnxgate._rich import Lines, line, verdict
from onnxgate.contract._verify import Cell, VerifyReport
from onnxgate.contract_store import Contract, contract_paths

MAX_REASON = 320
"""Characters of a failing cell's reason shown; the JSON keeps the runtime's whole message."""


def render_written(contract: Contract, model: Path) -> Lines:
    """What ``contract init`` wrote beside ``model``: files, golden samples, rules, requirements."""
    contract_path, golden_path = contract_paths(Path(model))
    golden = contract.golden
    lines: Lines = [line(f"wrote {escape(shown(contract_path))} and {escape(shown(golden_path))}")]
    if golden:
        shapes = ", ".join(escape(s.label) for s in golden.samples)
        lines.append(
            line(
                f"  {len(golden.samples)} golden sample(s) from {escape(golden.produced_by)}: "
                f"{shapes}"
            )
        )
        for rule in golden.rules:
            how = rule.metric or f"allclose(atol={rule.atol:g}, rtol={rule.rtol:g})"
            lines.append(line(f"  {escape(rule.output)}: {escape(how)}"))
        if golden.skipped_outputs:
            lines.append(
                line(f"  not kept (not tensors): {escape(', '.join(golden.skipped_outputs))}")
            )
        opinion = golden.second_opinion
        if opinion is not None:
            who = f"{opinion.runner} agreed: " if opinion.agreed else ""
            lines.append(line(f"  second opinion: {escape(who + opinion.detail)}"))
    for name, bound in contract.signature.dims.items():
        if bound.min is not None:
            why = f" ({bound.why})" if bound.why else ""
            lines.append(line(f"  proves {escape(name)} {bound.min}..{bound.max}{escape(why)}"))
    for name, seen in contract.signature.observed.items():
        declared = _dims(seen.declared) if seen.declared is not None else "no shape"
        lines.append(
            line(
                f"  [yellow]{escape(name)}: declared {escape(declared)}, the model produces "
                f"{escape(_dims(seen.shape))}[/] ({escape(seen.why)}); recorded as observed"
            )
        )
    if contract.signing is not None:
        lines.append(
            line(f"  signed: {contract.signing.algorithm}, key {escape(contract.signing.key_id)}")
        )
    r = contract.requirements
    lines.append(
        line(
            f"  requires IR {r.ir_version}, opsets {r.opsets}; oldest ONNX Runtime: "
            f"{r.min_runtime or 'unknown'}"
        )
    )
    for lib in r.ops_libraries:
        version = f" {lib.version}" if lib.version else ""
        lines.append(
            line(
                f"  custom operator library: {escape(lib.name)}{version} (sha256 {lib.sha256[:12]})"
            )
        )
    return lines


def _dims(shape: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"


def _cell(cell: Cell) -> str:
    if cell.passed is None:
        return "[dim]-[/]"
    return "[green]ok[/]" if cell.passed else "[bold red]FAIL[/]"


def render_verify(report: VerifyReport) -> Lines:
    """The verification matrix: identity, then per runtime loads, placement and parity."""
    lines: Lines = [
        line(f"[bold]{escape(report.model)}[/] against {escape(report.contract)}"),
        line(
            f"  identity (sha256): {_cell(report.identity)} {escape(report.identity.reason or '')}"
        ),
    ]
    unsigned_unchecked = (
        report.signature is not None
        and report.signature.passed is None
        and "(signed:" not in (report.signature.reason or "")
    )
    if report.signature is not None and not unsigned_unchecked:  # nothing to say of no signature
        lines.append(
            line(f"  signature: {_cell(report.signature)} {escape(report.signature.reason or '')}")
        )
    if report.runs_on:
        lines.append(line(f"  [dim]{escape(report.runs_on)}[/]"))
    for finding in report.findings:
        if finding.allowed:  # a failure is in the identity's reason already
            lines.append(line(f"  {finding.code} [yellow]admitted[/]: {escape(finding.message)}"))
    for result in report.results:
        lines.append(
            line(
                f"  {escape(result.runtime)}: loads {_cell(result.loads)}  placement "
                f"{_cell(result.placement)}  parity {_cell(result.parity)}"
            )
        )
        for name, cell in (
            ("loads", result.loads),
            ("placement", result.placement),
            ("parity", result.parity),
        ):
            if cell.passed is False or (cell.reason and cell.passed):
                reason = cell.reason or ""
                if len(reason) > MAX_REASON:
                    reason = reason[: MAX_REASON - 1] + "…"
                lines.append(line(f"      {name}: [dim]{escape(reason)}[/]"))
        ran = result.ran.settings if result.ran is not None else {}
        if ran.get("backend"):  # a runtime that says which backend ran (the JavaScript ones)
            threads = ran.get("intra_op_threads") or "default"
            lines.append(
                line(
                    f"      ran: [dim]backend {escape(str(ran['backend']))}, {threads} thread(s)[/]"
                )
            )
    lines.extend(line(escape(leftover_line(left))) for left in report.leftovers)
    lines.append(line(f"{verdict(report.passed)}  on {', '.join(report.providers)}"))
    return lines


def render_signed(contract: Contract, model: Path) -> Lines:
    """What ``contract sign`` did."""
    contract_path, _ = contract_paths(Path(model))
    signing = contract.signing
    how = f"{signing.algorithm}, key {signing.key_id}" if signing else "unsigned"
    return [line(f"signed {escape(shown(contract_path))} ({escape(how)})")]
