"""``onnxgate contract init MODEL`` and ``onnxgate verify MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from onnxgate.cli._common import (
    FORMAT_HELP,
    Format,
    emit_json,
    finish,
    handles_errors,
    out,
    progress_line,
)
from onnxgate.cli._options import (
    AtolOpt,
    DimOpt,
    InputsOpt,
    MetricOpt,
    OptLevelOpt,
    ProviderOptionOpt,
    ProvidersOpt,
    RangeOpt,
    RtolOpt,
    SeedOpt,
    SessionConfigOpt,
    ThreadsOpt,
    TolOpt,
    compare_config,
    ort_options,
)
from onnxgate.contract import Cell, VerifyReport, contract_paths, init_contract, verify
from onnxgate.data import parse_dims, parse_ranges
from onnxgate.runners import SPEC_HELP

contract_app = typer.Typer(
    name="contract",
    help="The deployment contract written beside a model: `<model>.contract.json` and "
    "`<model>.golden.npz`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@contract_app.command("init")
@handles_errors
def init_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    reference: Annotated[
        str,
        typer.Option("--reference", help=f"Where the golden outputs come from: {SPEC_HELP}"),
    ] = "reference",
    inputs: InputsOpt = None,
    dim: DimOpt = None,
    value_range: RangeOpt = None,
    seed: SeedOpt = 0,
    atol: AtolOpt = None,
    rtol: RtolOpt = None,
    tol: TolOpt = None,
    metric: MetricOpt = None,
    trust_pickle: Annotated[
        bool, typer.Option("--trust-pickle", help="Allow a sklearn: reference to be unpickled.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing contract.")] = False,
    no_second_opinion: Annotated[
        bool,
        typer.Option(
            "--no-second-opinion",
            help="Keep the golden outputs without a second runner's agreement, for models the "
            "second runner cannot run; the contract records it.",
        ),
    ] = False,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Write the contract of a model exported elsewhere.

    Records the sha256 of the model and its external-data files, the signature with the dims the
    golden samples were made at, the requirements (IR, opsets, custom domains, the oldest ONNX
    Runtime release that admits them) and golden samples: inputs (synthetic with every symbolic
    dimension at 1 and at 7 unless --inputs or --dim say otherwise) with the outputs of
    `--reference` (the ONNX reference evaluator by default, with onnxgate's corrections of its
    known bugs; it shares no code with ONNX Runtime), and the tolerance each output will be
    verified with.

    A second opinion checks the golden outputs before anything is written: ONNX Runtime with
    optimisations off when they come from the reference evaluator or a framework, the reference
    evaluator when they come from ONNX Runtime. If the two disagree, nothing is written, the
    command exits 1 and names the first diverging node, replayed alone on both.

    Exit codes: 0 written; 1 the reference failed on the model or the second opinion disagrees;
    2 bad options, a malformed model or an existing contract without --force; 3 a missing extra,
    or the reference evaluator crashed on the model (take the golden outputs from ONNX Runtime:
    `--reference ort:disable`).
    """
    config = compare_config(atol, rtol, tol, metric)
    with progress_line(fmt == Format.text) as progress:
        contract = init_contract(
            model,
            reference=reference,
            inputs=inputs,
            dims=parse_dims(dim),
            ranges=parse_ranges(value_range),
            seed=seed,
            config=config,
            trust_pickle=trust_pickle,
            force=force,
            second_opinion=not no_second_opinion,
            progress=progress,
        )
    if fmt == Format.json:
        emit_json(contract.model_dump(mode="json"))
        return
    contract_path, golden_path = contract_paths(Path(model))
    golden = contract.golden
    out.print(f"wrote {escape(str(contract_path))} and {escape(str(golden_path))}")
    if golden:
        shapes = ", ".join(escape(s.label) for s in golden.samples)
        out.print(
            f"  {len(golden.samples)} golden sample(s) from {escape(golden.produced_by)}: {shapes}"
        )
        for rule in golden.rules:
            how = rule.metric or f"allclose(atol={rule.atol:g}, rtol={rule.rtol:g})"
            out.print(f"  {escape(rule.output)}: {escape(how)}")
        if golden.skipped_outputs:
            out.print(f"  not kept (not tensors): {escape(', '.join(golden.skipped_outputs))}")
        opinion = golden.second_opinion
        if opinion is not None:
            who = f"{opinion.runner} agreed: " if opinion.agreed else ""
            out.print(f"  second opinion: {escape(who + opinion.detail)}")
    r = contract.requirements
    out.print(
        f"  requires IR {r.ir_version}, opsets {r.opsets}; oldest ONNX Runtime: {r.min_runtime or 'unknown'}"
    )


