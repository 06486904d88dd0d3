"""Error figures between a candidate output ``a`` and a reference output ``b``.

The element rule is NumPy's ``allclose`` rule with the reference on the right:
``|a - b| <= atol + rtol * |b|``. A NaN matches a NaN in the same place and an infinity matches
the same infinity; anything else involving a NaN or an infinity is a mismatch. Statistics (max,
mean, p99, relative error, cosine) are taken over the places where both values are finite, and NaN
and infinity counts are reported beside them, so one NaN never turns every figure into NaN.
The tolerances and metric rules a config gives (``Tolerance``, the per-dtype defaults,
``Criterion``) are parsed in ``onnxgate.settings``, below every step that judges outputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate.settings import Tolerance, kind

RULE = (
    "an element of the candidate a matches the reference b when |a - b| <= atol + rtol * |b|; "
    "NaN matches NaN and an infinity the same infinity"
)

TOP_K = 5


def as_array(value: Any) -> tuple[np.ndarray, list[Any] | None]:
    """A comparable array for an output, and the keys when the output was a map.

    A map (``{label: score}``) becomes its values in its own key order (ZipMap keeps the class
    order of the estimator); a sequence of maps becomes a [rows, keys] matrix; a sequence of
    tensors is stacked when they share a shape and concatenated flat otherwise (see
    ``structure``, which the caller compares first).
    """
    if isinstance(value, np.ndarray):
        return value, None
    if isinstance(value, dict):
        keys = list(value)
        return np.asarray([value[k] for k in keys]), keys
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, dict) for v in value):
            keys = list(value[0])
            if any(set(v) != set(keys) for v in value):
                raise ValueError("the maps of the sequence have different keys")
            return np.asarray([[v[k] for k in keys] for v in value]), keys
        parts = [np.asarray(v) for v in value]
        if len({p.shape for p in parts}) <= 1:
            return np.asarray(parts), None
        return np.concatenate([p.ravel() for p in parts]), None
    return np.asarray(value), None


def structure(value: Any) -> tuple[tuple[int, ...], ...] | None:
    """Shapes of the tensors of a sequence output; None for anything else."""
    if isinstance(value, list | tuple) and not any(isinstance(v, dict) for v in value):
        return tuple(np.shape(v) for v in value)
    return None


def reorder(values: np.ndarray, keys: list[Any], order: list[Any]) -> np.ndarray:
    """Columns of a map matrix (or entries of a map vector) put in another key order."""
    index = [keys.index(k) for k in order]
    return values[..., index]


class Figures(BaseModel):
    """Error figures of one output on one sample (or, in a report, over all samples)."""

    model_config = ConfigDict(extra="forbid")

    elements: int = 0
    mismatches: int = 0
    """Elements that break the element rule."""
    mismatch_fraction: float = 0.0
    nonfinite_mismatches: int = 0
    """Elements where a NaN or an infinity on one side is not matched on the other."""
    max_abs: float | None = None
    mean_abs: float | None = None
    p99_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    top1: float | None = None
    """Share of rows whose argmax agrees ([rows, classes] float outputs)."""
    topk: float | None = None
    """Mean overlap of the top-5 indices per row ([rows, classes] float outputs)."""
    nan: tuple[int, int] = (0, 0)
    """NaN count in (candidate, reference)."""
    inf: tuple[int, int] = (0, 0)
    """Infinity count in (candidate, reference)."""


DRIFT_EDGES: tuple[float, ...] = tuple(float(e) for e in np.logspace(-15, 3, 55))
"""Bin edges of ``Drift.counts``: fixed, three a decade from 1e-15 to 1e3, so the histograms of
several samples (or outputs) add up bin by bin; a renderer shows the span that holds counts."""
DRIFT_ROWS = 1000
"""Row cosines a ``Drift`` keeps, in row order (its ``rows`` counts them all)."""


class Drift(BaseModel):
    """How the error of one float output spreads, for plots: not a verdict.

    ``counts[i]`` counts the elements whose absolute error ``|a - b|`` lies in
    ``[edges[i], edges[i + 1])`` (errors below the first edge fall in the first bin, above the
    last in the last); exact agreement is counted in ``zeros``. Only places where both sides are
    finite count. A row is one index along axis 0 of a sample's output, flattened (an output of
    one axis or none is one row), and ``row_cosine`` is its cosine similarity, rows counted across
    samples in order.
    """

    model_config = ConfigDict(extra="forbid")

    edges: list[float]
    counts: list[int]
    zeros: int = 0
    rows: int = 0
    """Rows over all samples (``row_cosine`` keeps the first ``DRIFT_ROWS``)."""
    row_cosine: list[float] = []
    row_cosine_min: float | None = None
    """The lowest row cosine over all rows."""

    @property
    def elements(self) -> int:
        """Elements counted: the histogram's and the zeros."""
        return self.zeros + sum(self.counts)


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine per row of two same-shaped float64 arrays, non-finite places left out."""
    a2 = a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)
    b2 = b.reshape(b.shape[0], -1) if b.ndim >= 2 else b.reshape(1, -1)
    finite = np.isfinite(a2) & np.isfinite(b2)
    fa, fb = np.where(finite, a2, 0.0), np.where(finite, b2, 0.0)
    norms = np.linalg.norm(fa, axis=1) * np.linalg.norm(fb, axis=1)
    both_zero = ~fa.any(axis=1) & ~fb.any(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        row = np.where(norms > 0, np.sum(fa * fb, axis=1) / norms, np.where(both_zero, 1.0, 0.0))
    return np.clip(row, -1.0, 1.0)


def drift(pairs: Iterable[tuple[Any, Any]]) -> Drift | None:
    """The ``Drift`` of candidate against reference over (candidate, reference) array pairs.

    Each pair is one sample's output on both sides. None when any pair is not two float arrays of
    one shape, or there is nothing to count.
    """
    counts = np.zeros(len(DRIFT_EDGES) - 1, dtype=np.int64)
    edges = np.asarray(DRIFT_EDGES)
    zeros = rows = 0
    cosines: list[float] = []
    lowest: float | None = None
    for a_value, b_value in pairs:
        a, b = np.asarray(a_value), np.asarray(b_value)
        if a.shape != b.shape or kind(a.dtype) != "float" or kind(b.dtype) != "float":
            return None
        if a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a64 - b64)
        diff = diff[np.isfinite(a64) & np.isfinite(b64)]
        zeros += int((diff == 0).sum())
        bins = np.searchsorted(edges, diff[diff > 0], side="right") - 1
        counts += np.bincount(np.clip(bins, 0, counts.size - 1), minlength=counts.size)
        row = _row_cosines(a64, b64)
        rows += int(row.size)
        cosines.extend(float(c) for c in row[: max(DRIFT_ROWS - len(cosines), 0)])
        low = float(row.min())
        lowest = low if lowest is None else min(lowest, low)
    if rows == 0:
        return None
    return Drift(
        edges=list(DRIFT_EDGES),
        counts=[int(c) for c in counts],
        zeros=zeros,
        rows=rows,
        row_cosine=cosines,
        row_cosine_min=lowest,
    )


def merge_drift(parts: Iterable[Drift | None]) -> Drift | None:
    """One ``Drift`` of several (the samples of one output, in order), skipping Nones."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    cosines = [c for p in known for c in p.row_cosine][:DRIFT_ROWS]
    lows = [p.row_cosine_min for p in known if p.row_cosine_min is not None]
    return Drift(
        edges=known[0].edges,
        counts=[int(sum(column)) for column in zip(*(p.counts for p in known), strict=True)],
        zeros=sum(p.zeros for p in known),
        rows=sum(p.rows for p in known),
        row_cosine=cosines,
        row_cosine_min=min(lows) if lows else None,
    )


