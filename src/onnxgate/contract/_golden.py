"""Golden samples: produce them with a reference runner, store them, and replay them as a runner."""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
from pydantic import ValidationError

from onnxgate._pathtext import shown
from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compare import CompareReport, compare_runners, declared_dtype
from onnxgate.contract._hollow import (
    contract_findings,
    output_extents,
    refuse_hollow,
    rule_findings,
)
from onnxgate.contract._libraries import library_requirements
from onnxgate.contract._observed import observed_shapes
from onnxgate.contract_store import (
    SIDECAR,
    Contract,
    ContractStore,
    Golden,
    GoldenSample,
    OpsLibraryRequirement,
    OutputRule,
    Provenance,
    Requirements,
    SecondOpinion,
    SignatureContract,
    ValueBound,
    contract_paths,
    dim_bounds,
    identity,
    recordable,
    sha256_file,
    sign_new,
)
from onnxgate.data import (
    Sample,
    chosen_ranges,
    feeds_digest,
    free_sizes,
    unicode_array,
    validate_feeds,
)
from onnxgate.errors import ConfigError, GateError, ModelLoadError, ParityError
from onnxgate.inspection import describe
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners import Inference, Runner, RunnerInfo, TensorTap
from onnxgate.settings import SessionSettings, Tolerances

log = logging.getLogger(__name__)


class GoldenRunner:
    """Replays stored outputs: the reference side of ``verify``."""

    name = "golden"

    def __init__(
        self,
        samples: Sequence[tuple[Sample, dict[str, np.ndarray]]],
        produced_by: str,
        signature: Signature,
    ) -> None:
        self._outputs = {feeds_digest(s.feeds): out for s, out in samples}
        self.name = f"golden ({produced_by})"
        self._signature = signature

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def input_specs(self) -> Signature:
        """The signature of the model the golden samples were made for."""
        return self._signature

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """The stored outputs of the sample with these feeds."""
        return Inference(dict(self._outputs[feeds_digest(feeds)]), 0)

    def info(self) -> RunnerInfo:
        """Stored outputs: the runner that produced them is named, nothing runs."""
        return RunnerInfo(name=self.name, runtime="golden file", settings={})


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def read_golden(
    contract: Contract, model: Path, *, store: ContractStore = SIDECAR
) -> list[tuple[Sample, dict[str, np.ndarray]]]:
    """The golden samples with their expected outputs.

    Raises:
        ModelLoadError: the golden file is missing, changed since the contract was written, or
            not what the contract lists.
    """
    if contract.golden is None:
        return []
    return golden_pairs(contract, store.read_golden(model, contract), shown(store.location(model)))


def golden_pairs(
    contract: Contract, arrays: Mapping[str, np.ndarray], where: str
) -> list[tuple[Sample, dict[str, np.ndarray]]]:
    """The golden samples with their expected outputs, from the golden file's arrays.

    Raises:
        ModelLoadError: an array the contract lists is not in ``arrays``.
    """
    samples = []
    for g in contract.golden.samples if contract.golden else []:
        try:
            feeds = {n: arrays[f"{g.key}/in/{n}"] for n in g.inputs}
            outputs = {n: arrays[f"{g.key}/out/{n}"] for n in g.outputs}
        except KeyError as err:
            raise ModelLoadError(
                f"{where}: the golden samples have no array {err} that the contract lists."
            ) from err
        samples.append((Sample(g.label, feeds, dict(g.dims)), outputs))
    return samples


def rules_for(
    signature: Signature, outputs: Mapping[str, np.ndarray], config: Tolerances
) -> list[OutputRule]:
    """The tolerance (and metric) each output will be verified with, resolved now and recorded."""
    declared = {o.name: o.type for o in signature.outputs}
    rules = []
    for name, value in outputs.items():
        extra = declared_dtype(declared.get(name))
        dtypes = [value.dtype] + ([extra] if extra is not None else [])
        tol = config.tolerance(name, *dtypes)
        metric = config.criterion(name)
        rules.append(
            OutputRule(
                output=name, atol=tol.atol, rtol=tol.rtol, metric=str(metric) if metric else None
            )
        )
    return rules


