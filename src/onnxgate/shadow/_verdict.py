"""A verdict from shadowed traffic: tallies per output and shape bucket, judged against criteria.

Why tallies, not pairs: the registry keeps a bounded number of pairs per run (failures first,
then the newest), but a verdict must count every pair ever judged, or pruning would turn a
failing candidate into a passing one. A ``ShadowTally`` holds, per output and bucket, how many
pairs were judged, how many failed the rule, and the worst figures seen; tallies add up (``merge``),
so many runs, or many batches of one run, sum to one set.

Each bucket also has a tally for the whole request, under the output name ``""`` (``REQUEST``;
an ONNX output never has an empty name): its ``pairs`` is how many requests fell in the bucket,
its ``failed`` how many had any output outside its rule.

The judgment is pure (``judge``): the registry's ``shadow-report`` uses it over stored tallies,
and a server can use it over tallies it keeps in memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from onnxgate.settings import Part
from onnxgate.shadow._types import ShadowPair

REQUEST = ""
"""The output name of a bucket's whole-request tally."""

VerdictStatus = Literal["passed", "failed", "inconclusive"]


class ShadowCriteria(Part):
    """What a shadow verdict asks of the traffic before it passes a candidate."""

    min_pairs: int = Field(1000, ge=1)
    """Judged requests needed in all (over every bucket)."""
    min_per_bucket: int = Field(30, ge=1)
    """Judged requests needed in every shape bucket that traffic reached."""
    max_failure_rate: float = Field(0.0, ge=0.0, le=1.0)
    """The share of requests an output may fail its rule on (0: none may)."""
    against: str | None = None
    """The champion's alias the candidate must have been compared with (``champion`` for
    ``shadow-report``; for ``promote`` the alias being moved)."""


class ShadowTally(BaseModel):
    """Every pair of one output in one bucket, counted; figures are the worst seen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str
    """The output's name; ``""`` (``REQUEST``) for the whole request."""
    bucket: str
    rule: str = ""
    pairs: int = 0
    failed: int = 0
    nonfinite: int = 0
    """Non-finite values not matched on the other side, summed."""
    worst_max_abs: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    first_failure: str | None = None
    """The reason the rule first failed, as the judge worded it."""

    def merge(self, other: ShadowTally) -> ShadowTally:
        """This tally and ``other`` (same output and bucket) as one."""
        return ShadowTally(
            output=self.output,
            bucket=self.bucket,
            rule=other.rule or self.rule,
            pairs=self.pairs + other.pairs,
            failed=self.failed + other.failed,
            nonfinite=self.nonfinite + other.nonfinite,
            worst_max_abs=_most((self.worst_max_abs, other.worst_max_abs)),
            min_cosine=_least((self.min_cosine, other.min_cosine)),
            min_top1=_least((self.min_top1, other.min_top1)),
            first_failure=self.first_failure or other.first_failure,
        )


