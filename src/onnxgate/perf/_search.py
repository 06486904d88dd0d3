"""The session grid ``tune`` searches, and the successive halving that searches it.

Successive halving spends runs where they matter: every candidate gets a few timed runs, the
better half goes on with twice as many, and so on until one is left. Candidates run one session
at a time (two live sessions with spinning threads distort each other's figures) and the order
rotates every round, so no candidate always runs right after the same neighbour.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from onnxgate.settings import SessionSettings

Objective = Literal["latency", "throughput"]

SPINNING = "session.intra_op.allow_spinning"

GPU_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    # options that change how the provider schedules and allocates, not what it computes
    "CUDAExecutionProvider": {
        "cudnn_conv_algo_search": ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
        "arena_extend_strategy": ("kNextPowerOfTwo", "kSameAsRequested"),
    },
    "TensorrtExecutionProvider": {
        "trt_builder_optimization_level": ("3", "5"),
    },
}
"""Provider options searched when the provider is requested; the first value is the default."""


@dataclass(frozen=True)
class Candidate:
    """One point of the grid: a graph and the session settings to run it with."""

    graph: str
    """The graph candidate's label (``as given`` for the model file)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """``SessionSettings.wire()``."""
    runtime: str | None = None
    """Where it runs: None for the installed ONNX Runtime, else the build (``RuntimeSpec``
    text, ``onnxruntime-openvino==1.24.1``) that brings its provider, in its isolated
    environment."""
    gated: bool = False
    """The parity gate passed these exact settings (a provider's own candidates are gated one
    by one), so the winner needs no second check."""

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity for deduplication."""
        return self.graph, repr(sorted(self.settings.items())), self.runtime or ""


def describe(c: Candidate) -> str:
    """``graph; settings`` of a candidate, as progress lines and the report name it.

    Raises:
        ConfigError: settings this ONNX Runtime refuses (``check_session``), before any line
            names them.
    """
    from onnxgate.runners import check_session  # imports ONNX Runtime

    settings = SessionSettings.from_wire(c.settings)
    check_session(settings)
    where = f" on {c.runtime}" if c.runtime else ""
    return f"{c.graph}; {settings.describe()}{where}"


def thread_counts(usable: int) -> list[int]:
    """Intra-op thread counts to try: 1, 2, 4 ... up to the usable CPUs, and that count itself."""
    counts = []
    n = 1
    while n < usable:
        counts.append(n)
        n *= 2
    counts.append(usable)
    return counts


def session_grid(
    graphs: Sequence[tuple[str, str]],
    *,
    usable: int,
    providers: Sequence[str] = (),
    threads: Sequence[int] | None = None,
) -> list[Candidate]:
    """Every candidate: each (graph, optimisation level) that passed parity × session settings.

    Args:
        graphs: (graph label, optimisation level) pairs that passed the parity gate.
        usable: CPUs this process may use.
        providers: resolved provider names in preference order (CPU last).
        threads: intra-op thread counts to try instead of :func:`thread_counts`.

    The CPU axes are intra-op threads, sequential or parallel execution (inter-op threads 2, only
    with 2 or more CPUs), thread spinning on or off, and the memory arena with memory patterns on
    or off. A GPU provider adds its options from ``GPU_OPTIONS`` and drops the thread axis (its
    kernels do not run on the CPU pool).
    """
    gpu = [p for p in providers if p in GPU_OPTIONS]
    intra = [0] if gpu else list(threads or thread_counts(usable))
    modes = [(False, 0)] + ([(True, 2)] if usable >= 2 and not gpu else [])
    provider_variants: list[dict[str, dict[str, str]]] = [{}]
    for provider in gpu:
        axes = GPU_OPTIONS[provider]
        expanded = []
        for base in provider_variants:
            choices: list[dict[str, str]] = [{}]
            for key, values in axes.items():
                # the default value is left out, so the defaults candidate stays the defaults
                choices = [
                    c | ({} if v == values[0] else {key: v}) for c in choices for v in values
                ]
            for choice in choices:
                expanded.append(base | ({provider: choice} if choice else {}))
        provider_variants = expanded
    requested = [p for p in providers if p != "CPUExecutionProvider"]
    found: dict[tuple[str, str], Candidate] = {}
    for graph, level in graphs:
        for n in intra:
            for parallel, inter in modes:
                for spinning in (True, False):
                    for memory in (True, False):
                        for options in provider_variants:
                            settings = {
                                "providers": requested,
                                "provider_options": options,
                                "optimization": level,
                                "intra_op_threads": n,
                                "inter_op_threads": inter,
                                "parallel": parallel,
                                "cpu_mem_arena": memory,
                                "mem_pattern": memory,
                                "config": {} if spinning else {SPINNING: "0"},
                            }
                            candidate = Candidate(graph, settings)
                            found.setdefault(candidate.key, candidate)
    return list(found.values())


class Round(BaseModel):
    """One round of successive halving."""

    model_config = ConfigDict(extra="forbid")

    candidates: int
    runs: int
    """Timed runs each candidate got this round."""
    best: str
    best_score: float
    """p50 latency in ms (latency) or samples/s (throughput) of the round's best."""
    cut: bool = False
    """The deadline ended the search here: during this round, or before the next one."""


