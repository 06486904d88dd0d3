"""``verify``: does the contract hold here, or on named ONNX Runtime releases?

For each runtime, three cells: the model loads, every node is placed where required, and every
golden sample is within its rule. Before any of it, the identity: the model's and side files'
sha256 must be the contract's (a contract proves things about bytes, not about a file name), the
contract must not name another model file beside it (CON001), and with a verifying key
configured it must carry that key's signature (CON010, CON011); a failed identity is a failed
verification (exit 1). Then the contract must not be hollow (``_hollow``: CON002-CON006): a
contract that proves nothing is refused like a damaged one (``HollowContract``, exit 2). Both
steps are ``admit``'s, which ``serve`` runs too, so the two refuse the same contracts.
Which model file a contract is about, and the rule for its ``model`` field: see ``_identity``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from onnxgate._pathtext import shown
from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compare import compare_runners
from onnxgate.compat.providers import CPU, names
from onnxgate.compat.runtime import RuntimeSpec, installed_runtime
from onnxgate.contract._admit import admit
from onnxgate.contract._golden import GoldenRunner, second_opinion_for, write_contract
from onnxgate.contract._hollow import ContractFinding
from onnxgate.contract._identity import Cell
from onnxgate.contract._libraries import host_libraries, refuse_other_libraries
from onnxgate.contract._samples import golden_samples, reference_probe
from onnxgate.contract_store import (
    SIDECAR,
    Contract,
    Provenance,
    SecondOpinion,
    contract_extras,
    runs_on,
    runs_on_text,
)
from onnxgate.data import (
    Sample,
)
from onnxgate.errors import ConfigError, GateError, RunFailed, RuntimeEnvError, SessionFailed
from onnxgate.inspection import Leftover, leftovers
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.placement import PlacementConfig, placement
from onnxgate.runners import Runner, RunnerInfo, make_runner, open_runner
from onnxgate.settings import FeedSettings, Part, SessionSettings, Tolerances

log = logging.getLogger(__name__)


class ContractConfig(Part):
    """How ``contract init`` makes the golden samples of a model exported elsewhere."""

    reference: str = "reference"
    """Who computes the golden outputs: the ONNX reference evaluator (with onnxgate's
    corrections), or any runner spec such as ``ort:disable`` or ``torch:pkg.mod:factory``."""
    feeds: FeedSettings = FeedSettings()
    """The golden samples' inputs and the ranges they prove: ``dims`` gives a dimension's serving
    range (its smallest and largest size); the others get starter ranges by role (a batch 1 to
    32, an image side up to 640, token positions up to 512), each proven at both ends and between
    (``golden_samples``). With ``inputs``, the data's samples, plus copies of the first resized
    to the ends of the batch's and the given ranges."""
    tolerances: Tolerances = Tolerances()
    """Recorded per output as the rule ``verify`` holds the model to."""
    second_opinion: bool = True
    """Check the golden outputs with a runner that shares no code with ``reference`` before
    anything is written."""
    force: bool = False
    """Replace an existing contract."""
    trust_pickle: bool = False
    """Allow a ``sklearn:`` reference to be unpickled (unpickling runs code from the file)."""
    allow_weak_rules: bool = False
    """Write rules weaker than ``RULE_FLOORS`` (``verify`` then needs ``allow_weak_rules`` too)."""
    batch_axis: str | None = None
    """The inputs' batch dimension when the outputs name their first axis otherwise (tf2onnx's
    ``unk__214`` and ``unk__215``): recorded so ``serve`` and ``deploy`` batch along it."""
    session: SessionSettings = SessionSettings()
    """The session of ONNX Runtime's runners (an ``ort`` reference, the second opinion); its
    custom operator libraries (``ops_libraries``) are recorded in the contract."""


class VerifyConfig(Part):
    """Where ``verify`` holds a model to its contract."""

    runtimes: tuple[str, ...] = ("installed",)
    """``installed`` and/or releases or packages (``onnxruntime==1.20.1``,
    ``onnxruntime-openvino==1.24.1``), each in an isolated environment."""
    session: SessionSettings = SessionSettings()
    """Session settings, applied the same way on every runtime and by every check; every
    compute node must be on the first provider."""
    allow_weak_rules: bool = False
    """Admit rules weaker than ``RULE_FLOORS`` (CON006): reported in ``findings``, not refused."""
    require_signature: bool = False
    """Refuse to verify without a verifying key configured (``ONNXGATE_REQUIRE_SIGNATURE=1``
    does the same). With a key configured, a signature is always required."""


class RuntimeResult(BaseModel):
    """The three checks on one runtime."""

    model_config = ConfigDict(extra="forbid")

    runtime: str
    loads: Cell
    placement: Cell
    parity: Cell
    ran: RunnerInfo | None = None
    """What ran the golden samples: the runtime, its version and the settings its session applied."""

    @property
    def passed(self) -> bool:
        """All three cells passed."""
        return bool(self.loads.passed and self.placement.passed and self.parity.passed)


