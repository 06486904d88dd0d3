"""Shadow serving: a candidate run beside the champion on live traffic, judged, never in the way.

The champion answers every request exactly as without a shadow. After its answer is computed,
``Hub.infer`` offers the request (the validated feeds, the champion's outputs, its time) to each
candidate of that name; the offer is O(1) and never blocks or raises: a sampling draw and
``OffPath.offer``.

The candidate runs only while the server is idle, and gets out of the way when it is not: its
worker (a thread at lower priority, ``OffPath``) waits until fewer than ``busy_at`` requests (1 by
default: none) are in flight in this server (``Foreground``: the front ends count a request from
its body's first byte to its reply) before it starts a run, and a request that arrives while the
candidate runs cancels that run at once (ONNX Runtime's ``RunOptions.terminate``, checked between
nodes). Judging waits for a quiet moment too, output by output. So the champion waits for one
candidate node, or one output's judging, at most; under load shadowing stops first.

A cancelled request goes back to the end of the candidate's queue and is run again, from the
start, in a later quiet moment: a long input never holds up the short ones behind it. A request
is *shed* (counted, not judged) when ``max_queue`` requests wait for the candidate already, as it
is offered or as it is put back (``queue_full``: the server's idle time is too short for the
sampled traffic). Long inputs are cancelled more often, so under a full queue they are shed more
often; the verdict's minimum per shape bucket is what keeps that from passing unseen.

A request not drawn by ``fraction`` is *sampled out*, which is not shedding.

The candidate's session has ``threads`` intra-op threads (1 by default) and no spinning: a
spinning ORT thread pool burns a core waiting for work. Each output is
judged by ``compare``'s judge with the CANDIDATE contract's rules (what its proof admitted), into
a ``ShadowPair``; pairs go to a bounded in-memory ``ShadowRecord`` (``GET
/v2/models/{name}/shadow``), to Prometheus, and, when both versions come from the registry, to the
registry through a ``ShadowSink`` written from its own background thread in batches.

A candidate is opened and proven like any served version; one that is not ready never shadows,
and the reason is logged and shown in its record. An alias (``NAME@candidate``) is followed with
the hub's polling, like ``@champion``; when it moves, the new version is proven, the shadow
switches to it and a new shadow run starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from onnxgate.compare import judge_output
from onnxgate.errors import ConfigError, GateError
from onnxgate.serve._offpath import Foreground, OffPath
from onnxgate.serve._predictor import Predictor, PredictorConfig, RunCancelled
from onnxgate.serve._shadow_sink import (
    Persister,
    RegistrySink,
    ShadowSink,
    SinkUnsupported,
)
from onnxgate.serve._source import is_file_ref, registry_ref, served_name, split_name
from onnxgate.serve._watch import classes_of, rule_metrics
from onnxgate.settings import Part
from onnxgate.shadow import Buckets, OutputFigures, ShadowPair

if TYPE_CHECKING:
    from onnxgate.serve._metrics import ShadowMetrics

Hub = Any
"""``serve._hub.Hub`` (which imports this module): its config, entries, metrics, executor and
``next_version``."""
Served = Any
"""``serve._hub.Served``: a served version's ``version`` and ``batcher``."""

log = logging.getLogger(__name__)

__all__ = [
    "Persister",
    "RegistrySink",
    "Shadow",
    "ShadowRecord",
    "ShadowSettings",
    "ShadowSink",
    "Shadows",
    "SinkUnsupported",
]

