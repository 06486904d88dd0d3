"""Statistics shared by the decisions on timed contests: bench's ratio, tune's, quantize's.

A decision on two samples of latencies must not hang on one lucky median: the ratio is given
with a percentile bootstrap interval, and a caller decides only when the whole interval lies on
one side of 1. Nor may it hang on a machine that was busy with something else: ``judge`` takes
the reasons the machine's conditions give (``_contention``) and then calls the comparison
inconclusive, never slower or faster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

Statistic = Literal["latency", "throughput"]
"""``latency`` compares medians; ``throughput`` compares means."""


def improvement(
    defaults: Sequence[float],
    best: Sequence[float],
    objective: Statistic,
    *,
    draws: int = 2000,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """How much better ``best`` is than ``defaults`` (above 1 is better), with a 90% interval.

    Latency compares medians (defaults' p50 / best's p50); throughput compares means (samples/s
    at the batch, best / defaults). The interval is a percentile bootstrap: both samples are
    resampled with replacement ``draws`` times (a resample's median is drawn straight from its
    distribution, :func:`_resampled_medians`, without building the resample).
    """
    a, b = np.asarray(defaults, float), np.asarray(best, float)
    rng = np.random.default_rng(seed)
    if objective == "latency":
        ratio = float(np.median(a) / np.median(b))
        ratios = _resampled_medians(a, draws, rng) / _resampled_medians(b, draws, rng)
    else:
        ratio = float(np.mean(a) / np.mean(b))
        ratios = _resampled_means(a, draws, rng) / _resampled_means(b, draws, rng)
    low, high = np.percentile(ratios, [5, 95])
    return ratio, (float(low), float(high))


def _resampled_medians(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """The medians of ``draws`` resamples of ``x`` with replacement, each drawn in O(1).

    A resample's draw is ``sorted(x)[floor(n * U)]`` with ``U`` uniform on [0, 1); floor never
    decreases, so the resample's k-th smallest is ``sorted(x)[floor(n * U_(k))]``, where ``U_(k)``,
    the k-th smallest of n uniforms, is Beta(k, n - k + 1). For an even n the median also takes
    the (k+1)-th: the n - k uniforms above ``U_(k)`` are uniform on (``U_(k)``, 1), and the least
    of them is ``U_(k) + (1 - U_(k)) * Beta(1, n - k)``. Same distribution as ``np.median`` of
    ``x[rng.integers(0, n, n)]`` (tests/perf/test_stats.py compares them), without its n log n.
    """
    ordered = np.sort(x)
    n = len(ordered)
    k = (n + 1) // 2

    def at(u: np.ndarray) -> np.ndarray:
        return ordered[np.minimum((n * u).astype(np.int64), n - 1)]

    u = rng.beta(k, n - k + 1, draws)
    if n % 2:
        return at(u)
    return (at(u) + at(u + (1 - u) * rng.beta(1, n - k, draws))) / 2


def _resampled_means(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """The means of ``draws`` resamples of ``x`` with replacement, in bounded memory."""
    n = len(x)
    step = max(1, 2_000_000 // n)  # bounded memory for long contests
    return np.concatenate(
        [
            x[rng.integers(0, n, (min(step, draws - start), n))].mean(axis=1)
            for start in range(0, draws, step)
        ]
    )


Verdict = Literal["faster", "within noise", "slower", "inconclusive"]
"""Of one side against the other: ``faster`` or ``slower`` when the whole 90% interval lies on
that side of 1 (``faster`` also needs the gain asked for), ``within noise`` when it holds 1,
``inconclusive`` when the timings cannot be trusted (``reasons`` says why)."""

WIDE_INTERVAL = 2.0
"""Most ratio between the ends of a 90% interval that still reads as one figure: wider, and the
ratio is a guess (a 2885x "speed-up" whose interval runs from 40x to 9000x is not a measurement)."""


class Judgement(NamedTuple):
    """A speed comparison judged once, the same way by bench, tune and quantize."""

    ratio: float
    """Above 1: the second sample is better (faster, or more samples/s)."""
    interval: tuple[float, float]
    """90% percentile-bootstrap interval of ``ratio``."""
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    """Why the timings cannot be trusted: the machine's (``Conditions.reasons``), or an
    interval too wide to read; empty when they can."""

    @property
    def reliable(self) -> bool:
        """No reason to doubt the timings: the verdict is a measurement."""
        return not self.reasons

    @property
    def measured(self) -> Verdict:
        """What the interval alone says, whether or not the timings can be trusted."""
        low, high = self.interval
        return "slower" if high < 1.0 else "faster" if low > 1.0 else "within noise"


def interval_reasons(interval: tuple[float, float]) -> list[str]:
    """Why an interval is too wide to read as one figure (empty when it is not)."""
    low, high = interval
    if low <= 0 or high / low > WIDE_INTERVAL:
        return [
            f"the ratio's 90% interval runs from {low:.2f}x to {high:.2f}x: too wide to be one "
            "figure"
        ]
    return []


def judge(
    before: Sequence[float],
    after: Sequence[float],
    objective: Statistic = "latency",
    *,
    unreliable: Sequence[str] = (),
    min_gain: float = 0.0,
    seed: int = 0,
) -> Judgement:
    """Is ``after`` better than ``before``? The one judge of timed comparisons.

    The ratio and its interval come from :func:`improvement`. ``faster`` needs the whole
    interval above 1 and a ratio of at least ``1 + min_gain``; ``slower`` the whole interval
    below 1; anything else is ``within noise``. Timings the machine spoiled (``unreliable``: the
    reasons of ``Conditions``) make the verdict ``inconclusive``, whatever the figures say: a busy
    machine can make either side look faster, so neither "slower" nor "faster" is proven by it.
    An interval too wide to read (``WIDE_INTERVAL``) is a reason too, but it makes the verdict
    ``inconclusive`` only when it straddles 1: wholly on one side, it proves that side.

    Args:
        before: the reference's latencies (the defaults, the float model, the contender).
        after: the latencies of the side judged.
        objective: ``latency`` compares medians, ``throughput`` means.
        unreliable: why the timings cannot be trusted (empty: they can).
        min_gain: the smallest gain (0.02 = 2%) that counts as ``faster``.
        seed: the bootstrap's seed.
    """
    ratio, interval = improvement(before, after, objective, seed=seed)
    wide = tuple(interval_reasons(interval))
    reasons = tuple(unreliable) + wide
    low, high = interval
    verdict: Verdict
    if unreliable:
        verdict = "inconclusive"
    elif high < 1.0:
        # a wide interval wholly below 1 still proves "slower" on a quiet machine
        verdict = "slower"
    elif low > 1.0 and ratio >= 1.0 + min_gain:
        verdict = "faster"
    elif wide:
        verdict = "inconclusive"
    else:
        verdict = "within noise"
    return Judgement(ratio, interval, verdict, reasons)