_RECREATE = "Re-create the contract from the model: `onnxgate contract init --force`."


def config_from_rules(
    rules: Sequence[OutputRule],
    *,
    where: str = "the contract",
    outputs: Sequence[str] | None = None,
) -> Tolerances:
    """The tolerances a contract's rules describe, built from their parsed criteria.

    Args:
        rules: the contract's rules.
        where: the contract, for messages.
        outputs: the model's outputs; when given, a rule for another output is refused.

    Raises:
        ModelLoadError: a rule is not one onnxgate can judge by (its metric does not parse, or
            names an output), names an output the model does not have, or does not come back
            from the tolerances as written; the message names the contract and the rule.
    """
    from onnxgate.settings import parse_metric

    criteria = {}
    for index, rule in enumerate(rules):
        field = f"golden.rules[{index}] (output {rule.output!r})"
        if outputs is not None and rule.output not in outputs:
            raise ModelLoadError(
                f"{where}: {field} judges an output the model does not have; its outputs: "
                f"{', '.join(outputs)}.",
                hint=_RECREATE,
            )
        if rule.metric is None:
            continue
        try:
            named, criterion = parse_metric(rule.metric)
        except ConfigError as err:
            raise ModelLoadError(
                f"{where}: {field} has metric {rule.metric!r}, which is not METRIC OP VALUE.",
                hint=_RECREATE,
            ) from err
        if named is not None:
            raise ModelLoadError(
                f"{where}: {field} has metric {rule.metric!r}, which names output {named!r}.",
                hint=_RECREATE,
            )
        criteria[rule.output] = criterion
    try:
        config = Tolerances.from_criteria(
            criteria, per_output={r.output: (r.atol, r.rtol) for r in rules}
        )
    except ValidationError as err:
        raise ModelLoadError(
            f"{where}: golden.rules cannot be used as tolerances ({err}).", hint=_RECREATE
        ) from err
    for output, criterion in criteria.items():
        # the tolerances hold metrics as text: an output name the text cannot carry would leave
        # its output to the element rule
        if config.criterion(output) != criterion:
            raise ModelLoadError(
                f"{where}: the rule for output {output!r} cannot be held as written "
                f"({criterion}); its name does not survive the metric syntax.",
                hint="Judge it by atol/rtol, or rename the output.",
            )
    return config