def _cell(cell: Cell) -> str:
    if cell.passed is None:
        return "[dim]-[/]"
    return "[green]ok[/]" if cell.passed else "[bold red]FAIL[/]"


def render(report: VerifyReport) -> None:
    """Print the verification matrix."""
    out.print(f"[bold]{escape(report.model)}[/] against {escape(report.contract)}")
    out.print(
        f"  identity (sha256): {_cell(report.identity)} {escape(report.identity.reason or '')}"
    )
    for result in report.results:
        out.print(
            f"  {escape(result.runtime)}: loads {_cell(result.loads)}  placement "
            f"{_cell(result.placement)}  parity {_cell(result.parity)}"
        )
        for name, cell in (
            ("loads", result.loads),
            ("placement", result.placement),
            ("parity", result.parity),
        ):
            if cell.passed is False or (cell.reason and cell.passed):
                reason = cell.reason or ""
                if len(reason) > 320:  # the JSON keeps the runtime's whole message
                    reason = reason[:319] + "…"
                out.print(f"      {name}: [dim]{escape(reason)}[/]")
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    out.print(f"{verdict}  on {', '.join(report.providers)}")


@handles_errors
def verify_command(
    model: Annotated[
        Path,
        typer.Argument(help="The .onnx model (its contract lies beside it).", show_default=False),
    ],
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            "-r",
            help="Runtimes to verify on, comma-separated or repeated: 'installed' (default), "
            "releases such as onnxruntime==1.16.3, or other ONNX Runtime packages such as "
            "onnxruntime-openvino==1.24.1, each run in an isolated environment.",
            show_default=False,
        ),
    ] = None,
    providers: ProvidersOpt = None,
    provider_option: ProviderOptionOpt = None,
    opt_level: OptLevelOpt = "all",
    threads: ThreadsOpt = 0,
    session_config: SessionConfigOpt = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help=FORMAT_HELP)] = Format.text,
) -> None:
    """Does the contract hold on this host, or on named ONNX Runtime releases?

    Before anything runs, the model's and its side files' sha256 must match the contract. Then,
    per runtime: the model loads; every compute node is on the first requested provider
    (CPU by default); every golden sample is within its output's rule. Several runtimes give a
    matrix with the reason for each failing cell. Every check on every runtime applies the same
    session settings (providers with their options, level, threads, config entries), and the
    JSON report says what each session applied; where placement must run the model (releases
    before 1.24) it runs the golden samples.

    Examples: `onnxgate verify model.onnx -r installed -r onnxruntime==1.20.1` · `onnxgate verify
    model.onnx -r onnxruntime-openvino==1.24.1 --providers openvino` (the providers are asked of
    every runtime named: one that lacks them exits 3)

    Exit codes: 0 every cell passed; 1 a cell failed or the model changed; 2 no contract, or a
    damaged one; 3 a provider or runtime cannot be had, or a provider did not start.
    """
    options = ort_options(providers, opt_level, threads, session_config, None, provider_option)
    with progress_line(fmt == Format.text) as progress:
        report = verify(
            model, runtimes=runtime or ["installed"], options=options, progress=progress
        )
    if fmt == Format.json:
        emit_json(report.model_dump(mode="json"))
    else:
        render(report)
    finish(report.passed)
