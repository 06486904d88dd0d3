"""Hollow contracts: ones whose sha256 fields may all be right and that still prove nothing.

A contract is evidence only when it compares some outputs, at sizes that exist, by rules that can
fail. An edited contract can keep valid identity fields and lose all three: its golden outputs
emptied, its dims made negative, a rule made vacuous (``cosine>=-1``). ``contract_findings`` names
each such defect with a stable code; ``verify`` refuses the contract with ``HollowContract``
(exit 2, as for a damaged contract: nothing was verified), ``serve`` keeps its model not ready
(both through ``_admit``), and ``write_contract`` refuses to write one, so ``contract init``
never makes a contract that ``verify`` would refuse.

Codes (each finding's ``code``; CON001, CON010 and CON011 are identity's, see ``_verify`` and
``_sign``):

- CON002: no golden samples.
- CON003: a golden sample compares nothing (no output, or only empty arrays).
- CON004: an output of the model is neither compared by a sample nor listed in
  ``golden.skipped_outputs``.
- CON005: impossible dims: a size below 1, bounds that contradict each other or the samples, or a
  sample's size that is not what its stored arrays have.
- CON006: a rule weaker than its floor in ``RULE_FLOORS``. Only this one may be admitted
  (``allow_weak_rules``, ``--allow-weak-rules``); it is then reported, not refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate._words import offered, setting
from onnxgate.contract_store import Contract, GoldenSample, OutputRule
from onnxgate.errors import ConfigError, HollowContract
from onnxgate.model import Signature

NO_SAMPLES = "CON002"
NOTHING_COMPARED = "CON003"
OUTPUT_LEFT_OUT = "CON004"
IMPOSSIBLE_DIMS = "CON005"
WEAK_RULE = "CON006"

CODES = {
    "CON001": "the contract names another model file than the one verified",
    NO_SAMPLES: "no golden samples",
    NOTHING_COMPARED: "a golden sample compares nothing",
    OUTPUT_LEFT_OUT: "an output is neither compared nor listed as skipped",
    IMPOSSIBLE_DIMS: "impossible dims (below 1, contradictory, or not the stored arrays')",
    WEAK_RULE: "a rule weaker than its floor",
    "CON010": "unsigned, and a verifying key is configured",
    "CON011": "the signature does not hold (edited since signed, another key, or forged)",
}
"""Every contract rule code and what it means."""


@dataclass(frozen=True)
class Extent:
    """What the golden samples hold of one output: the floors of some rules scale with it."""

    elements: int
    """Elements over all golden samples."""
    scale: float
    """The 90th percentile of the finite absolute values, the largest over the golden samples (0
    when none, or not numbers): a few planted outliers cannot raise it."""


@dataclass(frozen=True)
class Floor:
    """The weakest rule ``verify`` accepts on one figure: ``cosine >= 0.9``, ``atol <= 0.01``."""

    op: str
    """``>=``: the figure must be at least the bound (cosine); ``<=``: at most (errors)."""
    value: float
    per: str = ""
    """What ``value`` is a fraction of: nothing (a plain bound), ``scale`` (the 90th percentile
    of the output's golden absolute values) or ``elements`` (its elements over all golden
    samples)."""
    least: float = 0.0
    """A bound that scales is never below this."""

    def bound(self, extent: Extent | None) -> float:
        """The bound for one output."""
        if self.per == "scale":
            return max(self.least, self.value * (extent.scale if extent else 0.0))
        if self.per == "elements":
            return max(self.least, self.value * (extent.elements if extent else 0))
        return self.value

    def describe(self, figure: str, extent: Extent | None) -> str:
        """The floor as a rule, with what it scales with: ``atol<=0.3 (10% of ...; at least 0.01)``."""
        text = f"{figure}{self.op}{self.bound(extent):g}"
        if self.per == "scale":
            scale = extent.scale if extent else 0.0
            text += (
                f" ({self.value:.0%} of its golden |value|'s 90th percentile, {scale:g}; at least "
            )
            text += f"{self.least:g})"
        elif self.per == "elements":
            text += f" ({self.value:.0%} of its {extent.elements if extent else 0} element(s))"
        return text

    def admits(self, op: str, value: float, extent: Extent | None = None) -> bool:
        """Whether a rule ``figure OP value`` is at least as strict as this floor."""
        bound = self.bound(extent)
        if self.op == ">=":
            return op in (">=", ">") and value >= bound
        return op in ("<=", "<") and value <= bound


_ABS = Floor("<=", 0.1, per="scale", least=1e-2)
_REL = Floor("<=", 0.1)
RULE_FLOORS: dict[str, Floor] = {
    "atol": _ABS,
    "rtol": _REL,
    "cosine": Floor(">=", 0.9),
    "top1": Floor(">=", 0.9),
    "topk": Floor(">=", 0.9),
    "max_abs": _ABS,
    "p99_abs": _ABS,
    "mean_abs": _ABS,
    "max_rel": _REL,
    "mismatch_fraction": Floor("<=", 1e-2),
    "mismatches": Floor("<=", 1e-2, per="elements"),
}
"""The weakest rule accepted per figure, inclusive.

