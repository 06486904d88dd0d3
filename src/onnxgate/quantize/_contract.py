"""The quantised model's contract: golden samples of the gated outputs, rules ``verify`` can hold.

``verify`` judges with ``compare``'s figures, per golden sample, and cannot see labels; the gate
judges per row over all evaluation rows, and by labels when given. So the contract keeps the
outputs the gate judged, each with the gate's rule where the golden samples meet it in
``compare``'s terms, or with the figure they measure (a notice says so): a quantised model
verifies against its own contract on the machine that made it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from onnxgate._version import __version__
from onnxgate._words import offered, setting
from onnxgate.compare import compare_runners
from onnxgate.contract import (
    SIDECAR,
    ContractStore,
    Lineage,
    Provenance,
    SecondOpinion,
    cross_check,
    output_extents,
    rule_findings,
    rules_for,
    write_contract,
)
from onnxgate.contract_store import sha256_file
from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.quantize._gate import Judge
from onnxgate.quantize._report import QuantizeReport
from onnxgate.settings import Criterion, Tolerances

GOLDEN_SAMPLES = 4
"""Evaluation samples kept as the quantised model's golden samples."""


def _ort_version() -> str:
    try:
        return version("onnxruntime")
    except PackageNotFoundError:
        return "unknown"


def _floor(value: float, places: int = 6) -> float:
    return math.floor(value * 10**places) / 10**places


def _ceil(value: float, places: int = 6) -> float:
    return math.ceil(value * 10**places) / 10**places


def contract_rules(
    delivered: Path,
    judge: Judge,
    signature: Signature,
    golden: Sequence[Sample],
    max_drop: float,
) -> tuple[Tolerances, list[str]]:
    """The gate's rules as ``verify`` will apply them, measured on the golden samples.

    ``verify`` judges with ``compare``'s figures (cosine over each sample's whole output, top-1
    per sample, the worst over samples), and labels are not kept, so accuracy is recorded as
    top-1 agreement with the float model. Each gated output keeps its gate rule where the golden
    samples meet it in those terms; where they do not, the rule records what they measure (a
    notice says so), so the contract holds for the model that was delivered. The model runs
    where the judge ran it (``Judge.on``: its providers on its runtime), where it must run.
    """
    from onnxgate.runners import open_runner

    wanted = judge.compare_config()
    report = compare_runners(
        open_runner(load_model(delivered), judge.session, runtime=judge.runtime or "installed"),
        judge.reference,
        list(golden),
        signature=signature,
        tolerances=wanted,
    )
    by_name = {o.name: o for o in report.outputs}
    metrics: dict[str | None, Criterion] = {}
    notices: list[str] = []
    for rule in judge.rules:
        criterion = wanted.criteria()[rule.output]
        found = by_name[rule.output]
        measured = getattr(found, criterion.metric, None)
        if measured is None and criterion.metric == "top1":
            criterion = Criterion("cosine", ">=", 1.0 - max_drop)
            measured = found.cosine
        if criterion.holds(measured):
            metrics[rule.output] = criterion
            continue
        if measured is None:
            raise ConfigError(
                f"output {rule.output!r}: compare has no {criterion.metric} figure for it, so "
                "the contract cannot state its rule.",
                hint=f"Judge it with a {setting('metrics')} rule compare measures"
                + (
                    f", or write no contract ({setting('contract', False)})."
                    if offered("contract")
                    else "."
                ),
            )
        upward = criterion.op in (">=", ">")
        recorded = Criterion(
            criterion.metric,
            ">=" if upward else "<=",
            _floor(measured) if upward else _ceil(measured),
        )
        metrics[rule.output] = recorded
        notices.append(
            f"contract rule for {rule.output}: {recorded} (compare's {criterion.metric} per "
            f"golden sample is {measured:.6g}, below the gate's {criterion}; the gate's figure "
            "is taken per row over all evaluation rows)"
        )
    return Tolerances.from_criteria(metrics), notices


