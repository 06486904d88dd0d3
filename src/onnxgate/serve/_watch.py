"""What live traffic looks like next to what the contract proved: drift, without slowing a request.

The golden samples prove a version on a few inputs; live traffic is where a shifted sentence
distribution, a camera with other brightness or a changed preprocessing meets it. For every
served version this module keeps, per input and per output tensor, a histogram of its values on
bins fixed once from the golden values, and compares it with the goldens' histogram and (once a
window of traffic is complete) with the first window of traffic, the reference.

Why fixed bins: histograms on the same edges add up (a window is a sum of requests, the
reference is the first window) and compare bin by bin, with no sample kept; quantiles are read
off them by interpolation inside a bin. The edges are the golden values' quantiles (equal mass
under the goldens; of equal width when the goldens are few), plus one bin below and one above
the span the goldens covered: an input's
values outside what the contract proved are counted by those two bins, at no extra cost.

Why the population stability index (PSI, ``sum((p - q) * ln(p / q))`` over the bins, with half a
count added to every bin so an empty one stays finite): it is the measure credit-risk and ML
monitoring teams read, with the conventional reading "below 0.1 no shift, 0.1 to 0.25 a
moderate shift, above 0.25 a significant one"; it is symmetric, and it weighs a bin that empties
or fills as much as one that moves. Its noise on two samples from the SAME distribution is about
``(bins - 1) * (1/n + 1/m)`` for ``n`` and ``m`` independent values; values inside one request
(pixels of one image, tokens of one sentence) are not independent, so the noise is larger:
``WatchSettings.threshold`` defaults to 0.25, and the golden comparison alerts only with enough
golden rows (``min_golden_rows``) and 25 golden values per bin; with fewer the bins are of equal
width over the golden span and the golden score is exported but not alerted on (the reference
window, of ``window_rows`` rows, is what alerts then).

The request path only calls :meth:`Watch.offer`: a sampling decision and ``OffPath.offer``
(O(1), never blocks, sheds when full, counted). Histograms are filled in a low-priority worker.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from onnxgate.serve._offpath import OffPath
from onnxgate.settings import Part

if TYPE_CHECKING:
    from onnxgate.serve._metrics import WatchMetrics
    from onnxgate.serve._predictor import Predictor

log = logging.getLogger(__name__)

Kind = Literal["input", "output", "class"]
QUANTILES = (0.05, 0.5, 0.95)
"""The quantiles exported per tensor (``onnxgate_drift_quantile``)."""


class WatchSettings(Part):
    """How served traffic is watched for drift and provider fallback (``ServeConfig.watch``)."""

    drift: bool = True
    """Summarise traffic per version and compare it with the goldens and a reference window."""
    fraction: float = Field(1.0, gt=0, le=1)
    """The share of requests summarised (every k-th, deterministic)."""
    max_queue: int = Field(64, ge=1)
    """Requests waiting to be summarised at most; beyond, they are shed (counted)."""
    max_queue_mb: float = Field(64.0, gt=0)
    """Megabytes of request and answer arrays held for the worker at most (they are referenced,
    not copied, so a queue of large requests keeps them alive); beyond, shed (counted)."""
    bins: int = Field(20, ge=2, le=200)
    """Bins inside the golden span: the goldens' quantiles when they have 25 values per bin,
    else of equal width (the golden comparison is then not alerted on)."""
    max_values: int = Field(4096, ge=16)
    """Values of one tensor of one request summarised at most (an even stride beyond)."""
    window_rows: int = Field(1000, ge=10)
    """Rows per window: the first complete window is the reference, each later one is scored."""
    threshold: float = Field(0.25, gt=0)
    """The PSI above which a tensor's drift alert is raised (0.25: "significant")."""
    min_golden_rows: int = Field(50, ge=1)
    """Golden rows needed before the golden comparison may raise the alert (fewer: scored only)."""
    max_classes: int = Field(64, ge=2)
    """Classes at most in a classifier output's histogram (``[rows, classes]`` scores)."""
    placement_seconds: float = Field(600.0, ge=0)
    """How often each served version's placement is re-checked with a fresh session; 0 never."""
    on_fallback: Literal["alert", "unready"] = "alert"
    """What a fallback does: raise ``onnxgate_provider_fallback`` only, or also turn the version
    not ready (a balancer then sends its traffic to other replicas)."""


