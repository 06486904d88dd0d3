"""``onnxgate contract init MODEL``, ``onnxgate contract sign MODEL`` and ``onnxgate verify MODEL``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from onnxgate.cli._common import Format, handles_errors, run
from onnxgate.cli._flags import flag_option
from onnxgate.cli._options import (
    FROM_FLAGS,
    AtolOpt,
    DimOpt,
    FormatOpt,
    InputsOpt,
    MetricOpt,
    RangeOpt,
    RtolOpt,
    SeedOpt,
    SessionFlags,
    TolOpt,
    build,
    feed_settings,
    session_options,
    tolerance_settings,
)
from onnxgate.contract import (
    ContractConfig,
    VerifyConfig,
    init_contract,
    render_signed,
    render_verify,
    render_written,
    sign_contract,
    verify,
)
from onnxgate.runners import SPEC_HELP

AllowWeakOpt = Annotated[
    bool,
    flag_option(
        "allow_weak_rules",
        "--allow-weak-rules",
        help="Admit rules weaker than their floors, reported as CON006 instead of refused. "
        "Floors: absolute errors (atol, max_abs, p99_abs, mean_abs) at most 10% of the output's "
        "largest golden |value| (or 0.01 if more); rtol and max_rel at most 0.1; cosine, top1 "
        "and topk at least 0.9; mismatch_fraction at most 0.01, mismatches at most 1% of the "
        "output's elements.",
    ),
]

contract_app = typer.Typer(
    name="contract",
    help="The deployment contract written beside a model: `<model>.contract.json` and "
    "`<model>.golden.npz`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@contract_app.command("init")
@handles_errors
@session_options("ops_libraries")
def init_command(
    model: Annotated[Path, typer.Argument(help="The .onnx model.", show_default=False)],
    reference: Annotated[
        str,
        flag_option(
            "reference", "--reference", help=f"Where the golden outputs come from: {SPEC_HELP}"
        ),
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
    force: Annotated[
        bool, flag_option("force", "--force", help="Replace an existing contract.")
    ] = False,
    no_second_opinion: Annotated[
        bool,
        flag_option(
            "second_opinion",
            "--no-second-opinion",
            help="Keep the golden outputs without a second runner's agreement, for models the "
            "second runner cannot run; the contract records it.",
        ),
    ] = False,
    allow_weak_rules: AllowWeakOpt = False,
    session: SessionFlags = FROM_FLAGS,
    fmt: FormatOpt = Format.text,
) -> None:
    """Write the contract of a model exported elsewhere.

    Records the sha256 of the model and its external-data files, the signature with the dims the
    golden samples were made at, the requirements (IR, opsets, custom domains, the oldest ONNX
    Runtime release that admits them) and golden samples: inputs that take every free dimension
    to both ends of its serving range and between (--dim NAME=MIN,MAX gives a range; the others
    get starter ranges by role: a batch 1..32, image sides from a size the graph accepts to 640,
    token positions 1..512; or --inputs, resized along the batch) with the outputs of
    `--reference` (the ONNX reference evaluator by default, with onnxgate's corrections of its
    known bugs; it shares no code with ONNX Runtime), and the tolerance each output will be
    verified with.

    A second opinion checks the golden outputs before anything is written: ONNX Runtime with
    optimisations off when they come from the reference evaluator or a framework, the reference
    evaluator when they come from ONNX Runtime. If the two disagree, nothing is written, the
    command exits 1 and names the first diverging node, replayed alone on both.

    A rule weaker than its floor (see --allow-weak-rules) is refused before anything is written:
    the reference runs the samples first (some floors scale with the golden values), then the
    rules are checked, before the second opinion runs. So init never writes a contract that
    verify refuses; with --allow-weak-rules, verify needs it too. With a signing key configured
    the contract is signed (see `contract sign`).

    Exit codes: 0 written; 1 the reference failed on the model or the second opinion disagrees;
    2 bad options, a malformed model, an existing contract without --force, a rule weaker than its
    floor (CON006) or an unusable signing key; 3 a missing extra, or the reference evaluator
    crashed on the model (take the golden outputs from ONNX Runtime: `--reference ort:disable`).
    """
    config = build(
        ContractConfig,
        reference=reference,
        feeds=feed_settings(inputs, dim, value_range, seed),
        tolerances=tolerance_settings(atol, rtol, tol, metric),
        second_opinion=not no_second_opinion,
        force=force,
        trust_pickle=trust_pickle,
        allow_weak_rules=allow_weak_rules,
        session=session.settings(),
    )
    run(
        fmt,
        lambda progress: init_contract(model, config, progress=progress),
        lambda contract: render_written(contract, model),
        passed=None,
    )


@contract_app.command("sign")
@handles_errors
def sign_command(
    model: Annotated[
        Path,
        typer.Argument(help="The .onnx model (its contract lies beside it).", show_default=False),
    ],
    allow_weak_rules: AllowWeakOpt = False,
    fmt: FormatOpt = Format.text,
) -> None:
    """Sign the contract beside a model with the configured key, e.g. one written before a key was set.

    The contract must hold for the files beside it (sha256, CON001) and not be hollow; it is then
    signed as it stands, so verify it first. The signature covers every field but itself, the
    files through their sha256; `verify` with the verifying key fails a contract edited since.

    Signing: ONNXGATE_CONTRACT_KEY (an HMAC-SHA256 secret, 16 bytes or more; it also verifies) or
    ONNXGATE_CONTRACT_SIGNING_KEY (an Ed25519 private key: PEM text, or the path of a PEM file;
    `openssl genpkey -algorithm ed25519 -out contract.key`). Verifiers of Ed25519 signatures set
    ONNXGATE_CONTRACT_VERIFY_KEY to the public key (`openssl pkey -in contract.key -pubout`).
    Every onnxgate step that writes a contract signs it when a signing key is set; `tune`'s
    update is signed only if the contract it updates carried that key's valid signature.

    Exit codes: 0 signed; 1 the files are not the ones the contract describes; 2 no contract, a
    damaged or hollow one, or an unusable key; 3 no signing key is configured.
    """
    run(
        fmt,
        lambda progress: sign_contract(model, allow_weak_rules=allow_weak_rules),
        lambda contract: render_signed(contract, model),
        passed=None,
    )


@handles_errors
@session_options(
    "providers", "provider_options", "opt_level", "threads", "session_config", "ops_libraries"
)
def verify_command(
    model: Annotated[
        Path,
        typer.Argument(help="The .onnx model (its contract lies beside it).", show_default=False),
    ],
    runtime: Annotated[
        list[str] | None,
        flag_option(
            "runtimes",
            "--runtime",
            "-r",
            help="Runtimes to verify on, comma-separated or repeated: 'installed' (default), "
            "releases such as onnxruntime==1.16.3, or other ONNX Runtime packages such as "
            "onnxruntime-openvino==1.24.1, each run in an isolated environment.",
            show_default=False,
        ),
    ] = None,
    session: SessionFlags = FROM_FLAGS,
    allow_weak_rules: AllowWeakOpt = False,
    require_signature: Annotated[
        bool,
        typer.Option(
            "--require-signature",
            help="Fail (exit 3) when no verifying key is configured, so a CI job whose secret "
            "went missing cannot pass unsigned contracts; ONNXGATE_REQUIRE_SIGNATURE=1 does the "
            "same. With a key configured a valid signature is always required.",
        ),
    ] = False,
    tuned: Annotated[
        bool,
        typer.Option(
            "--tuned",
            help="Verify with the settings `onnxgate tune` recorded for this machine (their "
            "providers and options), on the runtime they were tuned on; a provider that is not "
            "usable here fails (exit 3), never runs on CPU in its place.",
        ),
    ] = False,
    objective: Annotated[
        str | None,
        typer.Option(
            "--objective", help="With --tuned: latency or throughput, when both were tuned."
        ),
    ] = None,
    fmt: FormatOpt = Format.text,
) -> None:
    """Does the contract hold on this host, or on named ONNX Runtime releases?

    Before anything runs, the identity: the model's and its side files' sha256 must match the
    contract; the contract must not name another model file beside this one (CON001; a renamed
    model is fine, it is identified by its bytes); with a verifying key configured
    (ONNXGATE_CONTRACT_KEY or ONNXGATE_CONTRACT_VERIFY_KEY) the contract must carry its valid
    signature (CON010 unsigned, CON011 edited since signed, another key, or forged). Then the
    contract must not be hollow: golden samples (CON002) that each compare something (CON003),
    every output compared or listed as skipped (CON004), dims of at least 1 that match the stored
    arrays (CON005), and rules at least as strict as their floors (CON006, see
    --allow-weak-rules). Then, per runtime: the model loads; every compute node is on the first requested provider
    (CPU by default); every golden sample is within its output's rule. Several runtimes give a
    matrix with the reason for each failing cell. Every check on every runtime applies the same
    session settings (providers with their options, level, threads, config entries), and the
    JSON report says what each session applied; where placement must run the model (releases
    before 1.24) it runs the golden samples. Custom operator libraries: those given with
    --ops-library, else the ones the contract records (onnxruntime-extensions is found by name; a
    shared library recorded by its file name must be given); each must be the build the contract
    recorded (version and sha256), else verify exits 3 before anything runs. A contract that
    records where quantize gated its model (lineage.runs_on: OpenVINO, say) is verified there
    when --runtime and --providers are left out, and other ones are refused (exit 2).

    Examples: `onnxgate verify model.onnx -r installed -r onnxruntime==1.20.1` · `onnxgate verify
    model.onnx -r onnxruntime-openvino==1.24.1 --providers openvino` (the providers are asked of
    every runtime named: one that lacks them exits 3) · `onnxgate verify model.onnx --tuned` (the
    session settings tune recorded for this machine, with their providers, on the runtime they
    were tuned on: a record tuned on OpenVINO exits 3 on a host where OpenVINO offers no device)

    Exit codes: 0 every cell passed; 1 a cell failed, the model changed, the contract names
    another model (CON001) or its signature does not hold (CON010, CON011); 2 no contract, a
    damaged or hollow one (CON002-CON006), an unusable key, or a shared library the contract
    records by file name not given with --ops-library; 3 a provider or runtime cannot be
    had, a provider did not start, a custom operator library is missing or not the recorded build,
    or --require-signature without a key.
    """
    config = build(
        VerifyConfig,
        runtimes=tuple(runtime or ["installed"]),
        session=session.settings(),
        allow_weak_rules=allow_weak_rules,
        require_signature=require_signature,
    )
    if tuned:
        from onnxgate.perf import verify_tuned

        run(
            fmt,
            lambda progress: verify_tuned(model, config, objective=objective, progress=progress),
            render_verify,
        )
        return
    run(fmt, lambda progress: verify(model, config, progress=progress), render_verify)