NO_SPIN = {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
"""Session config of a candidate's session: its idle threads sleep instead of spinning."""
MAX_CLASSES = 1 << 20
"""Columns at most of an output judged on top-1 agreement (any real classifier's count)."""
WORST_KEPT = 10
"""Worst pairs the in-memory record keeps besides the newest."""


class ShadowSettings(Part):
    """Candidates shadowing served models, and how much of the traffic they see."""

    candidates: tuple[str, ...] = ()
    """What shadows which served name: ``NAME@ALIAS``, ``NAME@N`` (a registry version of a served
    name) or ``NAME=REF`` (a file shadowing the model served as NAME). Several per name allowed."""
    fraction: float = Field(1.0, ge=0.0, le=1.0)
    """Share of the champion's answered requests offered to each candidate."""
    max_queue: int = Field(32, ge=1)
    """Requests waiting for a candidate at most; beyond, shed (``queue_full``)."""
    busy_at: int = Field(1, ge=1)
    """Requests in flight in this server at which a candidate yields: it does not start a run,
    and a run under way is cancelled and tried again later. 1: it runs only while the server
    answers nothing."""
    threads: int = Field(1, ge=1)
    """Intra-op threads of a candidate's session (it never spins)."""
    keep_inputs: bool = False
    """Keep each shadowed request's feeds (an .npz in the pair); otherwise only their sha256."""
    keep_pairs: int = Field(100, ge=0)
    """Newest pairs the in-memory record keeps per candidate (GET /v2/models/NAME/shadow)."""
    persist: bool = True
    """Write pairs to the registry when champion and candidate both come from it."""
    persist_batch: int = Field(64, ge=1)
    """Pairs per registry write."""
    persist_buffer: int = Field(10_000, ge=1)
    """Pairs waiting for the registry at most (while it is unreachable); beyond, dropped and
    counted."""


# -- the record ----------------------------------------------------------------------------------


@dataclass
class _Tally:
    rule: str
    pairs: int = 0
    failed: int = 0
    max_abs: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    first_failure: str | None = None

    def add(self, figures: OutputFigures) -> None:
        self.pairs += 1
        self.rule = figures.rule
        if not figures.passed:
            self.failed += 1
            self.first_failure = self.first_failure or figures.reason
        self.max_abs = _worst(self.max_abs, figures.max_abs, max)
        self.min_cosine = _worst(self.min_cosine, figures.cosine, min)
        self.min_top1 = _worst(self.min_top1, figures.top1, min)


def _worst(old: float | None, new: float | None, pick: Any) -> float | None:
    if new is None or not np.isfinite(new):
        return old
    return new if old is None else pick(old, new)


class ShadowRecord:
    """What one candidate's shadow saw, bounded: the newest pairs, the worst, and tallies of all."""

    def __init__(self, keep: int) -> None:
        self._lock = threading.Lock()
        self.newest: deque[ShadowPair] = deque(maxlen=keep)
        self.worst: list[ShadowPair] = []
        self.tallies: dict[str, _Tally] = {}
        self.buckets: Counter[str] = Counter()
        self.pairs = self.passed = self.errors = 0
        self.last_error: str | None = None

    def add(self, pair: ShadowPair) -> None:
        """Count a judged pair (called by the worker thread)."""
        with self._lock:
            self.pairs += 1
            self.passed += pair.passed
            self.buckets[pair.bucket] += 1
            for figures in pair.outputs:
                self.tallies.setdefault(figures.name, _Tally(figures.rule)).add(figures)
            self.newest.append(pair)
            self.worst = sorted([*self.worst, pair], key=_badness)[:WORST_KEPT]

    def error(self, message: str) -> None:
        """Count a candidate run that failed (no pair)."""
        with self._lock:
            self.errors += 1
            self.last_error = message

    def summary(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        with self._lock:
            return {
                "pairs": self.pairs,
                "passed": self.passed,
                "failed": self.pairs - self.passed,
                "errors": self.errors,
                "last_error": self.last_error,
                "buckets": dict(sorted(self.buckets.items())),
                "outputs": {
                    name: {
                        "rule": t.rule,
                        "pairs": t.pairs,
                        "failed": t.failed,
                        "pass_rate": (t.pairs - t.failed) / t.pairs if t.pairs else None,
                        "max_abs": t.max_abs,
                        "min_cosine": t.min_cosine,
                        "min_top1": t.min_top1,
                        "first_failure": t.first_failure,
                    }
                    for name, t in sorted(self.tallies.items())
                },
                "worst": [_pair_json(p) for p in self.worst],
                "newest": [_pair_json(p) for p in self.newest],
            }


def _badness(pair: ShadowPair) -> tuple[bool, int, float]:
    """Failing pairs first, then more failed outputs, then the largest max abs."""
    worst_abs = max((o.max_abs or 0.0 for o in pair.outputs), default=0.0)
    return (pair.passed, -len(pair.failed_outputs), -worst_abs)


def _pair_json(pair: ShadowPair) -> dict[str, Any]:
    data = pair.model_dump(mode="json", exclude={"inputs"})
    data["inputs_kept"] = pair.inputs is not None
    return data


# -- one candidate -------------------------------------------------------------------------------


@dataclass
class _Job:
    feeds: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    at: float
    champion_ms: float
    champion: str
    generation: int


@dataclass
class Shadow:
    """One candidate shadowing one served name (its own queue, worker, record and run)."""

    name: str
    """The served name whose champion it shadows."""
    item: str
    settings: ShadowSettings
    metrics: ShadowMetrics
    follow: str | None = None
    """The registry reference followed (``name@candidate``), like a champion's alias."""
    current: str = ""
    """The candidate version shadowing now."""
    refused: set[int] = field(default_factory=set)
    predictor: Predictor | None = None
    why: str = "not opened yet"
    """Why the candidate does not shadow (empty while it does)."""
    persister: Persister | None = None
    champion_source: Any = None
    generation: int = 0
    foreground: Foreground = field(default_factory=Foreground)
    """The server's requests in flight, to which the candidate yields."""

    def __post_init__(self) -> None:
        self.record = ShadowRecord(self.settings.keep_pairs)
        self.queue: OffPath[_Job] = OffPath(
            self._handle, max_queue=self.settings.max_queue, label=f"shadow {self.item}"
        )
        self._buckets: Buckets | None = None
        self._run_champion: str | None = None
        self._tolerances: Any = None
        self._ranked: frozenset[str] = frozenset()
        """Outputs whose top-1 agreement means something (class scores)."""
        self.shed: Counter[str] = Counter()
        """Requests drawn but not shadowed, by reason (the offer's and the worker's)."""
        self._lock = threading.Lock()
        self._running: tuple[Predictor, Any] | None = None
        """The candidate version the worker runs now, and that run's options (to cancel it)."""
        self.cancelled = 0
        """Candidate runs cancelled for the champion (each is tried again)."""
        self._closing = False
        self.sampled_out = 0
        self.label = ""
        """The ``candidate`` label of its metrics: the registry version, or the file."""
        self._counters: tuple[Any, Any] = ()  # type: ignore[assignment]

    @property
    def active(self) -> bool:
        """Proven and shadowing."""
        return self.predictor is not None and self.predictor.ready

    def use(self, predictor: Predictor) -> Predictor | None:
        """Shadow with ``predictor`` from now on (when it is ready); the one it replaces."""
        old = self.predictor
        self.predictor = predictor
        self.current = predictor.version
        self.label = predictor.version if in_registry(self.item) else split_name(self.item)[1]
        self.generation += 1
        if (running := self._running) is not None:
            running[1].terminate = True  # the version it replaces stops within one node
        self.metrics.ready(self.name, self.label, predictor.ready)
        self._counters = self.metrics.offered(self.name, self.label)
        if predictor.ready:
            self.why = ""
            self._buckets = Buckets(predictor.contract)
            self._tolerances = predictor.tolerances
            self._ranked = ranked_outputs(predictor)
            self._run_champion = None  # a new run starts with the next pair
            self.metrics.depth(self.name, self.label, self.queue)
            log.info("%s: %s@%s shadows it (fraction %g, queue %d, %d intra-op thread(s))",
                     self.name, predictor.name, predictor.version, self.settings.fraction,
                     self.settings.max_queue, self.settings.threads)  # fmt: skip
        else:
            self.why = f"{predictor.name}@{predictor.version} is not ready: {predictor.why_not()}"
            log.error("%s: candidate %s never shadows: %s", self.name, self.item, self.why)
        return old

    def offer(
        self, served: Served, feeds: Mapping[str, np.ndarray], outputs: dict, seconds: float
    ) -> None:
        """Offer one answered request (the request path: O(1), never blocks, never raises)."""
        predictor = self.predictor
        if predictor is None or not predictor.ready:
            return
        sampled_out, _ = self._counters
        fraction = self.settings.fraction
        if fraction < 1.0 and random.random() >= fraction:
            self.sampled_out += 1
            sampled_out.inc()
            return
        job = _Job(feeds, outputs, time.time(), seconds * 1000, served.version, self.generation)
        if not self.queue.offer(job):
            self._shed_full()

    def _handle(self, job: _Job) -> None:
        predictor = self.predictor
        if predictor is None or job.generation != self.generation or not predictor.ready:
            return  # the candidate switched while this waited: judged by the old one, not kept
        version = self.label
        ran = self._run(predictor, job)
        if ran is None:
            return
        values, took = ran
        figures = []
        for name, champion in job.outputs.items():  # judging a large output takes a while too
            if not self._wait_quiet(job):
                return
            figures.append(self._judge(predictor, name, values.get(name), champion))
        assert self._buckets is not None
        pair = ShadowPair(
            at=job.at,
            bucket=self._buckets(job.feeds),
            passed=all(f.passed for f in figures),
            outputs=figures,
            input_digest=input_digest(job.feeds),
            inputs=_npz(job.feeds) if self.settings.keep_inputs else None,
            champion_ms=job.champion_ms,
            candidate_ms=took * 1000,
        )
        self.record.add(pair)
        self.metrics.judged(self.name, version, pair, took)
        if self.persister is not None:
            if job.champion != self._run_champion:  # first pair, or the champion moved
                self._run_champion = job.champion
                self.persister.start_run(
                    self.name, int(predictor.version), int(job.champion), self._run_settings()
                )
            self.persister.add(pair)

    def _gone(self, job: _Job) -> bool:
        """The shadow stops, or the candidate switched since ``job`` was offered."""
        return self._closing or self.foreground.closed or job.generation != self.generation

    def _wait_quiet(self, job: _Job) -> bool:
        """Wait for a moment the server is quiet; False when ``job`` is gone meanwhile."""
        while not self._gone(job):
            if self.foreground.wait_quiet(self.settings.busy_at):
                return True
        return False

    def _run(self, predictor: Predictor, job: _Job) -> tuple[dict, float] | None:
        """The candidate's outputs for ``job`` and its time, run in a quiet moment.

        None when it did not run to the end: cancelled by a request (put back at the end of the
        queue, so a long input never holds up the others; shed when the queue is full), failed
        (an error pair), or gone (the shadow stops or switched).
        """
        outputs = [n for n in job.outputs if n in predictor.output_names]
        while not self._gone(job):
            options = predictor.runner.run_options()
            with self.foreground.yielding(
                self.settings.busy_at, lambda o=options: setattr(o, "terminate", True)
            ) as quiet:
                if not quiet:
                    continue  # the server is busy: wait again (checking for a switch or stop)
                self._running = (predictor, options)
                start = time.perf_counter()
                try:
                    return predictor.serve(job.feeds, outputs, options), time.perf_counter() - start
                except RunCancelled:
                    if self._gone(job):
                        return None
                    self.cancelled += 1
                    self.metrics.cancelled(self.name, self.label)
                    if not self.queue.requeue(job):
                        self._shed_full()
                    return None
                except GateError as err:
                    self.record.error(err.message)
                    seconds = time.perf_counter() - start
                    self.metrics.pair(self.name, self.label, "error", seconds)
                    return None
                finally:
                    self._running = None
        return None

    def _shed_full(self) -> None:
        with self._lock:
            self.shed["queue_full"] += 1
        self._counters[1].inc()

    def release(self, old: Predictor, timeout: float) -> bool:
        """Wait (up to ``timeout`` s) until the worker no longer runs ``old``; whether it does not.

        ``use`` cancels the run of the version it replaces, so this is one node's wait.
        """
        deadline = time.monotonic() + timeout
        while (running := self._running) is not None and running[0] is old:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _judge(
        self, predictor: Predictor, name: str, candidate: Any, champion: Any
    ) -> OutputFigures:
        if candidate is None:
            return OutputFigures(
                name=name,
                passed=False,
                rule="present",
                reason=f"the candidate has no output {name!r}",
            )
        declared = None if predictor.labels.get(name) else _declared(predictor, name)
        found = judge_output(name, candidate, champion, self._tolerances, "shadow", declared)
        return OutputFigures(
            name=name,
            passed=found.passed,
            rule=found.criterion,
            reason=found.reason,
            max_abs=found.max_abs,
            cosine=found.cosine,
            top1=found.top1 if name in self._ranked else None,
            mismatch_fraction=found.mismatch_fraction,
            nonfinite=found.nonfinite_mismatches,
        )

    def _run_settings(self) -> dict[str, Any]:
        return self.settings.model_dump(
            mode="json",
            include={"fraction", "max_queue", "busy_at", "threads", "keep_inputs"},
        ) | {"item": self.item}

    def summary(self) -> dict[str, Any]:
        """This candidate's record, state and shedding, as JSON-ready data."""
        return {
            "candidate": self.item,
            "version": self.current or None,
            "follows": self.follow,
            "shadowing": self.active,
            "reason": self.why or None,
            "fraction": self.settings.fraction,
            "queue": {"pending": self.queue.pending, "max": self.settings.max_queue},
            "shed": {"queue_full": self.shed["queue_full"]},
            "cancelled": self.cancelled,
            "sampled_out": self.sampled_out,
            "persisted": None
            if self.persister is None
            else {
                "written": self.persister.written,
                "waiting": self.persister.waiting,
                "dropped": self.persister.dropped,
                "unsupported": self.persister.unsupported,
            },
        } | self.record.summary()

    def close(self) -> None:
        """Stop the worker and the writer; release the candidate's session."""
        self._closing = True
        self.queue.close()
        if self.persister is not None:
            self.persister.close()
        if self.predictor is not None:
            self.predictor.close()


def ranked_outputs(predictor: Predictor) -> frozenset[str]:
    """The outputs that are class scores, by the watch's rule (``classes_of``) on the goldens.

    compare figures a top-1 agreement for any 2-D output; for an embedding or a box list it is
    the agreement of the largest coordinate, which says nothing, and the record leaves it out.
    """
    from onnxgate.contract import read_golden

    metrics = rule_metrics(predictor.contract)
    outputs = [answers for _, answers in read_golden(predictor.contract, predictor.source.model)]
    return frozenset(
        name
        for name in predictor.output_names
        if (values := [np.asarray(o[name]) for o in outputs if name in o])
        and classes_of(name, values, metrics.get(name), MAX_CLASSES) is not None
    )


def followed_ref(item: str) -> str | None:
    """The registry reference ``item`` follows (``name@candidate``, ``name``), None if pinned."""
    if not in_registry(item):
        return None
    from onnxgate.registry import parse_ref

    ref = split_name(item)[1]
    try:
        _, which = parse_ref(registry_ref(ref))
    except ConfigError:  # malformed: opening it says so
        return None
    return None if isinstance(which, int) else ref


def in_registry(item: str) -> bool:
    """Whether ``item`` (``REF`` or ``NAME=REF``) names a version of onnxgate's registry."""
    from onnxgate.registry import is_mlflow_ref

    ref = split_name(item)[1]
    return not is_file_ref(ref) and not is_mlflow_ref(ref)


def _declared(predictor: Predictor, name: str) -> str | None:
    return next((o.type for o in predictor.outputs if o.name == name), None)


def input_digest(feeds: Mapping[str, np.ndarray]) -> str:
    """sha256 of the feeds: names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(feeds):
        array = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _npz(feeds: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, allow_pickle=False, **{k: np.asarray(v) for k, v in feeds.items()})
    return buffer.getvalue()


# -- every candidate of a server -----------------------------------------------------------------


class Shadows:
    """The hub's candidates, by served name: opened after the champions, offered each answer."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.settings = hub.config.shadow
        self.by_name: dict[str, list[Shadow]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def config(self) -> PredictorConfig:
        """How a candidate's session is made: few intra-op threads, one inter-op, no spinning.

        Tuned settings are not used (they are the champion's choice for latency on all cores).
        """
        base = self.hub.config.predictor
        session = base.session.model_copy(
            update={
                "threads": self.settings.threads,
                "inter_op_threads": 1,
                "parallel": False,
                "session_config": base.session.session_config | NO_SPIN,
            }
        )
        return base.model_copy(update={"session": session, "tuned": False})

    def open(self, item: str) -> Predictor:
        """Open and prove a candidate (in a thread: it is slow)."""
        return Predictor.open(item, self.config())

    async def load(self) -> None:
        """Open and prove every candidate; start following aliases.

        A candidate that cannot be opened or proven is kept, not shadowing, with the reason.

        Raises:
            ConfigError: a candidate names a model this server does not serve.
        """
        loop = asyncio.get_running_loop()
        metrics = self.hub.metrics.shadow
        for item in self.settings.candidates:
            name = served_name(item)
            entry = self.hub.entries.get(name)
            if entry is None:
                raise ConfigError(
                    f"--shadow {item!r} shadows {name!r}, which this server does not serve (it "
                    f"serves {', '.join(sorted(self.hub.entries)) or 'nothing'}); name a served "
                    "model: NAME@ALIAS, NAME@N, or NAME=FILE.",
                    field="shadow.candidates",
                )
            shadow = Shadow(
                name,
                item,
                self.settings,
                metrics,
                follow=followed_ref(item),
                foreground=self.hub.foreground,
            )
            self.by_name.setdefault(name, []).append(shadow)
            if self.settings.persist and in_registry(item) and in_registry(entry.item):
                shadow.persister = Persister(
                    RegistrySink(
                        self.hub.config.predictor.registry, self.hub.config.predictor.store
                    ),
                    batch=self.settings.persist_batch,
                    bound=self.settings.persist_buffer,
                    label=f"shadow {item}",
                    on_drop=lambda count, s=shadow: metrics.dropped(s.name, s.label, count),
                )
            try:
                predictor = await loop.run_in_executor(self.hub._executor, self.open, item)
            except GateError as err:
                shadow.why = f"cannot be opened: {err.message}"
                later = f" until {shadow.follow} moves" if shadow.follow else ""
                log.error("%s: candidate %s does not shadow%s: %s", name, item, later, shadow.why)
                continue
            shadow.use(predictor)
            if not predictor.ready:  # kept out of the way, with its reason; an alias may move on
                shadow.predictor = None
                shadow.refused.add(int(predictor.version))
                predictor.close()

    def followed(self) -> list[Shadow]:
        """The candidates that follow an alias."""
        return [s for shadows in self.by_name.values() for s in shadows if s.follow]

    async def check_alias(self, shadow: Shadow) -> bool:
        """Look the candidate's alias up once; switch the shadow to a new proven version.

        Returns:
            True when the shadow switched (a new shadow run starts with its next pair).
        """
        predictor = await self.hub.next_version(shadow, self.open)
        if predictor is None:
            return False
        old = shadow.use(predictor)
        log.info("%s: the shadow switched to candidate version %s", shadow.name, predictor.version)
        if old is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, shadow.release, old, self.hub.config.grace_seconds)
            old.close()
        return True

    def offer(
        self, name: str, served: Served, feeds: Mapping, outputs: dict, seconds: float
    ) -> None:
        """Offer an answered request to every candidate of ``name`` (never raises)."""
        for shadow in self.by_name.get(name, ()):
            try:
                shadow.offer(served, feeds, outputs, seconds)
            except Exception:  # a shadow must never fail the champion's answer
                log.exception("%s: offering a request to shadow %s failed", name, shadow.item)

    def summary(self, name: str) -> dict[str, Any]:
        """Every candidate of ``name``: ``{"model", "candidates": [...]}``."""
        return {"model": name, "candidates": [s.summary() for s in self.by_name.get(name, ())]}

    def close(self) -> None:
        """Stop every candidate."""
        for shadows in self.by_name.values():
            for shadow in shadows:
                shadow.close()
