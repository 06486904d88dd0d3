"""``onnxgate contract init MODEL`` and ``onnxgate verify MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._options import (
    AtolOpt,
    DimOpt,
    FormatOpt,
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
    build,
    feed_settings,
    session_settings,
    tolerance_settings,
)
from onnxgate.contract import ContractConfig, VerifyConfig, init_contract, verify
from onnxgate.contract._render import render_verify, render_written
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
    fmt: FormatOpt = Format.text,
) -> None:
    """Write the contract of a model exported elsewhere.

    Records the sha256 of the model and its external-data files, the signature with the dims the
    golden samples were made at, the requirements (IR, opsets, custom domains, the oldest ONNX
    Runtime release that admits them) and golden samples: inputs (synthetic with every free
    dimension that --dim leaves out at 1 and at 7, an image's height and width at a size the
    graph accepts; or --inputs) with the outputs of
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
    config = build(
        ContractConfig,
        reference=reference,
        feeds=feed_settings(inputs, dim, value_range, seed),
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        second_opinion=not no_second_opinion,
        force=force,
        trust_pickle=trust_pickle,
    )
    run(
        fmt,
        lambda progress: init_contract(model, config, progress=progress),
        lambda contract: render_written(contract, model),
        passed=None,
    )


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
    fmt: FormatOpt = Format.text,
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
    config = build(
        VerifyConfig,
        runtimes=tuple(runtime or ["installed"]),
        session=session_settings(providers, provider_option, opt_level, threads, session_config),
    )
    run(fmt, lambda progress: verify(model, config, progress=progress), render_verify)
