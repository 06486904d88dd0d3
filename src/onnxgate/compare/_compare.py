"""Run two executions on the same samples and judge every output against a stated rule."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.compare._localize import localize
from onnxgate.compare._metrics import (
    Figures,
    as_array,
    drift,
    figures,
    merge_drift,
    reorder,
    structure,
)
from onnxgate.compare._replay import deviations_in
from onnxgate.compare._report import CompareReport, Divergence, OutputComparison, SampleResult
from onnxgate.compat.runtime import RuntimeSpec
from onnxgate.contract_store import contract_dims, contract_extras
from onnxgate.data import (
    Sample,
    chosen_ranges,
    load_feeds,
    numpy_dtype,
    synthetic_samples,
    validate_feeds,
)
from onnxgate.errors import ConfigError, FeedError, GateError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners import Runner, RunnerInfo, TensorTap, make_runner, open_runner
from onnxgate.settings import (
    DEFAULT_TOLERANCES,
    Criterion,
    FeedSettings,
    Part,
    SessionSettings,
    Tolerance,
    Tolerances,
    kind,
)

log = logging.getLogger(__name__)


class CompareConfig(Part):
    """What ``compare`` runs against what, on which feeds, and how it judges the outputs."""

    against: str = "reference"
    """The reference execution (see ``onnxgate.runners.SPEC_HELP``): ``reference``,
    ``ort:disable``, ``torch:package.module:factory``, another ``.onnx`` file ..."""
    candidate: str = "ort"
    """The execution under test; ONNX Runtime with ``session`` by default."""
    feeds: FeedSettings = FeedSettings()
    session: SessionSettings = SessionSettings()
    """Session settings of ONNX Runtime runners (candidate and reference)."""
    tolerances: Tolerances = Tolerances()
    localize: bool = False
    """When an output fails, find the first node whose outputs diverge, and replay it."""
    runtime: str = "installed"
    """Run an ONNX Runtime candidate on another release or package (``onnxruntime==1.20.1``,
    ``onnxruntime-openvino==1.24.1``) in its isolated environment, with the same settings."""
    save_optimized: Path | None = None
    """Save the model as ONNX Runtime optimised it for the candidate."""
    trust_pickle: bool = False
    """Allow ``sklearn:`` references to be unpickled (unpickling runs code from the file)."""


def declared_dtype(type_string: str | None) -> np.dtype | None:
    """The element type a model declares for an output: ``seq(map(int64,tensor(float)))`` → float32."""
    found = re.findall(r"tensor\((\w+)\)", type_string or "")
    if not found:
        return None
    name = {"float": "float32", "double": "float64"}.get(found[-1], found[-1])
    try:
        return numpy_dtype(name)
    except FeedError:
        return None


def _unwrap_optional(value: Any, declared: str | None) -> Any:
    # ONNX Runtime returns an optional's tensor, the reference evaluator a one-item list
    if (
        declared
        and declared.startswith("optional(")
        and isinstance(value, list)
        and len(value) == 1
    ):
        return value[0]
    return value


def judge_output(
    name: str,
    candidate: Any,
    reference: Any,
    tolerances: Tolerances,
    label: str,
    declared: str | None = None,
) -> OutputComparison:
    """One output of one sample judged by ``tolerances`` as ``compare`` judges it.

    For callers that hold both values already (a shadow pair judged beside serving), so a figure
    means what it means in ``compare``. ``declared`` is the model's type string for the output.
    Its ``drift`` (the error histogram localisation reads, no rule's figure) is left out: it
    costs as much as the rest.
    """
    return _judge(name, candidate, reference, tolerances, label, declared, with_drift=False)


def _judge(
    name: str,
    a_value: Any,
    b_value: Any,
    config: Tolerances,
    label: str,
    declared: str | None = None,
    *,
    with_drift: bool = True,
) -> OutputComparison:
    """One output on one sample; ``declared`` is the model's type string for it."""
    a_value, b_value = _unwrap_optional(a_value, declared), _unwrap_optional(b_value, declared)
    if a_value is None or b_value is None:
        if a_value is None and b_value is None:
            a_value = b_value = np.zeros(0, np.float32)  # two empty optionals agree
        else:
            side = "candidate" if a_value is None else "reference"
            return _failed(name, config, label, f"the {side} returned no value (an empty optional)")
    a_parts, b_parts = structure(a_value), structure(b_value)
    if a_parts != b_parts and a_parts is not None and b_parts is not None:
        return _failed(
            name,
            config,
            label,
            f"sequence of {len(a_parts)} tensor(s) with shapes {[list(p) for p in a_parts]} vs the "
            f"reference's {len(b_parts)} with {[list(p) for p in b_parts]}",
        )
    try:
        a, a_keys = as_array(a_value)
        b, b_keys = as_array(b_value)
    except ValueError as err:
        return _failed(name, config, label, f"cannot be compared: {err}")
    if a_keys is not None and b_keys is not None:
        if set(a_keys) != set(b_keys):
            return _failed(name, config, label, f"map keys differ: {a_keys} vs {b_keys}")
        a = reorder(a, a_keys, b_keys)
    keys = b_keys if b_keys is not None else a_keys
    extra = declared_dtype(declared)
    tol = config.tolerance(name, a.dtype, b.dtype, *([extra] if extra is not None else []))
    criterion = config.criterion(name)
    base = OutputComparison(
        name=name,
        passed=False,
        criterion=str(criterion) if criterion else f"allclose({tol})",
        atol=tol.atol,
        rtol=tol.rtol,
        dtype=b.dtype.name,
        candidate_dtype=a.dtype.name,
        shape=list(b.shape),
        candidate_shape=list(a.shape),
        dtype_equal=a.dtype == b.dtype,
        shape_equal=a.shape == b.shape,
        keys=[str(k) for k in keys] if keys is not None else None,
        worst_sample=label,
    )
    if kind(a.dtype) != kind(b.dtype):
        return base.model_copy(
            update={
                "comparable": False,
                "reason": f"dtype {a.dtype} is not comparable with the reference's {b.dtype}",
            }
        )
    if a.shape != b.shape:
        return base.model_copy(
            update={
                "comparable": False,
                "reason": f"shape {list(a.shape)} differs from the reference's {list(b.shape)}",
            }
        )
    found = figures(a, b, tol)
    passed, reason = _verdict(found, criterion, tol, over="")
    update = {"passed": passed, "reason": reason}
    if with_drift:
        update["drift"] = drift([(a, b)])
    return base.model_copy(update=found.model_dump() | update)


def _verdict(
    found: Figures, criterion: Criterion | None, tol: Tolerance, *, over: str
) -> tuple[bool, str | None]:
    """Whether figures meet the output's rule, and why not."""
    if found.nonfinite_mismatches:
        return False, (
            f"{found.nonfinite_mismatches} NaN or infinite value(s) not matched on the other side"
            f"{over}"
        )
    if criterion is not None:
        value = getattr(found, criterion.metric)
        if criterion.holds(value):
            return True, None
        return False, f"{criterion.metric} = {value}{over} does not meet {criterion}"
    if found.mismatches == 0:
        return True, None
    return False, (
        f"{found.mismatches} of {found.elements} element(s){over} outside allclose({tol})"
    )


def _failed(name: str, config: Tolerances, label: str, reason: str) -> OutputComparison:
    pair = config.per_output.get(name)
    tol = (
        Tolerance(*pair)
        if pair
        else Tolerance(
            config.atol if config.atol is not None else DEFAULT_TOLERANCES["float32"].atol,
            config.rtol if config.rtol is not None else DEFAULT_TOLERANCES["float32"].rtol,
        )
    )
    return OutputComparison(
        name=name,
        passed=False,
        comparable=False,
        criterion="present",
        atol=tol.atol,
        rtol=tol.rtol,
        worst_sample=label,
        reason=reason,
    )


def _merge(results: list[OutputComparison], criterion: Criterion | None) -> OutputComparison:
    """One output over all samples: worst figures, summed counts, the first failure's reason.

    The element rule holds when it holds on every sample. A metric is judged once, on the figure
    over all samples (the largest max/p99, the lowest cosine, summed mismatches), so the verdict
    is about the number the report shows.
    """
    broken = [r for r in results if not r.comparable]
    failing = [r for r in results if not r.passed]
    worst = failing[0] if failing else max(results, key=lambda r: r.max_abs or 0.0)

    def top(attr: str, pick: Callable[[list[float]], float]) -> float | None:
        values = [getattr(r, attr) for r in results if getattr(r, attr) is not None]
        return pick(values) if values else None

    elements = sum(r.elements for r in results)
    mismatches = sum(r.mismatches for r in results)
    weighted = [(r.mean_abs, r.elements) for r in results if r.mean_abs is not None]
    total = sum(n for _, n in weighted)
    merged = worst.model_copy(
        update={
            "passed": not failing,
            "elements": elements,
            "mismatches": mismatches,
            "mismatch_fraction": mismatches / elements if elements else 0.0,
            "max_abs": top("max_abs", max),
            "mean_abs": sum(m * n for m, n in weighted) / total if total else None,
            "p99_abs": top("p99_abs", max),
            "max_rel": top("max_rel", max),
            "cosine": top("cosine", min),
            "top1": top("top1", min),
            "topk": top("topk", min),
            "nonfinite_mismatches": sum(r.nonfinite_mismatches for r in results),
            "nan": (sum(r.nan[0] for r in results), sum(r.nan[1] for r in results)),
            "inf": (sum(r.inf[0] for r in results), sum(r.inf[1] for r in results)),
            "dtype_equal": all(r.dtype_equal for r in results),
            "shape_equal": all(r.shape_equal for r in results),
            "drift": merge_drift(r.drift for r in results),
        }
    )
    if criterion is None or broken:
        return merged
    passed, reason = _verdict(
        merged, criterion, Tolerance(merged.atol, merged.rtol), over=" over all samples"
    )
    return merged.model_copy(update={"passed": passed, "reason": reason})


def _pair_names(
    candidate: Mapping[str, Any], reference: Mapping[str, Any], notes: list[str]
) -> list[tuple[str | None, str]]:
    """(candidate name, reference name) per reference output: by name, else by position."""
    if all(name in candidate for name in reference):
        return [(name, name) for name in reference]
    if len(candidate) == len(reference):
        pairs = list(zip(candidate, reference, strict=True))
        notes.append(
            "output names differ, so outputs are matched by position: "
            + ", ".join(f"{c} ↔ {r}" for c, r in pairs)
        )
        return pairs
    return [(name if name in candidate else None, name) for name in reference]


def _same_inputs(runner: Runner, signature: Signature) -> None:
    """Refuse a runner whose model takes other inputs than the model the feeds were made for."""
    theirs = {spec.name for spec in runner.input_specs().inputs}
    ours = {spec.name for spec in signature.inputs}
    optional = set(signature.initializer_inputs)
    if not ours <= theirs or not theirs - optional <= ours:
        raise ConfigError(
            f"{runner.name} takes inputs {sorted(theirs)}, the model {sorted(ours)}: the same feeds "
            "cannot drive both.",
            hint="Compare models with the same input names.",
        )


def _info(runner: Runner) -> RunnerInfo:
    """What ran; a runner written before ``Runner.info`` existed is named, not refused."""
    info = getattr(runner, "info", None)
    return info() if callable(info) else RunnerInfo(name=runner.name, runtime="unknown")


def compare_runners(
    candidate: Runner,
    reference: Runner,
    samples: Sequence[Sample],
    *,
    signature: Signature,
    tolerances: Tolerances | None = None,
    localize: bool = False,
    model_label: str = "",
    progress: Callable[[str], None] | None = None,
) -> CompareReport:
    """Feed every sample to both runners and judge each output.

    Args:
        candidate: the execution under test (``a`` in the element rule); outputs are reported
            under its names.
        reference: the execution it must agree with (``b``).
        samples: feeds; each is checked against ``signature`` first.
        signature: the model's signature (inputs, and the outputs' declared types).
        tolerances: tolerances and metrics, keyed by the model's output names.
        localize: when an output fails, look for the first diverging node of the candidate's
            graph (both runners must expose intermediate tensors).
        model_label: the model's path, for the report.
        progress: called with a short message before each step.

    Raises:
        FeedError: a sample does not fit the signature.
        ConfigError: a runner's model takes other inputs.
        RunFailed: a runner cannot load or run the model.
    """
    config = tolerances or Tolerances()
    config.check_names([o.name for o in signature.outputs])
    if not samples:
        raise FeedError("there is no sample to compare on; the input data holds none.")
    say = progress or (lambda message: log.info("%s", message))
    checked = [
        Sample(s.label, validate_feeds(signature, s.feeds, where=s.label), s.dims) for s in samples
    ]
    declared = {o.name: o.type for o in signature.outputs}
    per_output: dict[str, list[OutputComparison]] = {}
    sample_results: list[SampleResult] = []
    notes: list[str] = []
    with candidate, reference:
        _same_inputs(candidate, signature)
        _same_inputs(reference, signature)
        for index, sample in enumerate(checked, 1):
            say(f"sample {index}/{len(checked)} ({sample.label}): {candidate.name}")
            a = candidate.infer(sample.feeds)
            say(f"sample {index}/{len(checked)} ({sample.label}): {reference.name}")
            b = reference.infer(sample.feeds)
            failing = []
            for cand_name, ref_name in _pair_names(
                a.outputs, b.outputs, notes if index == 1 else []
            ):
                name = cand_name or ref_name
                if cand_name is None:
                    result = _failed(name, config, sample.label, "the candidate has no such output")
                else:
                    result = _judge(
                        name,
                        a.outputs[cand_name],
                        b.outputs[ref_name],
                        config,
                        sample.label,
                        declared.get(cand_name),
                    )
                per_output.setdefault(name, []).append(result)
                if not result.passed:
                    failing.append(name)
            sample_results.append(
                SampleResult(
                    label=sample.label,
                    shapes=sample.shapes(),
                    passed=not failing,
                    failing=failing,
                    candidate_ms=a.latency_ns / 1e6,
                    reference_ms=b.latency_ns / 1e6,
                )
            )
        ran = {"candidate": _info(candidate), "reference": _info(reference)}
        outputs = [_merge(results, config.criterion(name)) for name, results in per_output.items()]
        passed = all(o.passed for o in outputs)
        divergence = None
        if localize:
            divergence = _localize_worst(candidate, reference, outputs, checked, config, notes, say)
    return CompareReport(
        passed=passed,
        model=model_label,
        candidate=candidate.name,
        reference=reference.name,
        ran=ran,
        samples=sample_results,
        outputs=outputs,
        first_divergence=divergence,
        notes=notes,
    )


def _localize_worst(
    candidate: Runner,
    reference: Runner,
    outputs: list[OutputComparison],
    samples: list[Sample],
    config: Tolerances,
    notes: list[str],
    say: Callable[[str], None],
) -> Divergence | None:
    """Localise on the worst sample of the first failing output; a failure becomes a note."""
    failed = next((o for o in outputs if not o.passed), None)
    if failed is None:
        notes.append("every output agrees, so there is no diverging node to look for")
        return None
    if not isinstance(candidate, TensorTap) or not isinstance(reference, TensorTap):
        notes.append(
            "localisation needs two executions that return tensors by name (ONNX Runtime, the "
            f"reference evaluator, TensorFlow); {candidate.name} vs {reference.name} has no "
            "shared tensor names"
        )
        return None
    sample = next((s for s in samples if s.label == failed.worst_sample), samples[0])
    say(f"localising on sample {sample.label}")
    # intermediate tensors are judged by the element rule at the global tolerance, whatever
    # rule the failing output has
    plain = config.element_rule()
    try:
        return localize(candidate, reference, sample, config=plain, failing_output=failed.name)
    except GateError as err:
        notes.append(f"localisation failed: {err}")
        return None


def _isolated(
    runner: Runner,
    model: LoadedModel,
    spec: RuntimeSpec,
    samples: Sequence[Sample],
    progress: Callable[[str], None] | None,
) -> Runner:
    """The ONNX Runtime candidate moved to another release or package, settings and all."""
    from onnxgate.runners import OrtRunner

    if not isinstance(runner, OrtRunner) or runner.model is not model:
        raise ConfigError(
            f"runtime {spec} runs the candidate on another ONNX Runtime; the candidate "
            f"{runner.name} is not ONNX Runtime on this model.",
            hint="Leave out candidate (or use ort / ort:LEVEL,PROVIDERS) with runtime.",
            field="runtime",
            related=["candidate"],
        )
    if runner.save_optimized is not None:
        raise ConfigError(
            "save_optimized saves what the installed ONNX Runtime optimised; "
            "it cannot go with runtime.",
            field="save_optimized",
            related=["runtime"],
        )
    extras = contract_extras(samples=samples, progress=progress)
    return open_runner(model, runner.settings, runtime=spec, extras=extras)


def compare(
    model: str | Path | LoadedModel,
    config: CompareConfig | None = None,
    *,
    samples: Sequence[Sample] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompareReport:
    """Do two executions of a model agree? The library function behind ``onnxgate compare``.

    Args:
        model: the ONNX model.
        config: who runs against whom, on which feeds, with which session and tolerances.
        samples: the feeds to compare on (a gate's golden samples), instead of ``config.feeds``.
        progress: called with a short message before each step.

    Raises:
        ConfigError: contradicting settings (``feeds.dims`` with ``feeds.inputs``, ``runtime``
            with a candidate that is not ONNX Runtime ...), or per-output rules for outputs the
            model does not have.
        FeedError: the feeds do not fit the model.
        RunFailed: a runner cannot load or run the model.
    """
    config = config or CompareConfig()
    feeds = config.feeds
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    value_ranges: dict[str, str] = {}
    candidate = config.candidate
    ranges = feeds.value_ranges()
    if samples:
        if feeds.inputs is not None or feeds.dims or feeds.ranges:
            raise ConfigError(
                "samples were given; feeds cannot choose others.",
                field="feeds.inputs" if feeds.inputs is not None else "feeds.dims",
            )
        samples = list(samples)
        data = "the contract's golden samples"
    elif feeds.inputs is not None:
        feeds.refuse_with_inputs()
        samples = load_feeds(feeds.inputs, signature=signature)
        data = str(feeds.inputs)
    else:
        samples = synthetic_samples(
            signature,
            model=loaded.proto,
            dims=feeds.sizes(),
            ranges=ranges,
            seed=feeds.seed,
            known=contract_dims(loaded.path),
        )
        chosen = chosen_ranges(signature, loaded.proto, ranges)
        value_ranges = {name: f"{r} ({r.why})" for name, r in chosen.items()}
        data = f"synthetic (seed {feeds.seed})"
    from onnxgate.runners import check_session  # imports ONNX Runtime

    session = config.session
    check_session(session, save_optimized=config.save_optimized)
    trust_pickle = config.trust_pickle
    cand = make_runner(
        candidate,
        loaded,
        session=session,
        trust_pickle=trust_pickle,
        extras=contract_extras(save_optimized=config.save_optimized),
    )
    spec = RuntimeSpec.parse(config.runtime)
    if not spec.installed:
        cand = _isolated(cand, loaded, spec, samples, progress)
    reference_session = session
    if config.save_optimized is not None:
        if not candidate.startswith("ort") and not candidate.endswith(".onnx"):
            raise ConfigError(
                f"save_optimized saves what ONNX Runtime optimised; the candidate {candidate!r} "
                "is not ONNX Runtime.",
                field="save_optimized",
                related=["candidate"],
            )
    if not spec.installed:
        # the providers were asked of the other runtime; the installed one runs on its own
        # providers unless against names them (ort:cuda)
        reference_session = reference_session.model_copy(
            update={"providers": (), "provider_options": {}}
        )
    # only the candidate's optimised model is saved: the reference must not overwrite it
    ref = make_runner(
        config.against,
        loaded,
        session=reference_session,
        trust_pickle=trust_pickle,
        extras=contract_extras(samples=samples, progress=progress),
    )
    report = compare_runners(
        cand,
        ref,
        samples,
        signature=signature,
        tolerances=config.tolerances,
        localize=config.localize,
        model_label=str(loaded.path),
        progress=progress,
    )
    notes = report.notes + ([] if report.passed else deviations_in(loaded.proto))
    return report.model_copy(update={"data": data, "value_ranges": value_ranges, "notes": notes})