def write_contract(
    loaded: LoadedModel,
    reference: Runner,
    samples: Sequence[Sample],
    *,
    provenance: Provenance | None = None,
    config: Tolerances | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    outputs: Collection[str] | None = None,
    lineage: dict[str, Any] | None = None,
    second_opinion: Runner | SecondOpinion | None = None,
    store: ContractStore = SIDECAR,
    allow_weak_rules: bool = True,
    batch: str | None = None,
    dims_why: Mapping[str, str] | None = None,
    ops_libraries: Sequence[str] = (),
) -> Contract:
    """Run ``reference`` on the samples and write ``<model>.contract.json`` and ``.golden.npz``.

    Both files are written atomically, the golden file first, so a contract never names a golden
    file that is not complete. With a second-opinion runner, the golden outputs must agree with
    it by the contract's own rules before anything is written; a disagreement raises with the
    first diverging node, replayed. A contract ``verify`` would refuse as hollow is never
    written; rules weaker than ``RULE_FLOORS`` are written only with ``allow_weak_rules`` (off in
    ``contract init``; export and quantize keep the rules their callers chose). With a signing
    key configured (``_sign``), the contract is signed.

    Args:
        loaded: the model the contract is about.
        reference: the runner whose outputs are the golden ones.
        samples: the golden samples' feeds.
        provenance: where the model came from.
        config: tolerances and metrics, recorded per output as its rule.
        force: replace an existing contract.
        progress: called with a short message before each step.
        outputs: keep only these outputs (None = every tensor output); the others are recorded
            as skipped.
        lineage: the parent model and the step that made this one.
        second_opinion: a runner that must agree with ``reference`` on the samples (see
            ``second_opinion_for``), or the record of a cross-check made elsewhere (an export's
            parity check) or of why none was taken.
        store: where the contract and golden samples are kept.
        allow_weak_rules: write rules weaker than ``RULE_FLOORS`` (``verify`` will then need
            ``allow_weak_rules`` too).
        batch: the inputs' batch dimension when the outputs call their first axis otherwise
            (``[model] batch_axis``); every golden output's first axis must follow it.
        dims_why: why each free dimension's range is what it is, by label (``DimBound.why``).
        ops_libraries: the custom operator libraries the sessions registered
            (``SessionSettings.ops_libraries``), recorded by name, version and sha256.

    Raises:
        ConfigError: a contract exists already and ``force`` is not set, or a library is not a
            readable file.
        HollowContract: the contract would prove nothing (CON002-CON005), or a rule is weaker
            than its floor (CON006) and ``allow_weak_rules`` is off; nothing is written.
        ContractKeyError: a signing key is configured and unusable.
        FeedError: a sample does not fit the model.
        RunFailed: the reference cannot run the model.
        ParityError: the second opinion disagrees with the golden outputs (nothing is written).
    """
    _, golden_path = contract_paths(loaded.path)
    if store.exists(loaded.path) and not force:
        raise ConfigError(
            f"{shown(store.location(loaded.path))}: a contract exists already.",
            hint="Replace it with force.",
            field="force",
        )
    signature = Signature.from_graph(loaded.proto.graph)
    config = config or Tolerances()
    say = progress or (lambda message: log.info("%s", message))
    made = _run_reference(reference, samples, signature, outputs=outputs, say=say)
    if not made.last_outputs:
        raise ConfigError(
            f"{shown(loaded.path)}: no output is a tensor ({', '.join(sorted(made.skipped))}), so there is no "
            "golden value to keep."
        )
    if batch is not None:
        _check_batch(batch, signature, made.produced, where=shown(loaded.path))
    rules = rules_for(signature, made.last_outputs, config)
    where = shown(store.location(loaded.path))
    # the floors need the golden values, so the reference has run; the second opinion has not
    if not allow_weak_rules:
        refuse_hollow(
            rule_findings(rules, output_extents(made.samples, made.arrays)),
            where,
            allow_weak_rules=False,
        )
    if isinstance(second_opinion, SecondOpinion):
        opinion = second_opinion
    elif second_opinion is not None:
        opinion = cross_check(reference, second_opinion, made.produced, signature, rules, say)
    else:
        opinion = SecondOpinion(detail="none taken")
    data = _npz_bytes(made.arrays)
    # everything the contract needs is computed before either file is written
    contract = _contract_record(
        loaded,
        signature,
        made,
        golden_path=golden_path,
        data=data,
        produced_by=reference.name,
        rules=rules,
        opinion=opinion,
        provenance=provenance,
        lineage=lineage,
        batch=batch,
        dims_why=dims_why,
        libraries=library_requirements(ops_libraries),
    )
    refuse_hollow(
        contract_findings(contract, signature, made.arrays),
        where,
        allow_weak_rules=allow_weak_rules,
    )
    contract = sign_new(contract)
    store.write(loaded.path, contract, data)
    return contract


@dataclass(frozen=True)
class _Made:
    """What the reference made of the samples: the golden file's arrays and their records."""

    arrays: dict[str, np.ndarray]
    """``s<index>/in/<input>`` and ``s<index>/out/<output>``: the golden file's contents."""
    samples: list[GoldenSample]
    skipped: set[str]
    """Outputs not kept: not asked for, or not a tensor."""
    last_outputs: dict[str, np.ndarray]
    """The outputs kept from the last sample (the rules are made for them)."""
    produced: list[tuple[Sample, dict[str, np.ndarray]]]
    """Each sample, at the sizes its arrays have, with the outputs kept."""