def score(latencies: Sequence[float], objective: Objective, batch: int) -> float:
    """Lower is better for latency (p50 ms); for throughput, negated samples/s at the mean."""
    if objective == "latency":
        return float(statistics.median(latencies))
    return -batch * 1000.0 / statistics.fmean(latencies)


def _planned_runs(candidates: int, runs: int, eta: int, max_runs: int | None) -> int:
    """Timed runs the whole search makes when no deadline cuts it."""
    total = 0
    while candidates > 1:
        total += candidates * runs
        candidates = max(1, math.ceil(candidates / eta))
        runs = min(runs * eta, max_runs or runs * eta)
    return total


def _time_left(elapsed: float, done: int, planned: int) -> str:
    """`` (search: about 2 min left)``, from the pace so far; empty before any run.

    The whole search's estimate: a deadline may end it sooner.
    """
    if done == 0 or planned <= done:
        return ""
    left = elapsed * (planned - done) / done
    text = f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min"
    return f" (search: about {text} left)"


class _Pace:
    """Whether the next measurement ends before the deadline, at the pace of those so far.

    A measurement is a session to create (and its warm-up), then its timed runs: the first part
    is the average of what the measurements took beyond their runs, the second the average run.
    """

    def __init__(
        self, deadline: float | Callable[[], float] | None, clock: Callable[[], float]
    ) -> None:
        self.deadline = deadline
        self.clock = clock
        self.setup: list[float] = []
        """Seconds each measurement took beyond its timed runs."""
        self.runs: list[float] = []
        """Seconds of one timed run, per measurement."""

    def took(self, seconds: float, latencies: Sequence[float]) -> None:
        run_s = sum(latencies) / 1000
        self.setup.append(max(seconds - run_s, 0.0))
        self.runs.append(run_s / max(len(latencies), 1))

    def fits(self, runs: int) -> bool:
        """No deadline, or a measurement of ``runs`` runs started now ends by it."""
        if self.deadline is None:
            return True
        end = self.deadline() if callable(self.deadline) else self.deadline
        expected = 0.0
        if self.setup:
            expected = statistics.fmean(self.setup) + runs * statistics.fmean(self.runs)
        return self.clock() + expected <= end


def successive_halving(
    candidates: Sequence[Candidate],
    measure: Callable[[Candidate, int], Sequence[float]],
    *,
    objective: Objective,
    batch: int = 1,
    first_runs: int = 5,
    eta: int = 2,
    max_runs: int | None = None,
    describe: Callable[[Candidate], str] = lambda c: c.graph,
    progress: Callable[[str], None] | None = None,
    deadline: float | Callable[[], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Candidate, list[Round]]:
    """The best candidate, and what each round measured.

    Args:
        candidates: the grid.
        measure: ``measure(candidate, runs)`` gives ``runs`` latencies in ms (one session, its
            warm-up not counted).
        objective: what is compared (see :func:`score`).
        batch: the batch size, for throughput.
        first_runs: timed runs per candidate in the first round; ``eta`` times more each round.
        eta: keep the best ``1/eta`` of the candidates each round.
        max_runs: at most this many timed runs per candidate in a round.
        describe: a label for a candidate, for progress and rounds.
        progress: called with a short message per measurement.
        deadline: a ``clock()`` reading (or a function giving it, read again before each
            measurement) by which the search ends: no measurement starts that would end past
            it at the pace of those so far (a session to create, then its runs); the round in
            progress ranks the candidates it measured (the first of the grid, the defaults,
            always is), and the search ends with its best.
        clock: seconds; ``time.monotonic`` unless the caller keeps its own time.
    """
    if not candidates:
        raise ValueError("successive halving needs at least one candidate")
    alive = list(candidates)
    runs = max(1, min(first_runs, max_runs or first_runs))
    rounds: list[Round] = []
    number = 0
    planned = _planned_runs(len(alive), runs, eta, max_runs)
    done = 0
    start = clock()
    pace = _Pace(deadline, clock)
    while len(alive) > 1:
        if rounds and not pace.fits(runs):
            rounds[-1].cut = True
            break  # the last full round's best stands
        shift = number % len(alive)
        order = alive[shift:] + alive[:shift]
        scores: dict[tuple[str, str], float] = {}
        for index, candidate in enumerate(order, 1):
            if scores and not pace.fits(runs):
                break
            if progress:
                left = _time_left(clock() - start, done, planned)
                progress(
                    f"round {number + 1}: {index}/{len(order)} × {runs} runs: "
                    f"{describe(candidate)}{left}"
                )
            began = clock()
            latencies = measure(candidate, runs)
            pace.took(clock() - began, latencies)
            scores[candidate.key] = score(latencies, objective, batch)
            done += runs
        out_of_time = len(scores) < len(order)
        # ties keep the grid's order, so the defaults (first) win a tie
        alive = sorted((c for c in alive if c.key in scores), key=lambda c: scores[c.key])
        best = alive[0]
        shown = scores[best.key] if objective == "latency" else -scores[best.key]
        rounds.append(
            Round(
                candidates=len(scores),
                runs=runs,
                best=describe(best),
                best_score=shown,
                cut=out_of_time,
            )
        )
        if out_of_time:
            return best, rounds
        alive = alive[: max(1, math.ceil(len(alive) / eta))]
        runs = min(runs * eta, max_runs or runs * eta)
        number += 1
    return alive[0], rounds
