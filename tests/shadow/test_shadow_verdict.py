"""The pure shadow verdict: tallies add up, and judge's failed / inconclusive / passed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from onnxgate.shadow import (
    REQUEST,
    OutputFigures,
    ShadowCriteria,
    ShadowPair,
    judge,
    merge,
    tally,
)


def _pair(n: int, *, passed: bool = True, bucket: str = "any") -> ShadowPair:
    return ShadowPair(
        at=float(n),
        bucket=bucket,
        passed=passed,
        outputs=(
            OutputFigures(
                name="y",
                passed=passed,
                rule="allclose(atol=1e-05, rtol=0.001)",
                reason=None if passed else f"max abs {n}",
                max_abs=float(n),
                cosine=1.0 - n / 1000,
            ),
        ),
        input_digest="0" * 64,
        champion_ms=1.0,
        candidate_ms=1.0,
    )


def test_tallies_of_batches_add_up_to_the_tally_of_all():
    pairs = [_pair(n, passed=n % 3 != 0, bucket=f"b{n % 2}") for n in range(1, 20)]
    whole = tally(pairs)
    assert merge(tally(pairs[:7]), tally(pairs[7:])) == whole
    request = {t.bucket: t for t in whole if t.output == REQUEST}
    assert sum(t.pairs for t in request.values()) == 19
    assert sum(t.failed for t in request.values()) == 6
    y = [t for t in whole if t.output == "y"]
    assert max(t.worst_max_abs for t in y) == 19.0
    assert min(t.min_cosine for t in y) == pytest.approx(0.981)


def test_failures_that_more_traffic_cannot_dilute_fail_at_once():
    criteria = ShadowCriteria(min_pairs=100, min_per_bucket=1, max_failure_rate=0.05)
    few = [_pair(n, passed=n > 4) for n in range(1, 11)]  # 4 failures of 10
    assert judge(tally(few), criteria).status == "inconclusive"  # 4 <= 5% of 100
    more = [_pair(n, passed=n > 6) for n in range(1, 11)]  # 6 failures: over 5 at any size
    verdict = judge(tally(more), criteria)
    assert verdict.status == "failed" and not verdict.passed
    assert "'y'" in verdict.reasons[0] and "6 of 10" in verdict.reasons[0]
    assert "worst max abs 10" in verdict.reasons[0]


def test_passed_needs_every_bucket_filled_and_no_outside_reason():
    criteria = ShadowCriteria(min_pairs=10, min_per_bucket=5)
    pairs = [_pair(n, bucket="b1") for n in range(10)] + [_pair(n, bucket="b2") for n in range(4)]
    verdict = judge(tally(pairs), criteria)
    assert verdict.status == "inconclusive" and "bucket b2 has 4" in verdict.reasons[0]
    pairs.append(_pair(99, bucket="b2"))
    assert judge(tally(pairs), criteria).status == "passed"
    held = judge(tally(pairs), criteria, inconclusive=["the champion moved"])
    assert held.status == "inconclusive" and held.reasons == ("the champion moved",)


def test_criteria_out_of_range_are_refused():
    with pytest.raises(ValidationError):
        ShadowCriteria(max_failure_rate=1.5)
    with pytest.raises(ValidationError):
        ShadowCriteria(min_per_bucket=0)