def psi(observed: np.ndarray, expected: np.ndarray) -> float:
    """The population stability index of two histograms on the same bins (half a count added)."""
    p = (observed + 0.5) / (observed.sum() + 0.5 * observed.size)
    q = (expected + 0.5) / (expected.sum() + 0.5 * expected.size)
    return float(np.sum((p - q) * np.log(p / q)))


PER_BIN = 25
"""Golden values per bin that make the golden histogram worth alerting on (PSI noise ~1/25)."""


def golden_edges(values: np.ndarray, bins: int) -> tuple[np.ndarray, bool]:
    """Edges over the golden span, and whether they are the goldens' quantiles.

    With ``PER_BIN`` golden values for each of ``bins`` bins, the edges are the golden values'
    quantiles (equal mass under the goldens: the golden comparison is as sure as it can be);
    with fewer, ``bins`` bins of equal width over the span (fine enough to see traffic move
    against the reference window; the golden comparison is then scored, not alerted on). A
    value ``v`` falls in bin ``searchsorted(edges, v, "right")``: 0 below the span,
    ``len(edges)`` above it.
    """
    lo, hi = float(values.min()), float(values.max())
    quantiled = values.size >= PER_BIN * bins
    if quantiled:
        between = np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1])
    else:
        between = np.linspace(lo, hi, bins + 1)[1:-1]
    top = np.nextafter(hi, math.inf)
    return np.unique(np.concatenate([[lo], between, [top]]).astype(np.float64)), quantiled


