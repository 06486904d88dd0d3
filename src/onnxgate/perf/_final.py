"""``tune``'s final contest on a time budget, and the sentence saying why its result stands.

The search times candidates in this process; the final contest times the defaults and the winner
again, each in a worker process of its own (``_contest``), and its judgement decides. On a busy
machine it is the phase whose wall time strays furthest from its run time: the workers start and
load the model, runs slowed by other load count toward ``contest_seconds`` only by their own
length, and a contest the machine spoiled is timed again. So the contest gets a hard end (the
time budget's), what it is expected to cost is estimated from the runs the search saw (not one
warm run on a quieter moment), and a spoiled contest is timed again only when there is room.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from onnxgate.contract import Timing
from onnxgate.perf._contention import Conditions, Watch
from onnxgate.perf._contest import PAUSE_S, SLICE_S
from onnxgate.perf._fusion import AS_GIVEN
from onnxgate.perf._search import Candidate, Objective, describe
from onnxgate.perf._stats import Judgement, judge

WORKER_START_S = 3.0
"""Seconds a contest worker takes to start (Python, onnxgate and ONNX Runtime imported) on two
busy cores, before it loads the model: part of the final contest's share of the time budget. The
least it is expected to take: a command whose own start-up was timed (``tune(started=...)``)
expects its workers to take as long as it did."""

Side = tuple[str, Path, Mapping[str, Any]]
"""One side of the final contest: its label, the ONNX file and the session settings."""


class Raced(NamedTuple):
    """One final contest: latencies in ms per side, and what the machine did meanwhile."""

    latencies: list[list[float]]
    conditions: Conditions | None = None
    cut_short: bool = False
    """The deadline ended the contest before the sides had ``contest_seconds`` of runs each:
    they stopped at ``min_runs``."""


class Racer(Protocol):
    """``race([(label, onnx file, settings), ...], feeds, deadline=...)``: the contest's answer.

    ``deadline`` is a reading of tune's clock past which each side stops as soon as it has its
    minimum runs; None for no deadline.
    """

    def __call__(
        self, sides: Sequence[Side], feeds: Mapping[str, np.ndarray], *, deadline: float | None
    ) -> Raced: ...


def contest_race(
    *,
    warmup: int,
    budget_s: float,
    min_runs: int,
    say: Callable[[str], None],
    clock: Callable[[], float],
    runtimes: Mapping[str, str] | None = None,
) -> Racer:
    """The final contest in worker processes (``_contest.Contest``), watched for other load.

    ``runtimes``: the isolated build a side runs on, by label (none: the installed runtime).
    """

    def race(
        sides: Sequence[Side], feeds: Mapping[str, np.ndarray], *, deadline: float | None
    ) -> Raced:
        from onnxgate.perf._contest import Contender, Contest

        contenders = [
            Contender(label, onnx=path, settings=s, runtime=(runtimes or {}).get(label))
            for label, path, s in sides
        ]
        with Contest(contenders) as contest:
            watch = Watch(lambda: [os.getpid(), *contest.pids])
            latencies = contest.race(
                [feeds] * len(contenders),
                warmup=warmup,
                budget_s=budget_s,
                min_runs=min_runs,
                progress=say,
                deadline=deadline,
                clock=clock,
            )
            conditions = watch.conditions(
                {label: runs for (label, _, _), runs in zip(sides, latencies, strict=True)}
            )
        return Raced(latencies, conditions, contest.cut_short)

    return race


def contest_cost(
    sides: int,
    *,
    run_s: float,
    load_s: float,
    warmup: int,
    budget_s: float,
    min_runs: int,
    least: bool = False,
    start_s: float = WORKER_START_S,
) -> float:
    """Seconds a final contest of ``sides`` is expected to take, at ``run_s`` seconds a run.

    Per side: a worker to start (``start_s``), the model to load (``load_s``, as long as it took here), the
    warm-up, then ``budget_s`` seconds of timed runs and at least ``min_runs``, a pause after
    each slice. With ``least``, what a contest past its deadline still spends: one warm-up run
    and ``min_runs``.
    """
    timed = min_runs * run_s if least else max(budget_s, min_runs * run_s)
    warm = (1 if least else warmup) * run_s
    slices = timed / max(SLICE_S, run_s, 1e-9) + 1
    return sides * (start_s + load_s + warm + timed + PAUSE_S * slices)


class RunPace:
    """Seconds a run of the final contest is expected to take, from what the search measured.

    The defaults' first measurement in the search (at least the one warm run timed before it),
    times how much slower the machine has become since: a candidate measured again in a later
    round that runs slower than it did in its first is the machine, not the candidate. Never
    less than the first pace: a machine that got quieter may get busy again.
    """

    def __init__(self, warm_s: float) -> None:
        self.warm_s = warm_s
        self.defaults_s = 0.0
        self.first: dict[object, float] = {}
        """Each candidate's seconds per run in its first measurement."""
        self.slowdown = 1.0

    def saw(self, key: object, latencies: Sequence[float], *, defaults: bool) -> None:
        """A measurement of the search: candidate ``key``'s latencies in ms."""
        if not latencies:
            return
        run_s = statistics.fmean(latencies) / 1000
        if key not in self.first:
            self.first[key] = run_s
            if defaults:
                self.defaults_s = run_s
        elif self.first[key] > 0:
            self.slowdown = run_s / self.first[key]

    @property
    def run_s(self) -> float:
        """The expected seconds of one contest run."""
        return max(self.warm_s, self.defaults_s) * max(1.0, self.slowdown)