def _least(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _most(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def tally(pairs: Iterable[ShadowPair]) -> list[ShadowTally]:
    """The tallies of some pairs: per output and bucket, and per bucket for whole requests."""
    found: dict[tuple[str, str], ShadowTally] = {}

    def add(item: ShadowTally) -> None:
        key = (item.output, item.bucket)
        found[key] = found[key].merge(item) if key in found else item

    for pair in pairs:
        add(
            ShadowTally(
                output=REQUEST,
                bucket=pair.bucket,
                pairs=1,
                failed=0 if pair.passed else 1,
                first_failure=None if pair.passed else _reason(pair),
            )
        )
        for figures in pair.outputs:
            add(
                ShadowTally(
                    output=figures.name,
                    bucket=pair.bucket,
                    rule=figures.rule,
                    pairs=1,
                    failed=0 if figures.passed else 1,
                    nonfinite=figures.nonfinite,
                    worst_max_abs=storable(figures.max_abs),
                    min_cosine=storable(figures.cosine),
                    min_top1=storable(figures.top1),
                    first_failure=None if figures.passed else figures.reason or "failed",
                )
            )
    return sorted(found.values(), key=lambda t: (t.output, t.bucket))


def merge(*groups: Iterable[ShadowTally]) -> list[ShadowTally]:
    """Tallies of several runs (or batches) summed per output and bucket."""
    found: dict[tuple[str, str], ShadowTally] = {}
    for group in groups:
        for item in group:
            key = (item.output, item.bucket)
            found[key] = found[key].merge(item) if key in found else item
    return sorted(found.values(), key=lambda t: (t.output, t.bucket))


def storable(value: float | None) -> float | None:
    """A figure a database and JSON can hold: NaN (no figure) as None, ±inf as the largest float."""
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return math.copysign(1.7976931348623157e308, value)
    return float(value)


def _reason(pair: ShadowPair) -> str:
    failed = [o for o in pair.outputs if not o.passed]
    if not failed:
        return "failed"
    first = failed[0]
    return f"{first.name}: {first.reason or first.rule}"


class OutputVerdict(BaseModel):
    """One output over all judged requests: its rule, how often it failed, its worst figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str
    rule: str
    pairs: int
    failed: int
    failure_rate: float
    passed: bool
    """Its failures within ``max_failure_rate``."""
    worst_max_abs: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    nonfinite: int = 0
    first_failure: str | None = None


class ShadowVerdict(BaseModel):
    """passed, failed or inconclusive, with every reason in words and the figures behind them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: VerdictStatus
    reasons: tuple[str, ...] = ()
    """Why it failed or is inconclusive (each names the output and rule, or the bucket)."""
    pairs: int
    """Judged requests in all."""
    failed_pairs: int
    """Requests with any output outside its rule."""
    buckets: dict[str, int]
    """Judged requests per shape bucket."""
    outputs: tuple[OutputVerdict, ...]
    criteria: ShadowCriteria

    @property
    def passed(self) -> bool:
        """The candidate may be promoted on this traffic."""
        return self.status == "passed"


def judge(
    tallies: Sequence[ShadowTally],
    criteria: ShadowCriteria,
    *,
    inconclusive: Sequence[str] = (),
) -> ShadowVerdict:
    """The verdict of some tallies under ``criteria``.

    Failed when an output failed its rule on more requests than ``max_failure_rate`` allows of
    ``max(pairs, min_pairs)``: failures more traffic could not dilute fail at once (with the
    default rate of 0, the first failure). Otherwise inconclusive while there are fewer than
    ``min_pairs`` requests, a bucket traffic reached has fewer than ``min_per_bucket``, or the
    caller says why (``inconclusive``: the champion moved, say); else passed.

    Args:
        tallies: Per output and bucket, with the whole-request tallies (output ``""``).
        criteria: What the traffic must show.
        inconclusive: Reasons from outside the tallies that keep the verdict from passing.
    """
    summed = merge(tallies)
    buckets = {t.bucket: t.pairs for t in summed if t.output == REQUEST}
    total = sum(buckets.values())
    failed_pairs = sum(t.failed for t in summed if t.output == REQUEST)
    allowed = criteria.max_failure_rate * max(total, criteria.min_pairs)
    outputs = []
    for name in sorted({t.output for t in summed if t.output != REQUEST}):
        parts = [t for t in summed if t.output == name]
        pairs = sum(t.pairs for t in parts)
        failed = sum(t.failed for t in parts)
        outputs.append(
            OutputVerdict(
                output=name,
                rule=next((t.rule for t in parts if t.rule), ""),
                pairs=pairs,
                failed=failed,
                failure_rate=failed / pairs if pairs else 0.0,
                passed=failed <= allowed,
                worst_max_abs=_most(t.worst_max_abs for t in parts),
                min_cosine=_least(t.min_cosine for t in parts),
                min_top1=_least(t.min_top1 for t in parts),
                nonfinite=sum(t.nonfinite for t in parts),
                first_failure=next((t.first_failure for t in parts if t.first_failure), None),
            )
        )
    failures = [_failure(o, criteria) for o in outputs if not o.passed]
    unsure = list(inconclusive)
    if total < criteria.min_pairs:
        unsure.append(
            f"{total} request(s) judged; the verdict needs {criteria.min_pairs} (min_pairs)"
        )
    for bucket, count in sorted(buckets.items()):
        if count < criteria.min_per_bucket:
            unsure.append(
                f"bucket {bucket} has {count} request(s); every bucket traffic reached needs "
                f"{criteria.min_per_bucket} (min_per_bucket)"
            )
    status: VerdictStatus = "failed" if failures else "inconclusive" if unsure else "passed"
    return ShadowVerdict(
        status=status,
        reasons=tuple(failures + unsure if failures else unsure),
        pairs=total,
        failed_pairs=failed_pairs,
        buckets=dict(sorted(buckets.items())),
        outputs=tuple(outputs),
        criteria=criteria,
    )


def _failure(output: OutputVerdict, criteria: ShadowCriteria) -> str:
    worst = []
    if output.min_cosine is not None:
        worst.append(f"lowest cosine {output.min_cosine:.6g}")
    if output.worst_max_abs is not None:
        worst.append(f"worst max abs {output.worst_max_abs:.3g}")
    if output.min_top1 is not None:
        worst.append(f"lowest top-1 agreement {output.min_top1:.4g}")
    allowed = (
        "none may fail"
        if criteria.max_failure_rate == 0
        else f"at most {criteria.max_failure_rate:.4g} may"
    )
    return (
        f"output {output.output!r} failed its rule {output.rule or '?'} on {output.failed} of "
        f"{output.pairs} request(s) ({allowed})"
        + (f"; {', '.join(worst)}" if worst else "")
        + (f"; first: {output.first_failure}" if output.first_failure else "")
    )


class WorstPair(BaseModel):
    """A kept request among the worst: failing ones first, then the lowest cosine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    """The pair's id in the registry (``Registry.shadow_inputs`` reads its inputs, if kept)."""
    run: int
    at: datetime
    bucket: str
    passed: bool
    input_digest: str
    """sha256 of the request's feeds: the request itself is kept only when allowed."""
    inputs_kept: bool
    failed_outputs: tuple[str, ...] = ()
    reason: str | None = None
    """The first failing output's reason."""
    min_cosine: float | None = None
    max_abs: float | None = None
    champion_ms: float
    candidate_ms: float


class ShadowRunInfo(BaseModel):
    """One shadow run of the candidate, and whether the verdict counts it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    champion: str
    """The champion version it was compared with (``NAME@N``)."""
    started_at: datetime
    host: str
    pairs: int
    counted: bool
    """Compared with the version the champion's alias names now."""


class ShadowReport(BaseModel):
    """``registry shadow-report``: a candidate's traffic against the champion, and the verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: str
    """``NAME@N``."""
    champion: str
    """``NAME@M``, the version ``against`` names now."""
    against: str
    runs: tuple[ShadowRunInfo, ...] = ()
    verdict: ShadowVerdict
    worst: tuple[WorstPair, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """The verdict passed."""
        return self.verdict.passed

    def evidence(self) -> dict[str, object]:
        """What a promotion on this verdict records (``promotions.evidence``): figures, not pairs."""
        v = self.verdict
        return {
            "kind": "shadow",
            "status": v.status,
            "candidate": self.candidate,
            "champion": self.champion,
            "against": self.against,
            "runs": [r.id for r in self.runs if r.counted],
            "pairs": v.pairs,
            "failed_pairs": v.failed_pairs,
            "buckets": dict(v.buckets),
            "criteria": v.criteria.model_dump(mode="json"),
            "outputs": {
                o.output: {
                    "rule": o.rule,
                    "pairs": o.pairs,
                    "failed": o.failed,
                    "worst_max_abs": o.worst_max_abs,
                    "min_cosine": o.min_cosine,
                    "min_top1": o.min_top1,
                }
                for o in v.outputs
            },
        }