def _run_reference(
    reference: Runner,
    samples: Sequence[Sample],
    signature: Signature,
    *,
    outputs: Collection[str] | None,
    say: Callable[[str], None],
) -> _Made:
    """Run the reference on every sample; keep its tensor outputs (only ``outputs``, if given).

    Raises:
        FeedError: a sample does not fit the model.
        RunFailed: the reference cannot run the model.
    """
    arrays: dict[str, np.ndarray] = {}
    golden: list[GoldenSample] = []
    skipped: set[str] = set()
    last_outputs: dict[str, np.ndarray] = {}
    produced: list[tuple[Sample, dict[str, np.ndarray]]] = []
    with reference:
        for index, sample in enumerate(samples):
            feeds = validate_feeds(signature, sample.feeds, where=sample.label)
            say(f"golden sample {index + 1}/{len(samples)} ({sample.label}) from {reference.name}")
            result = reference.infer(feeds)
            # string outputs kept as unicode arrays: an .npz holds objects only with pickle
            result_outputs = {n: unicode_array(v) for n, v in result.outputs.items()}
            key = f"s{index}"
            kept = {}
            for name, value in result_outputs.items():
                if outputs is not None and name not in outputs:
                    skipped.add(name)
                elif isinstance(value, np.ndarray) and value.dtype != object:
                    kept[name] = value
                else:
                    skipped.add(name)
            for name, value in feeds.items():
                array = np.asarray(value)
                if array.dtype == object:  # strings: the golden file is read without pickle
                    array = array.astype(str)
                arrays[f"{key}/in/{name}"] = array
            for name, value in kept.items():
                arrays[f"{key}/out/{name}"] = value
            last_outputs = kept
            # the sizes the arrays have, not only those the sample was asked at: loaded data
            # proves the sizes it holds
            dims = dict(sample.dims) | free_sizes(signature, feeds)
            produced.append((Sample(sample.label, feeds, dims), kept))
            golden.append(
                GoldenSample(
                    key=key,
                    label=sample.label,
                    dims=dims,
                    inputs=list(feeds),
                    outputs=list(kept),
                )
            )
    return _Made(arrays, golden, skipped, last_outputs, produced)


def _contract_record(
    loaded: LoadedModel,
    signature: Signature,
    made: _Made,
    *,
    golden_path: Path,
    data: bytes,
    produced_by: str,
    rules: list[OutputRule],
    opinion: SecondOpinion,
    provenance: Provenance | None,
    lineage: dict[str, Any] | None,
    batch: str | None,
    dims_why: Mapping[str, str] | None,
    libraries: list[OpsLibraryRequirement],
) -> Contract:
    """The contract of ``loaded``: its identity, signature, requirements and golden record.

    ``data`` is the golden file's bytes (its sha256 is recorded), ``golden_path`` where they go.
    """
    info = describe(loaded)
    model_identity = identity(loaded)
    min_runtime = info.min_runtime.get("onnxruntime")
    return Contract(
        model=recordable(loaded.path.name, loaded.path),
        identity=model_identity,
        signature=SignatureContract(
            inputs=list(signature.inputs),
            outputs=list(signature.outputs),
            dims=dim_bounds(list(signature.inputs), [g.dims for g in made.samples], dims_why),
            batch=batch,
            observed=observed_shapes(signature, made.produced),
            values={
                n: ValueBound(low=r.low, high=r.high, why=r.why)
                for n, r in chosen_ranges(signature, loaded.proto, None).items()
                if r.why.startswith("indexes")
            },
        ),
        requirements=Requirements(
            ir_version=info.ir_version,
            opsets=info.opsets,
            custom_domains=info.custom_domains,
            min_runtime=min_runtime,
            ops_libraries=libraries,
        ),
        provenance=provenance or Provenance(onnxgate=__version__),
        lineage=lineage,
        golden=Golden(
            file=recordable(golden_path.name, golden_path),
            sha256=hashlib.sha256(data).hexdigest(),
            produced_by=produced_by,
            samples=made.samples,
            rules=rules,
            skipped_outputs=sorted(made.skipped),
            second_opinion=opinion,
        ),
    )