def watched_race(
    racer: Racer,
    sides: Sequence[Side],
    feeds: Mapping[str, np.ndarray],
    say: Callable[[str], None],
    notes: list[str],
    *,
    clock: Callable[[], float],
    deadline: float | None,
    budget: str,
) -> Raced:
    """The final contest, timed once more if the machine was busy; the second answer stands.

    Both end at ``deadline`` (the time budget's end; ``budget`` names it in the notes). The
    second timing runs only when there is room before it for a contest as long as the first:
    otherwise the spoiled contest stands (and keeps the defaults).
    """
    start = clock()
    raced = racer(sides, feeds, deadline=deadline)
    _note_cut(raced, notes, budget)
    if raced.conditions is None or raced.conditions.reliable:
        return raced
    reasons = "; ".join(raced.conditions.reasons)
    if deadline is not None and clock() + (clock() - start) > deadline:
        notes.append(
            f"the final contest was spoiled ({reasons}); the time budget left no room to time "
            "it again"
        )
        return raced
    say(f"the machine was busy during the final contest ({reasons}); timing it again")
    notes.append(f"the final contest was timed twice: the first was spoiled ({reasons})")
    raced = racer(sides, feeds, deadline=deadline)
    _note_cut(raced, notes, budget)
    return raced


def _note_cut(raced: Raced, notes: list[str], budget: str) -> None:
    if raced.cut_short:
        runs = " and ".join(str(len(side)) for side in raced.latencies)
        notes.append(
            f"{budget}: the final contest reached the budget's end and stopped at the fewest "
            f"runs that give a verdict ({runs} timed runs); its interval is the wider for it"
        )


def timing(
    label: str, settings: Mapping[str, Any], graph: str, latencies: Sequence[float], batch: int
) -> Timing:
    """Figures of one side: p50, p90, mean, coefficient of variation, samples/s at the mean."""
    mean = statistics.fmean(latencies)
    return Timing(
        label=label,
        settings=dict(settings),
        graph=graph,
        runs=len(latencies),
        p50_ms=float(np.percentile(latencies, 50)),
        p90_ms=float(np.percentile(latencies, 90)),
        mean_ms=mean,
        cv=statistics.pstdev(latencies) / mean if mean > 0 else 0.0,
        throughput=batch * 1000.0 / mean if mean > 0 else 0.0,
    )


def _figure(t: Timing, objective: Objective) -> str:
    """``p50 5.02 ms`` or ``812.3 samples/s``: the figure the objective compares."""
    return f"p50 {t.p50_ms:.2f} ms" if objective == "latency" else f"{t.throughput:.1f} samples/s"