def _counted(elements: int, mismatches: int) -> dict[str, float | int]:
    return {
        "elements": elements,
        "mismatches": mismatches,
        "mismatch_fraction": mismatches / elements if elements else 0.0,
    }


def _agreement(a: np.ndarray, b: np.ndarray) -> tuple[float | None, float | None]:
    """Top-1 and top-k agreement along the last axis, for [rows, classes] score outputs."""
    if a.ndim not in (1, 2) or a.shape[-1] < 2:
        return None, None
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    top1 = float(np.mean(np.argmax(a2, axis=-1) == np.argmax(b2, axis=-1)))
    k = min(TOP_K, a2.shape[-1] - 1)
    if k < 2:
        return top1, None
    ta = np.argsort(-a2, axis=-1, kind="stable")[:, :k]
    tb = np.argsort(-b2, axis=-1, kind="stable")[:, :k]
    overlap = [len(set(x) & set(y)) / k for x, y in zip(ta.tolist(), tb.tolist(), strict=True)]
    return top1, float(np.mean(overlap))


def _exact_figures(a: np.ndarray, b: np.ndarray) -> Figures:
    """Integer or boolean outputs: equality, with error figures from exact integer differences."""
    equal = np.asarray(a == b)
    wide = a.astype(object).ravel() - b.astype(object).ravel()  # Python ints: no overflow
    diff = np.abs(wide).astype(np.float64)
    return Figures(
        **_counted(int(a.size), int(a.size - equal.sum())),
        max_abs=float(diff.max()),
        mean_abs=float(diff.mean()),
        p99_abs=float(np.percentile(diff, 99)),
    )