def _check_batch(
    batch: str,
    signature: Signature,
    produced: Sequence[tuple[Sample, dict[str, np.ndarray]]],
    *,
    where: str,
) -> None:
    """Refuse a batch dimension that is not the first axis of every input and golden output.

    Raises:
        ConfigError: naming the input or output, and the sample, that does not follow it.
    """
    heads = [s for s in signature.inputs if s.shape and s.shape[0] == batch]
    others = [s.name for s in signature.inputs if s.name not in {h.name for h in heads}]
    if not heads or others:
        raise ConfigError(
            f"{where}: batch_axis {batch!r} is not the first axis of every input"
            + (f" ({', '.join(others)} has another)" if heads else "")
            + ".",
            hint="Name the inputs' first dimension, as `inspect` shows it.",
            field="batch_axis",
        )
    for sample, outputs in produced:
        rows = sample.dims.get(batch)
        for name, value in outputs.items():
            if rows is not None and (value.ndim == 0 or value.shape[0] != rows):
                raise ConfigError(
                    f"{where}: output {name!r} has shape {list(value.shape)} on sample "
                    f"{sample.label} ({batch}={rows}); its first axis does not follow batch_axis "
                    f"{batch!r}, so requests cannot be batched along it.",
                    hint="Leave batch_axis out: the model is then served one request at a time.",
                    field="batch_axis",
                )


def second_opinion_for(
    source: Runner, model: LoadedModel, *, ops_libraries: Sequence[str] = ()
) -> Runner | SecondOpinion:
    """The runner that checks golden outputs from ``source``: one that shares no code with it.

    The reference evaluator is checked by ONNX Runtime with every graph optimisation off, so a
    rewrite cannot be blamed; ONNX Runtime (any release or provider) by the reference evaluator;
    a framework's module by ONNX Runtime running the exported model (with ``ops_libraries``).

    When ONNX Runtime runs the model with custom operator libraries and the model has nodes the
    evaluator has no implementation for (the libraries' custom domains), no runner that shares
    no code with the libraries can run it: the second opinion steps aside, and the record says
    it did not run and which node stopped it (never an agreement).
    """
    from onnxgate.runners import (
        IsolatedOrtRunner,
        OrtRunner,
        ReferenceRunner,
        describe_nodes,
        open_runner,
        outside_evaluator,
    )

    if isinstance(source, OrtRunner | IsolatedOrtRunner):
        libraries = source.settings.ops_libraries
        custom = outside_evaluator(model.proto) if libraries else []
        if custom:
            return SecondOpinion(
                runner=ReferenceRunner.name,
                detail="did not run: the ONNX reference evaluator implements only the standard "
                f"domains and {describe_nodes(custom)} comes from a custom operator library "
                f"({', '.join(Path(lib).name for lib in libraries)}); the golden outputs of {source.name} are unchecked",
            )
        return ReferenceRunner(model)
    # imports ONNX Runtime
    return open_runner(model, SessionSettings(opt_level="disable", ops_libraries=ops_libraries))


def opinion_from(report: CompareReport, *, what: str) -> SecondOpinion:
    """A cross-check made before the contract was written (an export's parity check), as recorded.

    ``report`` compared ONNX Runtime (its candidate) with the golden source (its reference).
    """
    worst = max(report.outputs, key=lambda o: o.max_abs or 0.0, default=None)
    figures = f"; worst max_abs {worst.max_abs or 0.0:.3g} ({worst.name})" if worst else ""
    checked = ", ".join(o.name for o in report.outputs)
    return SecondOpinion(
        runner=report.candidate,
        agreed=report.passed,
        detail=f"{what}: {len(report.samples)} sample(s) of {checked}{figures}",
    )