class VerifyReport(BaseModel):
    """The answer of ``onnxgate verify``."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    model: str
    contract: str
    identity: Cell
    """The files' sha256, the model the contract names (CON001) and its signature (CON010,
    CON011): nothing runs unless it passed."""
    providers: list[str]
    results: list[RuntimeResult]
    signature: Cell | None = None
    """The signature alone: passed None when no verifying key is configured (not checked)."""
    findings: list[ContractFinding] = []
    """Coded findings: identity's failures, and weak rules admitted by ``allow_weak_rules``."""
    leftovers: list[Leftover] = []
    """Partial files of interrupted writes beside the model (they do not fail verification)."""
    runs_on: str | None = None
    """Where the contract records the model must run (``lineage.runs_on``), when it records
    other than the installed CPU provider and verify ran it there: ``as quantised:
    OpenVINOExecutionProvider on onnxruntime-openvino==1.24.1``."""


def init_contract(
    model: str | Path,
    config: ContractConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> Contract:
    """Create the contract of a model exported elsewhere; the library side of ``contract init``.

    Golden outputs come from ``config.reference``, which shares no code with ONNX Runtime by
    default. Unless ``config.second_opinion`` is off they must agree with a second runner that
    shares no code with the first (``second_opinion_for``) before anything is written; the
    contract records which was used.

    The contract is never hollow (``_hollow``), and its rules are at least ``RULE_FLOORS`` unless
    ``config.allow_weak_rules``: weak rules are refused once the reference has run the samples
    (some floors scale with the golden values), before the second opinion and before anything is
    written. With a signing key configured (``_sign``) it is signed.

    Raises:
        ConfigError: a contract exists and ``force`` is not set, or contradicting feeds.
        HollowContract: a rule weaker than its floor without ``allow_weak_rules`` (CON006).
        ParityError: the second opinion disagrees (the message names the first diverging node).
        ReferenceFailed: the reference evaluator crashed on the model (exit 3; use ONNX Runtime).
    """
    config = config or ContractConfig()
    feeds = config.feeds
    if feeds.inputs is not None and feeds.ranges:
        # dims go with data (the ranges the data is resized to); value ranges shape synthetic feeds
        FeedSettings(inputs=feeds.inputs, ranges=feeds.ranges).refuse_with_inputs()
    loaded = load_model(model)
    libraries = config.session.ops_libraries
    runner = make_runner(
        config.reference,
        loaded,
        session=config.session,
        trust_pickle=config.trust_pickle,
        extras=contract_extras(),
    )
    second: Runner | SecondOpinion = (
        second_opinion_for(runner, loaded, ops_libraries=libraries)
        if config.second_opinion
        else SecondOpinion(detail=f"not taken: {setting('second_opinion', False)}")
    )
    # both run every golden sample: the slower of the two caps the starter ranges
    timed = [runner] if isinstance(second, SecondOpinion) else [runner, second]
    proven: dict[str, str] = {}
    samples = golden_samples(
        loaded,
        inputs=feeds.inputs,
        dims=feeds.sizes() or None,
        ranges=feeds.value_ranges() or None,
        seed=feeds.seed,
        probe=reference_probe(Signature.from_graph(loaded.proto.graph), *timed),
        progress=progress,
        on_ranges=lambda ranges: proven.update({k: r.why for k, r in ranges.items()}),
    )
    return write_contract(
        loaded,
        runner,
        samples,
        config=config.tolerances,
        force=config.force,
        progress=progress,
        provenance=Provenance(onnxgate=__version__, exporter=None),
        second_opinion=second,
        allow_weak_rules=config.allow_weak_rules,
        batch=config.batch_axis,
        dims_why=proven,
        ops_libraries=libraries,
    )


def _one_runtime(
    loaded: LoadedModel,
    spec: RuntimeSpec,
    samples: list[Sample],
    expected: list,
    contract: Contract,
    config: Tolerances,
    session: SessionSettings,
    progress: Callable[[str], None] | None,
) -> RuntimeResult:
    label = str(spec)
    if spec.installed:
        found = installed_runtime()
        label = f"{found[0]}=={found[1]} (installed)" if found else "installed"
    signature = Signature.from_graph(loaded.proto.graph)
    extras = contract_extras(samples=samples, progress=progress)
    candidate = open_runner(loaded, session, runtime=spec, extras=extras)
    golden = GoldenRunner(
        expected, contract.golden.produced_by if contract.golden else "", signature
    )
    not_run = Cell(passed=None, reason="not run: the model does not load")
    try:
        report = compare_runners(candidate, golden, samples, signature=signature, tolerances=config)
    except SessionFailed as err:
        why = _why_not_loaded(loaded, spec)
        reason = f"{why}; {err.message}" if why else err.message
        return RuntimeResult(
            runtime=label,
            loads=Cell(passed=False, reason=reason),
            placement=not_run,
            parity=not_run,
            ran=candidate.info(),
        )
    except RunFailed as err:
        return RuntimeResult(
            runtime=label,
            loads=Cell(passed=True),
            placement=placement_cell(loaded, spec, session, samples),
            parity=Cell(passed=False, reason=err.message),
            ran=candidate.info(),
        )
    if report.passed:
        worst = max(report.outputs, key=lambda o: o.max_abs or 0.0, default=None)
        figures = (
            f"{len(samples)} sample(s); worst max_abs {worst.max_abs:.3g} ({worst.name})"
            if worst and worst.max_abs is not None
            else f"{len(samples)} sample(s)"
        )
        parity = Cell(passed=True, reason=figures)
    else:
        failing = [o for o in report.outputs if not o.passed]
        parity = Cell(passed=False, reason="; ".join(f"{o.name}: {o.reason}" for o in failing))
    return RuntimeResult(
        runtime=label,
        loads=Cell(passed=True),
        placement=placement_cell(loaded, spec, session, samples),
        parity=parity,
        ran=report.ran.get("candidate"),
    )


def _why_not_loaded(loaded: LoadedModel, spec: RuntimeSpec) -> str | None:
    """The static findings that explain a refused session, from ``check`` against that release."""
    from onnxgate.check import check_model
    from onnxgate.compat.runtime import runtime_profile

    try:
        report = check_model(loaded, profile=runtime_profile(spec))
    except GateError:
        return None
    blocking = [f for f in report.findings if f.blocks_load]
    return "; ".join(f"{f.code}: {f.message}" for f in blocking) or None


def placement_cell(
    loaded: LoadedModel,
    spec: RuntimeSpec,
    session: SessionSettings,
    samples: list[Sample],
    require: str | None = None,
) -> Cell:
    """Every compute node on ``require`` (default: the first provider asked for).

    The audit's session has the same settings. Where the audit must run the model (releases before 1.24) it runs the contract's golden
    samples: never shapes the model was not proven at.
    """
    required = require or next(iter(session.wire()["providers"]), CPU)
    try:
        with _openable(loaded) as openable:
            audit = placement(
                openable,
                PlacementConfig(session=session, require=required, runtime=str(spec)),
                samples=samples,
            )
    except RunFailed as err:
        return Cell(passed=False, reason=err.message)
    required = audit.required or required
    if audit.passed:
        return Cell(
            passed=True, reason=f"{len(audit.nodes)} node(s) on {required} ({audit.method})"
        )
    return Cell(
        passed=False,
        reason=f"{len(audit.violations)} compute node(s) not on {required}: "
        + ", ".join(f"{n.node} ({n.op_type}) on {n.provider}" for n in audit.violations[:5]),
    )


@contextmanager
def _openable(loaded: LoadedModel) -> Iterator[LoadedModel]:
    """The model under a path ONNX Runtime can open by name.

    ONNX Runtime takes a model's path as UTF-8 text, so a path with bytes that are not UTF-8 is
    opened through a link in a temporary folder, with links to its external data beside it.
    ``placement`` opens the model by path; the runners read its bytes and need none of this.
    """
    try:
        os.fspath(loaded.path.resolve()).encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield loaded
        return
    with tempfile.TemporaryDirectory(prefix="onnxgate-verify-") as folder:
        alias = Path(folder) / "model.onnx"
        alias.symlink_to(loaded.path.resolve())
        for ref in loaded.external_data:
            link = Path(folder) / ref.location
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(ref.path.resolve())
        yield dataclasses.replace(loaded, path=alias)


def verify(
    model: str | Path,
    config: VerifyConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Check a model against its contract on each runtime; the library side of ``verify``.

    Args:
        model: the model beside its contract.
        config: the runtimes, the session settings applied on each of them, whether weak rules
            are admitted and whether a signature is required.
        progress: called with a short message before slow steps.

    Raises:
        ModelLoadError: the model, its contract or its golden file is missing or damaged, or a
            rule of the contract cannot be judged by (the message names the file and the rule).
        HollowContract: the contract proves nothing (CON002-CON005), or has a rule weaker than
            its floor (CON006) and ``allow_weak_rules`` is off.
        ContractKeyMissing: a signature is required and no verifying key is configured.
        ContractKeyError: a configured key is unusable.
        ProviderUnavailable: a requested provider is not in a runtime's build.
        ProviderFailed: a requested provider did not start on a runtime.
        ConfigError: the contract records a shared library by file name and none was given, or
            records where the model must run (``lineage.runs_on``) and other runtimes or
            providers were asked for.
        RuntimeEnvError: a library the contract records is missing here, or another build.
    """
    config = config or VerifyConfig()
    loaded = load_model(model)
    contract = SIDECAR.read(loaded.path)
    from onnxgate.runners import check_session, resolved_providers  # imports ONNX Runtime

    config, as_recorded = _where_recorded(config, contract, where=shown(loaded.path))
    session = config.session
    check_session(session)
    wanted = resolved_providers(session)  # full names, CPU appended
    specs = [RuntimeSpec.parse(r) for r in names(list(config.runtimes))]
    if not specs:
        raise ConfigError(
            "runtimes names no runtime; use 'installed' or onnxruntime==X.Y.Z.", field="runtimes"
        )
    contract_file = shown(SIDECAR.location(loaded.path))
    # the bytes first: a contract proves things about these files, not about a file name
    admission = admit(
        loaded,
        contract,
        where=contract_file,
        require_signature=config.require_signature,
        allow_weak_rules=config.allow_weak_rules,
    )
    report = functools.partial(
        VerifyReport,
        model=shown(loaded.path),
        contract=contract_file,
        identity=admission.identity,
        providers=wanted,
        signature=admission.signature,
        findings=admission.findings,
        leftovers=leftovers(Path(loaded.path).parent),
        runs_on=as_recorded,
    )
    if not admission.passed:
        skipped = Cell(
            passed=None, reason="not run: the files are not the ones the contract describes"
        )
        return report(
            passed=False,
            results=[
                RuntimeResult(runtime=str(spec), loads=skipped, placement=skipped, parity=skipped)
                for spec in specs
            ],
        )
    # the libraries the contract was proven with, this host's build of each
    libraries = host_libraries(contract, session.ops_libraries, where=contract_file)
    refuse_other_libraries(contract, libraries, where=contract_file)
    session = session.model_copy(update={"ops_libraries": libraries})
    expected = admission.expected
    tolerances = admission.tolerances
    assert tolerances is not None  # set when admitted
    samples = [sample for sample, _ in expected]
    results = []
    for spec in specs:
        if progress:
            progress(f"verifying on {spec}")
        try:
            results.append(
                _one_runtime(
                    loaded,
                    spec,
                    samples,
                    expected,
                    contract,
                    tolerances,
                    session,
                    progress,
                )
            )
        except RuntimeEnvError as err:  # one release that cannot be installed is one failed row
            cell = Cell(passed=False, reason=err.message)
            skipped = Cell(passed=None, reason="not run: the runtime is not available")
            results.append(
                RuntimeResult(runtime=str(spec), loads=cell, placement=skipped, parity=skipped)
            )
    return report(passed=all(r.passed for r in results), results=results)


def _where_recorded(
    config: VerifyConfig, contract: Contract, *, where: str
) -> tuple[VerifyConfig, str | None]:
    """``config`` on the providers and runtime the contract records, and the note saying so.

    A model quantised on OpenVINO (``lineage.runs_on``) was proven there alone: on the CPU
    provider it is slower and its outputs differ from the rules measured. Runtimes left at
    ``installed`` and no providers take the recorded ones; asking for the recorded ones is the
    same; asking for others is refused, as ``verify_tuned`` refuses another runtime than its
    record's. A contract recording the installed CPU provider (or nothing) changes nothing.

    Raises:
        ConfigError: other runtimes or providers than the recorded ones were asked for.
    """
    from onnxgate.runners import resolved_providers  # imports ONNX Runtime

    providers, runtime = runs_on(contract)
    if not providers and runtime is None:
        return config, None
    place = runs_on_text(providers, runtime)
    recorded = str(RuntimeSpec.parse(runtime)) if runtime else "installed"
    asked = [str(RuntimeSpec.parse(r)) for r in names(list(config.runtimes))]
    session = config.session
    other_runtime = asked not in (["installed"], [recorded])
    other_providers = bool(session.providers) and resolved_providers(session) != (
        resolved_providers(list(providers))
    )
    if other_runtime or other_providers:
        given = ", ".join(resolved_providers(session)) if session.providers else "CPU"
        raise ConfigError(
            f"{where}: its contract records that it runs on {place} (lineage.runs_on: it was "
            f"quantised, gated and timed there alone); verify was asked for {given} on "
            f"{', '.join(asked)}, where its golden rules say nothing.",
            hint="Leave the runtimes and providers out (the recorded ones are used), or quantise "
            "the float model again for the runtime and providers you ask for.",
        )
    if not session.providers:
        session = session.model_copy(update={"providers": providers})
    return (
        config.model_copy(update={"session": session, "runtimes": (recorded,)}),
        f"as quantised: {place}",
    )
