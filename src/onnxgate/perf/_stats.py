"""Statistics shared by the decisions taken on timed contests (tune's winner, quantize's speed).

A decision on two samples of latencies must not hang on one lucky median: the ratio is given
with a percentile bootstrap interval, and a caller decides only when the whole interval lies on
one side of 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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
    resampled with replacement ``draws`` times.
    """
    a, b = np.asarray(defaults, float), np.asarray(best, float)
    stat = np.median if objective == "latency" else np.mean
    ratio = float(stat(a) / stat(b))
    rng = np.random.default_rng(seed)
    ratios = []
    step = max(1, 2_000_000 // max(len(a), len(b)))  # bounded memory for long contests
    for start in range(0, draws, step):
        n = min(step, draws - start)
        ra = stat(a[rng.integers(0, len(a), (n, len(a)))], axis=1)
        rb = stat(b[rng.integers(0, len(b), (n, len(b)))], axis=1)
        ratios.append(ra / rb)
    low, high = np.percentile(np.concatenate(ratios), [5, 95])
    return ratio, (float(low), float(high))