def decision(
    judged: Judgement | None,
    *,
    objective: Objective,
    min_gain: float,
    defaults: Timing,
    best: Timing,
    dropped: str | None,
) -> str:
    """Why the settings kept were kept, from the contest's judgement, in one sentence.

    ``dropped``: why the search's winner was not contested (the defaults were timed alone).
    """
    ours = _figure(defaults, objective)
    if judged is None:
        return f"defaults kept ({ours}): {dropped or 'no candidate beat them in the search'}"
    theirs = _figure(best, objective)
    low, high = judged.interval
    figures = f"x{judged.ratio:.2f}, 90% interval {low:.2f}-{high:.2f}"
    if judged.verdict == "faster":
        return f"the winner kept: {theirs} against the defaults' {ours} ({figures})"
    if judged.verdict == "inconclusive":
        return (
            f"defaults kept ({ours}): the final contest was unreliable "
            f"({'; '.join(judged.reasons)}); the winner measured {theirs}, which proves nothing"
        )
    if judged.verdict == "slower":
        return f"defaults kept ({ours}): the winner was slower in the final contest ({theirs})"
    return (
        f"defaults kept ({ours}): the winner ({theirs}) did not beat them by min_gain "
        f"{min_gain:.0%} in the final contest ({figures})"
    )


@dataclass(frozen=True)
class Outcome:
    """The final contest judged: each side's figures, and what is kept and why."""

    defaults: Timing
    best: Timing
    ratio: float
    interval: tuple[float, float]
    replaced: bool
    reliable: bool
    """False when other load spoiled the contest: the defaults are then kept."""
    kept: Candidate
    decision: str
    """Why the settings kept were kept, in one sentence."""


def judged(
    raced: Raced,
    best: Candidate,
    defaults: Candidate,
    batch: int,
    *,
    objective: Objective,
    min_gain: float,
    seed: int,
    dropped: str | None,
    notes: list[str],
) -> Outcome:
    """The contest's judgement: the winner replaces the defaults only when judged faster.

    ``best`` is ``defaults`` when the defaults were timed alone; ``dropped`` says why the
    search's winner was not contested. What a reader of the report needs to know (a spoiled
    contest, a gain inside the noise) goes into ``notes``.
    """
    latencies, best_latencies = raced.latencies[0], raced.latencies[-1]
    spoiled = tuple(raced.conditions.reasons) if raced.conditions is not None else ()
    reliable = not spoiled
    default_timing = timing("defaults", defaults.settings, AS_GIVEN, latencies, batch)
    best_timing = timing(describe(best), best.settings, best.graph, best_latencies, batch)
    contested = best.key != defaults.key
    verdict: Judgement | None = None
    if contested:
        verdict = judge(
            latencies,
            best_latencies,
            objective,
            unreliable=spoiled,
            min_gain=min_gain,
            seed=seed,
        )
        ratio, interval = verdict.ratio, verdict.interval
    else:
        ratio, interval = 1.0, (1.0, 1.0)
    replaced = verdict is not None and verdict.verdict == "faster"
    if not reliable:
        notes.append(
            "UNRELIABLE: the final contest was spoiled by a busy machine ("
            + "; ".join(spoiled)
            + "): its figures are reported, the defaults are kept; tune again on a quiet machine"
        )
    elif verdict is not None and not replaced:
        notes.append(
            f"the best candidate measured {ratio:.3f}× the defaults (90% interval "
            f"{interval[0]:.3f}–{interval[1]:.3f}); it needs an interval above 1 and a gain of "
            f"at least {min_gain:.0%} to replace them, so the defaults are kept"
        )
    sentence = decision(
        verdict,
        objective=objective,
        min_gain=min_gain,
        defaults=default_timing,
        best=best_timing,
        dropped=dropped,
    )
    return Outcome(
        defaults=default_timing,
        best=best_timing,
        ratio=ratio,
        interval=interval,
        replaced=replaced,
        reliable=reliable,
        kept=best if replaced else defaults,
        decision=sentence,
    )