def figures(
    a: np.ndarray, b: np.ndarray, tolerance: Tolerance, *, errors_only: bool = False
) -> Figures:
    """Error figures of candidate ``a`` against reference ``b`` (same shape, same kind).

    ``errors_only`` leaves out what localisation does not read of each intermediate tensor (mean
    and p99 error, cosine, top-k): counts, ``max_abs`` and ``max_rel`` are the same either way.
    """
    if a.size == 0:
        return Figures(elements=0, mismatches=0)
    if kind(a.dtype) == "string" or kind(b.dtype) == "string":
        equal = np.asarray(a == b)
        return Figures(**_counted(int(a.size), int(a.size - equal.sum())))
    exact = kind(a.dtype) in ("int", "bool") and kind(b.dtype) in ("int", "bool")
    if exact and tolerance.atol == 0 and tolerance.rtol == 0:
        # integers beyond 2**53 are not exact in float64: compare them as integers
        return _exact_figures(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    all_finite = bool(np.isfinite(a64).all() and np.isfinite(b64).all())
    if all_finite:  # the usual case, without the masks and copies below (same figures)
        finite = None
        d = np.abs(a64 - b64)
        fa, fb = a64.ravel(), b64.ravel()
        mismatches = int(np.count_nonzero(d > tolerance.atol + tolerance.rtol * np.abs(b64)))
        result = Figures(**_counted(int(a.size), mismatches))
        d = d.ravel()
    else:
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        inf_a, inf_b = np.isinf(a64), np.isinf(b64)
        finite = ~(nan_a | nan_b | inf_a | inf_b)
        special_match = (nan_a & nan_b) | (inf_a & inf_b & (a64 == b64))
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where not finite: masked
            diff = np.where(finite, np.abs(a64 - b64), 0.0)
        allowed = tolerance.atol + tolerance.rtol * np.abs(np.where(finite, b64, 0.0))
        matches = np.where(finite, diff <= allowed, special_match)
        result = Figures(
            **_counted(int(a.size), int(a.size - matches.sum())),
            nonfinite_mismatches=int((~finite & ~special_match).sum()),
            nan=(int(nan_a.sum()), int(nan_b.sum())),
            inf=(int(inf_a.sum()), int(inf_b.sum())),
        )
        if not finite.any():
            return result
        d = diff[finite]
        fa, fb = a64[finite], b64[finite]
    nonzero = np.abs(fb) > 0
    rel = d[nonzero] / np.abs(fb[nonzero]) if nonzero.any() else None
    update: dict[str, float | None] = {
        "max_abs": float(d.max()),
        "max_rel": float(rel.max()) if rel is not None else None,
    }
    if not errors_only:
        norm = float(np.linalg.norm(fa) * np.linalg.norm(fb))
        cosine = (
            float(np.dot(fa, fb) / norm)
            if norm > 0
            else (1.0 if not fa.any() and not fb.any() else 0.0)
        )
        top1 = topk = None
        if kind(a.dtype) == "float" and all_finite:
            top1, topk = _agreement(a64, b64)
        update |= {
            "mean_abs": float(d.mean()),
            "p99_abs": float(np.percentile(d, 99)),
            "cosine": min(cosine, 1.0),
            "top1": top1,
            "topk": topk,
        }
    return result.model_copy(update=update)