def _sampled(flat: np.ndarray, most: int) -> np.ndarray:
    return flat if flat.size <= most else flat[:: -(-flat.size // most)]


@dataclass
class Histogram:
    """One tensor's values on fixed bins: the goldens', the reference window's, the windows'."""

    kind: Kind
    tensor: str
    edges: np.ndarray | None
    """Value edges; None for a class histogram (a bin per class)."""
    golden: np.ndarray
    trusted: bool
    """Whether the golden comparison may raise the alert (enough golden rows and values)."""
    window: np.ndarray = field(init=False)
    reference: np.ndarray | None = None
    last: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.window = np.zeros_like(self.golden)

    def bin(self, values: np.ndarray) -> np.ndarray:
        """Counts per bin of finite ``values``."""
        if self.edges is None:
            return np.bincount(values, minlength=self.golden.size)[: self.golden.size]
        where = np.searchsorted(self.edges, values, side="right")
        return np.bincount(where, minlength=self.golden.size)

    def close_window(self) -> dict[str, float]:
        """End the window: the first becomes the reference; scores against goldens and it."""
        done, self.window = self.window, np.zeros_like(self.golden)
        self.last = done
        scores = {"golden": psi(done, self.golden)}
        if self.reference is None:
            self.reference = done
        else:
            scores["reference"] = psi(done, self.reference)
        return scores

    def quantiles(self) -> list[float]:
        """``QUANTILES`` of the last window, interpolated inside its bins (value histograms)."""
        assert self.edges is not None and self.last is not None
        counts = self.last.astype(np.float64)
        # the bins below and above the span are read as its ends: they have no width
        bounds = np.concatenate([[self.edges[0]], self.edges, [self.edges[-1]]])
        cumulative = np.concatenate([[0.0], np.cumsum(counts)]) / max(counts.sum(), 1.0)
        found = []
        for q in QUANTILES:
            i = int(np.searchsorted(cumulative, q, side="left")) - 1
            i = min(max(i, 0), counts.size - 1)
            inside = (q - cumulative[i]) / max(cumulative[i + 1] - cumulative[i], 1e-12)
            found.append(
                float(bounds[i] + min(max(inside, 0.0), 1.0) * (bounds[i + 1] - bounds[i]))
            )
        return found


SCORE_NAMES = ("logit", "prob", "score")
"""Output names that say "class scores" (``logits``, ``probabilities``, ``output_probability``)."""


def rule_metrics(contract: Any) -> dict[str, str | None]:
    """Each output's rule metric in ``contract`` (``cosine``, ``top1``…; None for allclose)."""
    golden = contract.golden
    return {r.output: r.metric for r in (golden.rules if golden else [])}


def classes_of(name: str, values: list[np.ndarray], metric: str | None, most: int) -> int | None:
    """How many classes an output of ``[rows, classes]`` scores has (None: not a classifier's).

    A 2-D float output of at most ``most`` fixed columns is a classifier's when its contract
    rule judges top classes (``top1>=…``), its name says scores, or every golden row is a
    probability distribution (non-negative, summing to 1).
    """
    first = values[0]
    if (
        first.ndim != 2
        or first.dtype.kind != "f"
        or any(v.shape[1:] != first.shape[1:] for v in values)
    ):
        return None
    k = int(first.shape[1])
    if not 2 <= k <= most:
        return None
    rows = np.concatenate(values)
    distributions = bool(np.all(rows >= 0) and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))
    named = any(word in name.lower() for word in SCORE_NAMES)
    ranked = metric is not None and "top" in metric
    return k if distributions or named or ranked else None


class VersionWatch:
    """The histograms of one served version, filled by the watch's worker only."""

    def __init__(
        self, predictor: Predictor, settings: WatchSettings, metrics: WatchMetrics
    ) -> None:
        from onnxgate.contract import read_golden

        self.name, self.version = predictor.name, predictor.version
        self.settings = settings
        self.metrics = metrics
        self.batched = predictor.batch_dim is not None
        self.rows = 0
        pairs = read_golden(predictor.contract, predictor.source.model)
        self.metrics_of = rule_metrics(predictor.contract)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.histograms: dict[tuple[Kind, str], Histogram] = {}
        for kind, arrays in (
            ("input", [sample.feeds for sample, _ in pairs]),
            ("output", [outputs for _, outputs in pairs]),
        ):
            for tensor in sorted({n for each in arrays for n in each}):
                values = [np.asarray(each[tensor]) for each in arrays if tensor in each]
                self._add(kind, tensor, values)

    def _add(self, kind: Kind, tensor: str, values: list[np.ndarray]) -> None:
        if not values or any(v.dtype.kind not in "biuf" for v in values):
            return  # strings, maps: no value histogram
        rows = sum(int(v.shape[0]) if self.batched and v.ndim else 1 for v in values)
        flat = np.concatenate([v.ravel() for v in values]).astype(np.float64)
        flat = flat[np.isfinite(flat)]
        enough = rows >= self.settings.min_golden_rows
        if flat.size:
            edges, quantiled = golden_edges(flat, self.settings.bins)
            golden = np.bincount(
                np.searchsorted(edges, flat, side="right"), minlength=edges.size + 1
            )
            trusted = quantiled and enough
            self.histograms[(kind, tensor)] = Histogram(kind, tensor, edges, golden, trusted)
        metric = self.metrics_of.get(tensor)
        k = classes_of(tensor, values, metric, self.settings.max_classes) if self.batched else None
        if kind == "output" and k is not None:
            top = np.concatenate([np.argmax(v, axis=1) for v in values])
            golden = np.bincount(top, minlength=k)
            self.histograms[("class", tensor)] = Histogram("class", tensor, None, golden, enough)

    def _series(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(model, version, *labels)``, looked up once (the worker's main cost)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(self.name, self.version, *labels)
        return found

    def observe(self, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Add one request's feeds and outputs; close the window when it is full."""
        first = next(iter(feeds.values()), None)
        rows = int(first.shape[0]) if self.batched and first is not None and first.ndim else 1
        m = self.metrics
        for (kind, tensor), hist in self.histograms.items():
            value = (feeds if kind == "input" else outputs).get(tensor)
            if value is None:
                continue  # an output the request did not ask for
            value = np.asarray(value)
            if kind == "class":
                if value.ndim == 2 and value.shape[1] == hist.golden.size:
                    top = np.argmax(value, axis=1)
                    hist.window += hist.bin(top)
                    for c, n in enumerate(np.bincount(top, minlength=hist.golden.size)):
                        if n:
                            self._series(m.classes, tensor, str(c)).inc(int(n))
                continue
            flat = _sampled(value.ravel(), self.settings.max_values).astype(np.float64)
            finite = np.isfinite(flat)
            if not finite.all():
                nan = int(np.isnan(flat).sum())
                inf = int(flat.size - finite.sum()) - nan
                if kind == "output":
                    if nan:
                        self._series(m.nonfinite, tensor, "nan").inc(nan)
                    if inf:
                        self._series(m.nonfinite, tensor, "inf").inc(inf)
                flat = flat[finite]
            counts = hist.bin(flat)
            hist.window += counts
            self._series(m.values, kind, tensor).inc(int(flat.size))
            if kind == "input" and (counts[0] or counts[-1]):
                if counts[0]:
                    self._series(m.outside, tensor, "below").inc(int(counts[0]))
                if counts[-1]:
                    self._series(m.outside, tensor, "above").inc(int(counts[-1]))
        self.rows += rows
        self._series(m.rows).inc(rows)
        if self.rows >= self.settings.window_rows:
            self.rows = 0
            self._close()

    def _close(self) -> None:
        m = self.metrics
        for (kind, tensor), hist in self.histograms.items():
            scores = hist.close_window()
            labels = (self.name, self.version, kind, tensor)
            for against, score in scores.items():
                m.score.labels(*labels, against).set(score)
            trusted = {"reference", "golden"} if hist.trusted else {"reference"}
            alert = any(s > self.settings.threshold for a, s in scores.items() if a in trusted)
            m.alert.labels(*labels).set(int(alert))
            if alert:
                log.warning(
                    "%s@%s: %s %r drifted: PSI %s (threshold %g)",
                    self.name,
                    self.version,
                    kind,
                    tensor,
                    ", ".join(f"{a} {s:.3f}" for a, s in scores.items()),
                    self.settings.threshold,
                )
            if hist.edges is not None:
                for q, value in zip(QUANTILES, hist.quantiles(), strict=True):
                    m.quantile.labels(*labels, f"{q:g}").set(value)
        m.windows.labels(self.name, self.version).inc()


@dataclass
class _Item:
    predictor: Predictor
    feeds: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    size: int


class Watch:
    """Drift summaries of every served version, fed off the request path.

    ``offer`` is the request path's one call; the rest runs in one low-priority worker (one, so
    a version's histograms are never filled by two threads at once).
    """

    def __init__(self, settings: WatchSettings, metrics: WatchMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._versions: dict[tuple[str, str], VersionWatch | None] = {}
        self._credit = 0.0
        self._lock = threading.Lock()
        self._held = 0
        """Bytes of the arrays queued or in hand."""
        self._most = int(settings.max_queue_mb * (1 << 20))
        self._offpath: OffPath[_Item] | None = (
            OffPath(self._handle, max_queue=settings.max_queue, label="onnxgate-watch")
            if settings.drift
            else None
        )

    def offer(
        self,
        predictor: Predictor,
        feeds: Mapping[str, np.ndarray],
        outputs: Mapping[str, np.ndarray],
    ) -> None:
        """Summarise this request later (sampled, shed when the worker is behind); O(1).

        The arrays are referenced, not copied: nothing changes them after the answer.
        """
        if self._offpath is None:
            return
        self._credit += self.settings.fraction
        if self._credit < 1.0:
            return
        self._credit -= 1.0
        size = sum(a.nbytes for a in feeds.values()) + sum(a.nbytes for a in outputs.values())
        with self._lock:
            fits = self._held + size <= self._most
            self._held += size if fits else 0
        if not fits or not self._offpath.offer(_Item(predictor, feeds, outputs, size)):
            if fits:
                self._release(size)
            self.metrics.shed.labels(predictor.name, predictor.version).inc()

    def _release(self, size: int) -> None:
        with self._lock:
            self._held -= size

    @property
    def held_bytes(self) -> int:
        """Bytes of request and answer arrays waiting for, or in the hands of, the worker."""
        return self._held

    def _handle(self, item: _Item) -> None:
        try:
            self._summarise(item)
        finally:
            self._release(item.size)

    def _summarise(self, item: _Item) -> None:
        if not item.predictor.ready:
            return  # retired (closed) since: its series are gone and must not come back
        key = (item.predictor.name, item.predictor.version)
        with self._lock:
            known = key in self._versions
            watch = self._versions.get(key)
        if not known:
            try:
                watch = VersionWatch(item.predictor, self.settings, self.metrics)
            finally:  # a version whose goldens cannot be read is not retried on every request
                with self._lock:
                    self._versions[key] = watch
        if watch is not None:
            watch.observe(item.feeds, item.outputs)

    def forget(self, name: str, version: str) -> None:
        """Drop a retired version's summaries and series (the label sets stay bounded)."""
        with self._lock:
            self._versions.pop((name, version), None)
        self.metrics.forget(name, version)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every offered request is summarised (tests, and a stop)."""
        return self._offpath is None or self._offpath.wait_idle(timeout)

    def close(self) -> None:
        """Stop the worker (what is queued is dropped)."""
        if self._offpath is not None:
            self._offpath.close()