- Absolute errors (``atol``, ``max_abs``, ``p99_abs``, ``mean_abs``): at most 10% of the 90th
  percentile of the output's absolute golden values, or 0.01 if that is more: a tolerance as large
  as the values themselves compares nothing, and one planted outlier does not widen it.
- Relative errors (``rtol``, ``max_rel``): at most 0.1.
- Agreement (``cosine``, ``top1``, ``topk``): at least 0.9.
- Mismatches: ``mismatch_fraction`` at most 0.01; ``mismatches`` at most 1% of the output's
  elements over all golden samples.

``atol``/``rtol`` are checked where the element rule judges: no metric, or a metric that counts
its mismatches. A rule pointing the other way (``cosine<=1``, ``max_abs>=0``) is always weak."""

ELEMENT_RULE_METRICS = (None, "mismatches", "mismatch_fraction")
"""Rules under which the element rule's ``atol``/``rtol`` decide the verdict."""


class ContractFinding(BaseModel):
    """One reason a contract proves less than it claims, with its stable code."""

    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    allowed: bool = False
    """True for a weak rule admitted by ``allow_weak_rules``: reported, not refused."""


def _finding(code: str, message: str) -> ContractFinding:
    return ContractFinding(code=code, message=message)


def rule_findings(
    rules: Sequence[OutputRule], extents: Mapping[str, Extent] | None = None
) -> list[ContractFinding]:
    """Rules weaker than ``RULE_FLOORS`` (CON006).

    Args:
        rules: the contract's rules.
        extents: what the golden samples hold of each output (``output_extents``); the floors
            of absolute errors and of ``mismatches`` scale with it (without it they take their
            least value, and only ``mismatches<=0`` is admitted).
    """
    from onnxgate.settings import parse_metric

    found = []
    for rule in rules:
        name = rule.output
        extent = (extents or {}).get(name)
        metric = None
        if rule.metric is not None:
            try:
                _, criterion = parse_metric(rule.metric)
            except ConfigError:
                found.append(
                    _finding(WEAK_RULE, f"rule for {name}: {rule.metric!r} is not a known rule")
                )
                continue
            metric = criterion.metric
            floor = RULE_FLOORS[metric]
            if not floor.admits(criterion.op, criterion.value, extent):
                found.append(
                    _finding(
                        WEAK_RULE,
                        f"rule for {name}: {rule.metric} is weaker than the floor "
                        f"{floor.describe(metric, extent)}",
                    )
                )
        if metric in ELEMENT_RULE_METRICS:
            for figure, value in (("atol", rule.atol), ("rtol", rule.rtol)):
                floor = RULE_FLOORS[figure]
                if not floor.admits("<=", value, extent):
                    found.append(
                        _finding(
                            WEAK_RULE,
                            f"rule for {name}: {figure}={value:g} is weaker than the floor "
                            f"{floor.describe(figure, extent)}",
                        )
                    )
    return found


def _sample_findings(
    contract: Contract, signature: Signature, arrays: Mapping[str, np.ndarray]
) -> Iterable[ContractFinding]:
    golden = contract.golden
    assert golden is not None
    outputs = [o.name for o in signature.outputs]
    skipped = set(golden.skipped_outputs)
    axes = {
        spec.name: [(i, d) for i, d in enumerate(spec.shape or ()) if isinstance(d, str)]
        for spec in signature.inputs
    }
    for sample in golden.samples:
        where = f"golden sample {sample.key} ({sample.label})"
        compared = [arrays.get(f"{sample.key}/out/{n}") for n in sample.outputs]
        if not sample.outputs:
            yield _finding(NOTHING_COMPARED, f"{where} compares no output")
        elif all(a is not None and a.size == 0 for a in compared):
            yield _finding(NOTHING_COMPARED, f"{where} compares only empty arrays")
        for name in outputs if sample.outputs else ():  # an empty sample is CON003 alone
            if name not in sample.outputs and name not in skipped:
                yield _finding(
                    OUTPUT_LEFT_OUT,
                    f"{where} does not compare output {name}, and golden.skipped_outputs does "
                    "not list it",
                )
        for dim, size in sample.dims.items():
            if size < 1:
                yield _finding(IMPOSSIBLE_DIMS, f"{where} gives {dim}={size}; a size is at least 1")
                continue
            for input_name, positions in axes.items():
                array = arrays.get(f"{sample.key}/in/{input_name}")
                for axis, named in positions:
                    if named != dim or array is None or array.ndim <= axis:
                        continue
                    if array.shape[axis] != size:
                        yield _finding(
                            IMPOSSIBLE_DIMS,
                            f"{where} gives {dim}={size}, and its stored input {input_name} has "
                            f"{array.shape[axis]} there (shape {list(array.shape)})",
                        )


