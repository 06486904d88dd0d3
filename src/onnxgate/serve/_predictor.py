"""The production wrapper, done once: a thread-safe predictor that serves only what was proven.

``Predictor.open(REF)`` takes a registry version or a model file with its contract, refuses a
version whose gate did not pass (unless told to serve it anyway), builds ONE session with the
settings the model was gated and tuned with, and then proves the model here before it calls
itself ready: the contract is admitted as ``verify`` admits it (the files are the contract's by
sha256, its signature holds when a verifying key is configured, it is not hollow), every compute
node is on the provider the gate required, and every golden sample is within its rule when run
by that same session. Each
request is held to the contract (``RequestValidator``) and counted.

ONNX Runtime's ``InferenceSession.run`` may be called from several threads at once, so the
predictor holds no lock around it; its counters are the only shared state it guards.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._words import setting
from onnxgate.compare import compare_runners
from onnxgate.compat.runtime import RuntimeSpec
from onnxgate.contract import (
    SIDECAR,
    Admission,
    Cell,
    admit,
    host_libraries,
    placement_cell,
    refuse_other_libraries,
    shown,
)
from onnxgate.contract_store import Contract, contract_extras, runs_on, runs_on_text
from onnxgate.errors import ConfigError, GateError, InvalidRequest, NotGated, RunFailed
from onnxgate.model import Signature, TensorSpec, load_model
from onnxgate.runners import Inference, RunnerInfo
from onnxgate.serve._maps import map_labels, tensors_of
from onnxgate.serve._refuse import echo
from onnxgate.serve._source import Source, resolve
from onnxgate.serve._tensors import output_datatype
from onnxgate.serve._types import RequestTensor
from onnxgate.serve._validate import RequestValidator
from onnxgate.settings import Part, SessionSettings, Tolerances

if TYPE_CHECKING:
    from onnxgate.runners import OrtRunner

log = logging.getLogger(__name__)

MiB = 1 << 20


class RunCancelled(Exception):
    """A run cancelled from another thread (a shadow run yielding to the champion).

    Internal: it never reaches a client, so it is not a ``GateError``.
    """


class PredictorConfig(Part):
    """How a predictor opens and runs a model."""

    session: SessionSettings = SessionSettings()
    """Session settings; without providers, the ones the model was gated with."""
    tuned: bool = True
    """Run the settings ``tune`` recorded for this machine, when the contract has exactly one
    record for it (or one for ``objective``)."""
    objective: Literal["latency", "throughput"] | None = None
    """Which tuned record to use when the contract holds both."""
    max_request_bytes: int = Field(64 * MiB, ge=1)
    """The largest request's tensors, in bytes."""
    allow_ungated: bool = False
    """Serve a version whose gate did not pass (or a file with no gate report beside it)."""
    allow_weak_rules: bool = False
    """Admit contract rules weaker than their floors (CON006), as ``verify --allow-weak-rules``
    does; without it such a contract is refused like a hollow one and the model is not ready."""
    variant: str | None = None
    """Serve ``model.VARIANT`` of a registry version (``int8``) instead of ``model``."""
    registry: str | None = None
    """The registry URL for references (default: ``$ONNXGATE_REGISTRY`` or the user's)."""
    store: str | None = None
    """The registry's artefact store (default: ``$ONNXGATE_STORE``, or beside a SQLite file)."""
    mlflow_tracking_uri: str | None = None
    """The MLflow tracking server for ``mlflow:/models/…`` references (default:
    ``$MLFLOW_TRACKING_URI``)."""


class Proof(BaseModel):
    """Whether the model holds its contract here, with the session that serves it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ready: bool
    identity: str
    placement: str
    parity: str
    seconds: float

    @property
    def reason(self) -> str:
        """One line: what failed, or what was proven."""
        return f"identity: {self.identity}; placement: {self.placement}; parity: {self.parity}"


@dataclass
class Counts:
    """What a predictor has done since it opened."""

    requests: int = 0
    """Requests validated (``validate``, which serving and ``predict`` both call)."""
    failures: int = 0
    """Requests refused by validation, and runs ONNX Runtime failed."""
    runs: int = 0
    samples: int = 0


class _Live:
    """The predictor's own session as a ``Runner``, for the golden-sample comparison."""

    def __init__(self, predictor: Predictor) -> None:
        self._predictor = predictor
        self.name = predictor.runner.name

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def input_specs(self) -> Signature:
        return self._predictor.runner.input_specs()

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        start = time.perf_counter_ns()
        outputs = self._predictor.run(dict(feeds))
        return Inference(outputs, time.perf_counter_ns() - start)

    def info(self) -> RunnerInfo:
        return self._predictor.runner.info()