def second_opinion(
    parent: LoadedModel,
    judge: Judge,
    signature: Signature,
    samples: Sequence[Sample],
    say: Callable[[str], None],
) -> SecondOpinion:
    """The golden outputs (the float parent's, from ONNX Runtime) checked by a second runner.

    The reference evaluator runs the float parent; the outputs are judged by the element rule at
    the default float tolerances (the contract's own rules are the quantised model's, looser).

    Raises:
        ParityError: they disagree (the message names the first diverging node, replayed).
        ReferenceFailed: the reference evaluator cannot run the parent (``--no-second-opinion``).
    """
    from onnxgate.runners import ReferenceRunner, open_runner

    gated = {r.output for r in judge.rules}
    produced = []
    for sample in samples:
        outputs = judge.reference.infer(sample.feeds).outputs
        produced.append((sample, {k: v for k, v in outputs.items() if k in gated}))
    rules = rules_for(signature, produced[0][1], Tolerances())
    return cross_check(
        open_runner(parent, judge.session), ReferenceRunner(parent), produced, signature, rules, say
    )


def write_quantized_contract(
    out: Path,
    parent: LoadedModel,
    judge: Judge,
    evaluation: list[Sample],
    report: QuantizeReport,
    config: Tolerances,
    opinion: SecondOpinion,
    *,
    config_hash: str,
    store: ContractStore = SIDECAR,
) -> str:
    """The quantised model's contract, with its lineage, written once; where it is kept.

    Golden samples are the float parent's outputs of the gated outputs (the others are recorded
    as skipped), judged by the gate's rules as ``contract_rules`` measured them. The provenance's
    lineage links the parent by sha256 with the quantize config's hash; the contract's
    ``lineage`` details name the parent, the gate result and the speed gate (with the latencies
    behind it).
    """
    parent_sha256 = sha256_file(parent.path)
    lineage = {
        "step": "quantize",
        "parent": {
            "model": str(parent.path),
            "sha256": parent_sha256,
            "contract": store.location(parent.path) if store.exists(parent.path) else None,
        },
        "settings": report.settings.model_dump(mode="json"),
        # where the model was gated and must run: verify and serve read it here
        "runs_on": {
            "providers": list(report.settings.providers),
            "runtime": report.settings.runtime,
        },
        "excluded_nodes": [s.node for s in report.excluded],
        "calibration": report.calibration.model_dump(mode="json") if report.calibration else None,
        "gate": {
            "passed": report.passed,
            "max_drop": report.max_drop,
            "evaluation": report.evaluation.model_dump(mode="json"),
            "overlap_rows": report.overlap_rows,
            "ranked_on": report.ranked_on,
            "figures": [f.model_dump(mode="json", exclude={"drift"}) for f in report.gate],
        },
        # whether it was timed, and when it is slower (written under --allow-slower), by how much
        "speed": report.speed.model_dump(mode="json")
        | {"latency": [row.model_dump(mode="json") for row in report.latency]},
    }
    write_contract(
        load_model(out),
        judge.reference,
        evaluation[:GOLDEN_SAMPLES],
        provenance=Provenance(
            exporter=f"onnxruntime.quantization {_ort_version()}"
            if report.settings.to == "int8"
            else f"onnxruntime.transformers.float16 {_ort_version()}",
            options=report.settings.model_dump(mode="json"),
            onnxgate=__version__,
            lineage=Lineage(parent_sha256=parent_sha256, step="quantize", config_hash=config_hash),
        ),
        config=config,
        force=True,
        outputs={r.output for r in judge.rules},
        lineage=lineage,
        second_opinion=opinion,
        ops_libraries=judge.session.ops_libraries,
        store=store,
    )
    return store.location(out)


def weak_rule_notices(out: Path, *, store: ContractStore = SIDECAR) -> list[str]:
    """What in the written contract ``verify`` will refuse as weaker than its floors (CON006).

    The gate judged every evaluation row; the contract keeps what its few golden samples measure,
    which can fall below verify's floors (a top-1 agreement of 0.6 over five rows). The model is
    still delivered, but the user learns now, not at ``verify``, that it needs
    ``allow_weak_rules`` or more telling data (named in the words of the interface in use).
    """
    contract = store.read(out)
    if contract.golden is None:
        return []
    extents = output_extents(contract.golden.samples, store.read_golden(out, contract))
    # a gate has no key that admits weak rules: there the way out is better data alone
    admit = (
        f" unless given {setting('allow_weak_rules', True)}" if offered("allow_weak_rules") else ""
    )
    return [
        f"{finding.code} {finding.message}: verify refuses this contract{admit}; evaluation "
        f"data closer to production ({setting('eval')}) gives firmer rules"
        for finding in rule_findings(contract.golden.rules, extents)
    ]