def _bound_findings(contract: Contract) -> Iterable[ContractFinding]:
    golden = contract.golden
    samples = golden.samples if golden else []
    for dim, bound in contract.signature.dims.items():
        where = f"signature.dims.{dim}"
        low, high = bound.min, bound.max
        if any(v is not None and v < 1 for v in (low, high)):
            yield _finding(IMPOSSIBLE_DIMS, f"{where} is [{low}, {high}]; a size is at least 1")
            continue
        if low is not None and high is not None and low > high:
            yield _finding(IMPOSSIBLE_DIMS, f"{where} has min {low} above max {high}")
            continue
        for sample in samples:
            size = sample.dims.get(dim)
            if size is None or size < 1:
                continue
            if (low is not None and size < low) or (high is not None and size > high):
                yield _finding(
                    IMPOSSIBLE_DIMS,
                    f"golden sample {sample.key} was made at {dim}={size}, outside {where} "
                    f"[{low}, {high}]",
                )


def contract_findings(
    contract: Contract, signature: Signature, arrays: Mapping[str, np.ndarray]
) -> list[ContractFinding]:
    """Every reason the contract proves nothing, or less than its rules' floors (CON002-CON006).

    Args:
        contract: the contract.
        signature: the model's own signature (from its graph, not the contract's copy of it).
        arrays: the golden file's arrays, by key.
    """
    golden = contract.golden
    if golden is None or not golden.samples:
        return [_finding(NO_SAMPLES, "the contract has no golden samples: it compares nothing")]
    found = list(_sample_findings(contract, signature, arrays))
    found += _bound_findings(contract)
    found += rule_findings(golden.rules, output_extents(golden.samples, arrays))
    return found


def output_extents(
    samples: Sequence[GoldenSample], arrays: Mapping[str, np.ndarray]
) -> dict[str, Extent]:
    """What the golden samples hold of each compared output: elements, scale of |value|."""
    elements: dict[str, int] = {}
    scale: dict[str, float] = {}
    for sample in samples:
        for name in sample.outputs:
            array = arrays.get(f"{sample.key}/out/{name}")
            elements[name] = elements.get(name, 0) + (array.size if array is not None else 0)
            typical = 0.0
            if array is not None and array.size and array.dtype.kind in "biufc":
                finite = np.abs(array[np.isfinite(array)])
                typical = float(np.percentile(finite, 90)) if finite.size else 0.0
            scale[name] = max(scale.get(name, 0.0), typical)
    return {name: Extent(elements[name], scale[name]) for name in elements}


def _tighten_or_admit() -> str:
    """The way out of weak rules, in the words of the interface in use.

    Each setting is offered only where the interface has it: a gate tightens its
    ``[steps.export] tolerances`` and has no key to admit weak rules.
    """
    rules = f"the rules ({setting('tolerances')})" if offered("tolerances") else "the rules"
    admit = (
        f", or admit them knowingly with {setting('allow_weak_rules', True)}"
        if offered("allow_weak_rules")
        else ""
    )
    return f"Tighten {rules} and re-create the contract{admit}."


def refuse_hollow(
    findings: Sequence[ContractFinding], where: str, *, allow_weak_rules: bool
) -> list[ContractFinding]:
    """Raise for what cannot be admitted; return the weak rules ``allow_weak_rules`` admits.

    Raises:
        HollowContract: a finding other than a weak rule, or a weak rule not admitted; the
            message lists each with its code.
    """
    refused = [f for f in findings if not (allow_weak_rules and f.code == WEAK_RULE)]
    if refused:
        listed = "; ".join(f"{f.code} {f.message}" for f in refused)
        if all(f.code == WEAK_RULE for f in refused):
            raise HollowContract(
                f"{where}: rules weaker than their floor: {listed}.",
                hint=_tighten_or_admit(),
                findings=[(f.code, f.message) for f in refused],
            )
        raise HollowContract(
            f"{where}: the contract is hollow: {listed}.",
            hint="It proves nothing as it stands; re-create it from the model with "
            "`onnxgate contract init --force` (or the step that made it).",
            findings=[(f.code, f.message) for f in refused],
        )
    return [f.model_copy(update={"allowed": True}) for f in findings]