def batch_axis(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], named: str | None = None
) -> str | None:
    """The symbolic dim that is axis 0 of every input and every output, if there is one.

    Requests can be stacked along it and the outputs sliced back, because every output's first
    axis is the same dimension as every input's. ``named`` is the contract's ``batch`` (the
    golden samples showed every output's free first axis follows it): it must be axis 0 of
    every input.
    """
    if named is not None:
        heads = {spec.shape[0] if spec.shape else None for spec in inputs}
        free = all(spec.shape and not isinstance(spec.shape[0], int) for spec in outputs)
        return named if heads == {named} and free else None
    heads = {spec.shape[0] if spec.shape else None for spec in (*inputs, *outputs)}
    if len(heads) != 1:
        return None
    (head,) = heads
    return head if isinstance(head, str) and head else None


class Predictor:
    """One model, one session, proven here; safe to call from several threads.

    Use :meth:`open`; ``ready`` is True only after :meth:`prove` passed.
    """

    def __init__(self, source: Source, config: PredictorConfig, runner: OrtRunner) -> None:
        self.source = source
        self.config = config
        self.runner = runner
        self.loaded = runner.model
        self.contract = SIDECAR.read(source.model)
        signature = self.contract.signature
        self.inputs = list(signature.inputs)
        self.outputs = list(signature.outputs)
        self.validator = RequestValidator.from_contract(self.contract, config.max_request_bytes)
        self.output_names = [o.name for o in self.outputs]
        self.labels = map_labels(self.loaded.proto.graph, self.outputs)
        """Map outputs (ZipMap), served as FP32 [N, K]: their class labels (see ``_maps``)."""
        self.batch_dim = batch_axis(self.inputs, self.outputs, signature.batch)
        bound = signature.dims.get(self.batch_dim) if self.batch_dim else None
        self.max_batch = bound.max if bound and bound.max is not None else None
        """The largest batch the contract proved (None: no batch axis, or unbounded)."""
        self.proof: Proof | None = None
        self.tolerances: Tolerances | None = None
        """The contract's output rules as admitted by ``prove`` (what a shadow judges with)."""
        self.counts = Counts()
        self._lock = threading.Lock()
        self._closed = False
        self.notes: list[str] = []
        """How the settings were chosen (gated providers, tuned settings used or why not)."""

    @property
    def name(self) -> str:
        """The name clients use."""
        return self.source.name

    @property
    def version(self) -> str:
        """The version clients may name."""
        return self.source.version

    @property
    def ready(self) -> bool:
        """Proven here and not closed."""
        return bool(self.proof and self.proof.ready) and not self._closed

    @classmethod
    def open(
        cls,
        ref: str | Path,
        config: PredictorConfig | None = None,
        *,
        prove: bool = True,
        progress: Callable[[str], None] | None = None,
    ) -> Predictor:
        """Open ``ref`` (``NAME@ALIAS``, ``NAME@3``, ``NAME:3``, ``NAME=REF``, or a model file).

        Args:
            ref: what to serve.
            config: settings; the defaults serve the gated providers with the tuned settings.
            prove: run the proof now (``ready`` tells the outcome; nothing is raised for it).
            progress: called with a short message before slow steps.

        Raises:
            NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
            NotFound, RegistryUnreachable, ArtefactCorrupt: the registry reference failed.
            ModelLoadError: the model or its contract is missing or damaged.
            ProviderUnavailable, ProviderFailed, SessionFailed: the session cannot be built.
        """
        config = config or PredictorConfig()
        say = progress or (lambda message: log.info("%s", message))
        say(f"opening {ref}")
        source = resolve(
            str(ref),
            config.registry,
            variant=config.variant,
            store=config.store,
            mlflow_tracking_uri=config.mlflow_tracking_uri,
        )
        if not source.gated and not config.allow_ungated:
            raise NotGated(
                f"{source.ref}: not serving it without a passing gate ({source.gate}).",
                hint="Serve a version that passed its gate, or pass --allow-ungated.",
            )
        options, path, notes = _settings(source, config)
        from onnxgate.runners import OrtRunner, open_runner  # imports ONNX Runtime

        loaded = load_model(path)
        from onnxgate.runners import label

        name = f"onnxruntime[{label(options)}]"
        runner = cast(OrtRunner, open_runner(loaded, options, extras=contract_extras(name=name)))
        runner.__enter__()
        try:
            predictor = cls(source, config, runner)
            predictor.notes = [*source.notes, *notes]
            for note in predictor.notes:
                log.info("%s: %s", source.ref, note)
            if prove:
                say(f"proving {source.name}@{source.version} here")
                predictor.prove()
        except BaseException:
            runner.__exit__(None, None, None)
            raise
        return predictor

    def prove(self) -> Proof:
        """Admission, placement and every golden sample, with the serving session; sets ``ready``.

        Admission is ``verify``'s (``onnxgate.contract.admit``): the files are the contract's by
        sha256, the contract names no other model, carries a valid signature when a verifying
        key is configured (CON010, CON011), and is not hollow (CON002-CON006). A contract it
        refuses leaves the model not ready, with the reason; nothing is raised for it.
        """
        start = time.perf_counter()
        model = load_model(self.source.model)  # the contract's (the runner may run a tuned graph)
        placement = parity = "not run: the identity failed"
        try:
            admission = admit(
                model,
                self.contract,
                where=shown(SIDECAR.location(self.source.model)),
                allow_weak_rules=self.config.allow_weak_rules,
            )
        except GateError as err:  # hollow, damaged golden file, unusable rule or key
            identity = f"failed: {err.message}"
            placement = parity = "not run: the contract is refused"
            passed = False
        else:
            passed = admission.passed
            self.tolerances = admission.tolerances
            identity = _admitted(admission) if passed else f"failed: {admission.identity.reason}"
        if passed:
            expected = admission.expected
            samples = [sample for sample, _ in expected]
            try:
                cell = placement_cell(
                    self.loaded,
                    RuntimeSpec.parse("installed"),
                    self.runner.settings,
                    samples,
                    require=self.source.require,  # the gate's requirement, whatever serves it now
                )
            except GateError as err:  # the required provider is not in this build, say
                cell = Cell(passed=False, reason=err.message)
            placement = cell.reason or ("passed" if cell.passed else "failed")
            from onnxgate.contract import GoldenRunner

            signature = Signature.from_graph(model.proto.graph)
            assert self.contract.golden is not None  # admitted: it has golden samples
            golden = GoldenRunner(expected, self.contract.golden.produced_by, signature)
            try:
                report = compare_runners(
                    _Live(self),
                    golden,
                    samples,
                    signature=signature,
                    tolerances=admission.tolerances,
                    progress=lambda message: log.debug("%s", message),
                )
            except GateError as err:
                parity, ok = f"failed: {err.message}", False
            else:
                ok = report.passed
                failing = [f"{o.name}: {o.reason}" for o in report.outputs if not o.passed]
                parity = (
                    f"{len(samples)} golden sample(s) within their rules"
                    if ok
                    else "failed: " + "; ".join(failing)
                )
            passed = bool(cell.passed) and ok
            if not cell.passed:
                placement = f"failed: {placement}"
        proof = Proof(
            ready=passed,
            identity=identity,
            placement=placement,
            parity=parity,
            seconds=round(time.perf_counter() - start, 3),
        )
        with self._lock:
            self.counts.requests = self.counts.failures = self.counts.runs = 0
            self.counts.samples = 0
        self.proof = proof
        level = logging.INFO if proof.ready else logging.ERROR
        log.log(
            level,
            "%s@%s %s: %s",
            self.name,
            self.version,
            "ready" if proof.ready else "NOT READY",
            proof.reason,
        )
        return proof

    # -- serving ---------------------------------------------------------------------------------

    def validate(self, tensors: Sequence[RequestTensor]) -> dict[str, np.ndarray]:
        """A request's feeds, held to the contract (see ``RequestValidator``)."""
        with self._lock:
            self.counts.requests += 1
        try:
            return self.validator.check(tensors)
        except GateError:
            with self._lock:
                self.counts.failures += 1
            raise

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        options: Any = None,
    ) -> dict:
        """Run validated feeds once; every output (or ``outputs``) by name.

        Args:
            feeds: validated feeds, by input name.
            outputs: the outputs wanted (None: every output).
            options: ONNX Runtime run options of this run (``runner.run_options()``), to cancel
                it from another thread; None: the runner's own.

        Raises:
            InvalidRequest: an output name the model does not have.
            RunFailed: ONNX Runtime failed on feeds that passed validation.
            RunCancelled: ``options.terminate`` was set while it ran (not counted as a failure).
        """
        names = list(outputs) if outputs else self.output_names
        unknown = [n for n in names if n not in self.output_names]
        if unknown:
            raise InvalidRequest(
                f"output {echo(unknown[0])} is not an output of {self.name}; it has "
                f"{', '.join(self.output_names)} (rule output.unknown)"
            )
        first = next(iter(feeds.values()), None)
        rows = int(first.shape[0]) if self.batch_dim and first is not None and first.ndim else 1
        try:
            values = self.runner.session.run(
                names, dict(feeds), options or self.runner._run_options
            )
        except Exception as err:  # ORT raises its own exception types, not a shared base
            if options is not None and options.terminate and "terminate" in str(err):
                raise RunCancelled(f"{self.name}@{self.version}: the run was cancelled") from err
            with self._lock:
                self.counts.failures += 1
            raise RunFailed(f"{self.name}@{self.version} failed to run: {err}") from err
        with self._lock:
            self.counts.runs += 1
            self.counts.samples += rows
        return dict(zip(names, values, strict=True))

    def serve(
        self,
        feeds: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        options: Any = None,
    ) -> dict:
        """``run``, with every map output as the FP32 tensor the protocol can carry.

        Raises:
            InvalidRequest: an output name the model does not have.
            RunFailed: ONNX Runtime failed, or a map output's keys are not its labels.
            RunCancelled: ``options.terminate`` was set while it ran.
        """
        values = self.run(feeds, outputs, options)
        try:
            return tensors_of(values, self.labels)
        except ValueError as err:
            raise RunFailed(f"{self.name}@{self.version}: a map output: {err}") from err

    def predict(
        self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Validate and run, from Python: the arrays' dtypes are the declared datatypes.

        Raises:
            InvalidRequest: the inputs break the contract.
            Unavailable: the model is not ready (its proof failed or it is closed).
        """
        from onnxgate.errors import Unavailable

        if not self.ready:
            raise Unavailable(f"{self.name}@{self.version} is not ready: {self.why_not()}")
        tensors = [
            RequestTensor(name, _datatype(name, np.asarray(array)), np.asarray(array))
            for name, array in inputs.items()
        ]
        return self.serve(self.validate(tensors), outputs)

    def why_not(self) -> str:
        """Why the model is not ready (empty when it is)."""
        if self._closed:
            return "closed"
        if self.proof is None:
            return "not proven yet"
        return "" if self.proof.ready else self.proof.reason

    def close(self) -> None:
        """Release the session; ``ready`` turns False."""
        self._closed = True
        self.runner.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Predictor({self.name}@{self.version}, ready={self.ready})"


def _admitted(admission: Admission) -> str:
    """What admission proved, for the proof's identity line."""
    said = ["the files are the contract's"]
    if admission.signature.passed:
        said.append(f"signature {admission.signature.reason}")
    said += [f"{f.code} admitted: {f.message}" for f in admission.findings if f.allowed]
    return "; ".join(said)


def _datatype(name: str, array: np.ndarray) -> str:
    try:
        return output_datatype(array)
    except GateError:
        raise InvalidRequest(f"input {echo(name)}: dtype {array.dtype} has no datatype.") from None


def _servable(
    tuned: SessionSettings, runtime: str | None, *, where: str, objective: str | None
) -> None:
    """Refuse tuned settings this process cannot serve as they were tuned.

    A record tuned on an isolated build (``onnxruntime-openvino==1.24.1``) ran in that build's
    own environment; the server runs the installed ONNX Runtime in its process, so it cannot
    host that build, and serving the settings on another build would serve what was not
    measured. A record whose providers this host lacks (OpenVINO, with no build or plugin that
    offers a device here) is refused as a missing provider is, before anything is loaded:
    nothing runs on CPU in its place.

    Raises:
        ConfigError: the record was tuned on an isolated build.
        ProviderUnavailable: a provider of the record is not usable here.
    """
    from onnxgate.runners import require_providers  # imports ONNX Runtime

    record = f"the tuned record{f' ({objective})' if objective else ''} in {where}"
    if runtime is not None:
        raise ConfigError(
            f"{record} was tuned on {runtime}, an isolated build the server cannot host in its "
            f"process (it runs the installed ONNX Runtime); serving its settings here would "
            "serve what was not measured.",
            hint=f"Serve without the tuned settings ({setting('tuned', False)}), or tune again on the installed "
            "runtime and serve that record.",
        )
    try:
        require_providers(tuned, what=record)
    except GateError as err:  # the hint says how to serve it anyway: without the record
        err.hint = (
            f"{err.hint or ''} Or serve without the tuned settings ({setting('tuned', False)})."
        ).strip()
        raise


def _recorded_providers(contract: Contract, *, where: str, adopted: bool) -> tuple[str, ...]:
    """The providers the contract records its model runs on (``lineage.runs_on``), usable here.

    A model quantised on an isolated build (``onnxruntime-openvino==1.24.1``) was gated and timed
    there alone: the server runs the installed ONNX Runtime in its process, where that model is
    slower than its float parent and its outputs are not the ones proven. Recorded providers
    ``adopted`` (no providers were given) that this process cannot run are refused as a missing
    provider is: nothing runs on CPU in their place.

    Raises:
        ConfigError: the contract records an isolated build.
        ProviderUnavailable: a recorded provider is not usable here.
    """
    from onnxgate.runners import require_providers  # imports ONNX Runtime

    providers, runtime = runs_on(contract)
    if runtime is not None:
        raise ConfigError(
            f"{where} records that its model runs on {runs_on_text(providers, runtime)} "
            f"(lineage.runs_on: it was quantised, gated and timed there alone); {runtime} is an "
            "isolated build the server cannot host in its process (it runs the installed ONNX "
            "Runtime), where the model is slower than its float parent and its outputs unproven.",
            hint="Quantise it with a recipe for the installed runtime (--recipes "
            "dynamic-u8s8-pc), or on a host whose OpenVINO plugin (onnxruntime-ep-openvino) "
            "offers a device, and serve that model.",
        )
    if providers and adopted:
        require_providers(SessionSettings(providers=providers), what=f"{where} (lineage.runs_on)")
    return providers


def _settings(source: Source, config: PredictorConfig) -> tuple[SessionSettings, Path, list[str]]:
    """The session settings and the graph to run: gated providers, tuned settings if they apply."""
    from onnxgate.runners import check_session  # imports ONNX Runtime

    session = config.session
    notes = []
    # libraries are what the model needs, not a choice of settings: they never stop tuned ones
    explicit = (
        session.model_copy(update={"providers": (), "ops_libraries": ()}) != SessionSettings()
    )
    where = shown(SIDECAR.location(source.model))
    contract = SIDECAR.read(source.model)
    libraries = host_libraries(contract, session.ops_libraries, where=where)
    refuse_other_libraries(contract, libraries, where=where)
    if libraries:
        session = session.model_copy(update={"ops_libraries": libraries})
        notes.append(f"custom operator libraries: {', '.join(libraries)}")
    recorded = _recorded_providers(contract, where=where, adopted=not session.providers)
    if not session.providers and recorded:
        # where the model was quantised and proven wins over the gate's (empty) targets
        session = session.model_copy(update={"providers": recorded})
        notes.append(f"providers {', '.join(recorded)}, as quantised")
    elif not session.providers and source.providers:
        session = session.model_copy(update={"providers": source.providers})
        notes.append(f"providers {', '.join(source.providers)}, as gated")
    check_session(session)
    options = session
    path = source.model
    used = False
    if config.tuned and explicit:
        notes.append(f"tuned settings not used: session settings were given ({options.describe()})")
    elif config.tuned:
        from onnxgate.perf import tuned_for

        try:
            settings, path, runtime = tuned_for(source.model, objective=config.objective)
        except ConfigError as err:
            notes.append(f"tuned settings not used: {err.message}")
            path = source.model
        else:
            tuned = SessionSettings.from_wire(settings).model_copy(
                update={"ops_libraries": libraries}
            )
            check_session(tuned)
            theirs, ours = tuned.wire()["providers"], options.wire()["providers"]
            if session.providers and theirs != ours:
                notes.append(
                    f"tuned settings not used: they were tuned with providers "
                    f"{', '.join(theirs) or 'CPU'}, serving asks for {', '.join(ours)}"
                )
                path = source.model
            else:
                _servable(tuned, runtime, where=where, objective=config.objective)
                options, used = tuned, True
                notes.append(f"tuned settings: {tuned.describe()}; graph {path.name}")
    else:
        notes.append("tuned settings not used: --no-tuned")
    if not used:
        notes.append(f"session settings: {options.describe()}")
    return options, path, notes