def cross_check(
    source: Runner,
    second: Runner,
    produced: Sequence[tuple[Sample, dict[str, np.ndarray]]],
    signature: Signature,
    rules: Sequence[OutputRule],
    say: Callable[[str], None],
) -> SecondOpinion:
    """Judge golden outputs against a second runner by the contract's rules.

    Raises:
        ParityError: the second runner disagrees; the message names the failing output and the
            first diverging node with what replaying it alone measured.
        GateError: the second runner cannot run the model (the same class, with a hint).
    """
    config = config_from_rules(rules)
    golden = GoldenRunner(produced, source.name, signature)
    samples = [sample for sample, _ in produced]
    say(f"second opinion: {second.name} on {len(samples)} golden sample(s)")
    try:
        report = compare_runners(second, golden, samples, signature=signature, tolerances=config)
    except GateError as err:
        raise type(err)(
            f"the second opinion on the golden outputs, {second.name}, could not run: "
            f"{err.message}",
            hint=f"Set {setting('second_opinion', False)} to keep golden outputs without one "
            f"(the contract records it), or take them from another {setting('reference')}.",
        ) from err
    if report.passed:
        worst = max(report.outputs, key=lambda o: o.max_abs or 0.0)
        return SecondOpinion(
            runner=second.name,
            agreed=True,
            detail=f"{len(samples)} sample(s) of {', '.join(o.name for o in report.outputs)}; "
            f"worst max_abs {worst.max_abs or 0.0:.3g} ({worst.name})",
        )
    failed = next(o for o in report.outputs if not o.passed)
    where = ""
    if isinstance(second, TensorTap) and isinstance(source, TensorTap):
        sample = next(s for s in samples if s.label == failed.worst_sample)
        say(f"localising the disagreement on {sample.label}")
        located = compare_runners(
            second, source, [sample], signature=signature, tolerances=config, localize=True
        )
        found = located.first_divergence
        if found is not None and found.found:
            where = f" First diverging node: {found.node} ({found.op_type}): {found.note}."
        elif found is not None:
            where = f" {found.note}."
    raise ParityError(
        f"the golden outputs from {source.name} disagree with a second opinion, {second.name}: "
        f"{failed.name}: {failed.reason} (sample {failed.worst_sample}).{where} Nothing was "
        "written.",
        hint=_disagreement_hint(source),
    )


def _disagreement_hint(source: Runner) -> str:
    from onnxgate.runners import ReferenceRunner

    if isinstance(source, ReferenceRunner):
        return (
            "If the reference evaluator is wrong on this operator, take the golden outputs from "
            f"ONNX Runtime ({setting('reference', 'ort:disable')}); "
            f"{setting('second_opinion', False)} keeps them unchecked (the contract records it)."
        )
    return (
        f"Check the node named above against the operator specification; {setting('reference')} "
        f"chooses another source, {setting('second_opinion', False)} keeps them unchecked (the "
        "contract records it)."
    )


def drop_stale_contract(model: Path, *, store: ContractStore = SIDECAR) -> list[str]:
    """Remove the contract of a model that was just replaced; notices saying so."""
    return store.remove(model)


def contract_samples(model: Path, *, store: ContractStore = SIDECAR) -> list[Sample] | None:
    """The golden samples of the contract beside ``model``, or None when there is none to use.

    Inputs at shapes the model was proven at, for steps that run the model without being given
    data: never made-up shapes that do not fit it. A contract of other bytes (the model was
    replaced since) or one that cannot be read is not used, and the log says why.
    """
    if not store.exists(model):
        return None
    try:
        contract = store.read(model)
        if sha256_file(model) != contract.identity.model.sha256:
            log.info(
                "%s: its contract describes other bytes; its samples are not used", shown(model)
            )
            return None
        return [sample for sample, _ in read_golden(contract, model, store=store)] or None
    except ModelLoadError as err:
        log.warning("%s: its contract's samples are not used: %s", shown(model), err.message)
        return None


def load_contract(model: Path, *, store: ContractStore = SIDECAR) -> Contract:
    """The contract of a model (beside it, by default).

    Raises:
        ModelLoadError: there is none, or it is not a valid contract of a known format.
    """
    return store.read(Path(model))
