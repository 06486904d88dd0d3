"""tune's time budget on a busy machine: the final contest's hard end, and the whole run's.

A busy machine is faked, not awaited: a clock that moves only when fake work says it took time,
fake timing workers (in place of ``_contest._Process``) whose runs cost seconds on that clock,
and a fake machine watch. The real ``Contest.race`` and tune's real contest code run on top of
them, so what is tested is how they spend time; no test reads a wall clock.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from models import mlp, save
from onnxgate.contract import init_contract
from onnxgate.perf import TuneConfig, _contest, _final, _tune, tune
from onnxgate.perf._contention import judge
from onnxgate.perf._contest import Contender, Contest
from onnxgate.perf._fusion import AS_GIVEN
from onnxgate.perf._search import SPINNING


class Clock:
    """Seconds that pass only when the fakes say work took time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Machine:
    """A busy machine: what a worker's start and a run cost on the fake clock."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.start_s = 3.0
        """A worker's start and model load: Python, onnxgate and ONNX Runtime imported."""
        self.run_s = 0.5
        """One run of side "a" or the defaults in a worker; the other side runs at 0.8x."""
        self.spoiled = False
        self.warmups: list[dict] = []

    def worker(self, label: str, timeout_s: float, runtime: str | None = None) -> Worker:
        return Worker(self, label)

    def watch(self, pids) -> SimpleNamespace:
        conditions = judge(
            2,
            1.0,
            others=0.6 if self.spoiled else 0.01,
            steal=0.0,
            baseline_ms=(1.0, 1.0),
            drifts={},
        )
        return SimpleNamespace(conditions=lambda latencies: conditions)


class Worker:
    """A fake timing worker: answers as ``_worker.serve`` does, spending the machine's time."""

    def __init__(self, machine: Machine, label: str) -> None:
        self.machine = machine
        self.label = label
        self.proc = SimpleNamespace(pid=0)
        self.warm = False

    def ask(self, request, timeout_s=None):
        machine, clock = self.machine, self.machine.clock
        if request["op"] == "load":
            clock.t += machine.start_s
            return {"providers": ["CPUExecutionProvider"]}
        if request["op"] == "feeds":
            return {}
        assert request["op"] == "run"
        if not self.warm:  # the first run request is the warm-up
            machine.warmups.append(dict(request))
            self.warm = True
        run_s = machine.run_s * (1.0 if self.label in ("a", "defaults") else 0.8)
        began, ns = clock.t, []
        while True:  # at least one run, then until `count` runs or `seconds`
            clock.t += run_s
            ns.append(int(run_s * 1e9 * (1 + 0.01 * (len(ns) % 3))))
            seconds = request.get("seconds") or 0.0
            if len(ns) >= request["count"] or (seconds and clock.t - began >= seconds):
                return {"ns": ns}

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass


@pytest.fixture
def machine(monkeypatch):
    busy = Machine()
    monkeypatch.setattr(_contest, "_Process", busy.worker)
    # the pause between slices passes on the fake clock too
    pause = SimpleNamespace(sleep=lambda s: setattr(busy.clock, "t", busy.clock.t + s))
    monkeypatch.setattr(_contest, "time", pause)
    monkeypatch.setattr(_final, "Watch", busy.watch)
    return busy


@pytest.fixture
def model(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path)
    return path


def _race(model, machine: Machine, **kwargs) -> tuple[list[list[float]], Contest]:
    contenders = [Contender("a", onnx=model), Contender("b", onnx=model)]
    with Contest(contenders) as contest:
        feeds = {"x": np.ones((2, 4), np.float32)}
        latencies = contest.race([feeds, feeds], clock=machine.clock, **kwargs)
    return latencies, contest


def test_a_race_past_its_deadline_stops_each_side_at_its_minimum_runs(model, machine):
    settings = {"warmup": 4, "budget_s": 30.0, "min_runs": 8}
    # without a deadline: 30 s of runs per side, whatever the wall time
    latencies, contest = _race(model, machine, **settings)
    assert all(sum(side) / 1000 >= 30.0 for side in latencies)
    assert machine.clock.t > 60.0 and not contest.cut_short

    machine.clock.t = 0.0
    latencies, contest = _race(model, machine, deadline=20.0, **settings)
    assert all(len(side) >= 8 for side in latencies)
    # the slice running when the deadline came finishes: one run of each side at most
    assert 20.0 <= machine.clock.t <= 20.0 + 2 * machine.run_s + 2 * _contest.PAUSE_S
    assert contest.cut_short


def test_a_race_given_no_time_still_gives_each_side_its_minimum(model, machine):
    machine.clock.t = 50.0
    latencies, contest = _race(model, machine, warmup=10, budget_s=3.0, min_runs=5, deadline=1.0)
    assert [len(side) for side in latencies] == [5, 5]
    # the warm-ups were one run each, not ten
    assert [w["seconds"] for w in machine.warmups[-2:]] == [1e-9, 1e-9]
    assert contest.cut_short


def test_a_race_that_ends_before_its_deadline_is_not_cut(model, machine):
    latencies, contest = _race(model, machine, warmup=2, budget_s=3.0, min_runs=5, deadline=1e6)
    assert all(sum(side) / 1000 >= 3.0 for side in latencies)
    assert not contest.cut_short
    # a warm-up with time to spare still stops at the side's timed seconds
    assert all(w["seconds"] == 3.0 for w in machine.warmups)


def test_a_race_shrinks_below_min_runs_when_the_warm_ups_pace_says_they_would_not_fit(
    model, machine
):
    machine.clock.t = 0.0
    # after the loads (6 s): warm-ups of ten runs (5 s and 4 s), then 15 s left at 1 s a round
    # (a run of each side and two pauses)
    latencies, contest = _race(model, machine, warmup=10, budget_s=30.0, min_runs=40, deadline=30.0)
    assert [len(side) for side in latencies] == [15, 15]
    assert 30.0 <= machine.clock.t <= 31.0
    assert contest.cut_short
    # never below FEWEST_RUNS, however late
    machine.clock.t = 0.0
    latencies, _ = _race(model, machine, warmup=10, budget_s=30.0, min_runs=40, deadline=5.0)
    assert [len(side) for side in latencies] == [_contest.FEWEST_RUNS] * 2


def _busy_tune(model, machine: Machine, budget: float, search_run_s: float, started=None, **config):
    """tune on the busy machine: the search's runs cost ``search_run_s`` each (0.8x for one
    thread without spinning), a session 0.5 s, each parity check 2 s; ``started``: the
    command's start, before the call (at 0 on the clock)."""
    clock = machine.clock

    def progress(message: str) -> None:
        if message.startswith("parity gate"):
            clock.t += 2.0

    def measure(candidate, runs):
        fast = SPINNING in candidate.settings["config"]
        run_s = search_run_s * (0.8 if fast else 1.0)
        clock.t += 0.5 + run_s * runs
        return [run_s * 1000] * runs

    settings = {"levels": ("all", "basic"), "threads": (1,), "batch": 4} | config
    return tune(
        model,
        TuneConfig(time_budget=budget, **settings),
        measure=measure,
        progress=progress,
        clock=clock,
        started=started,
    )


def test_tune_keeps_its_budget_when_a_busy_machine_slows_every_run(model, machine):
    # A LightGBM model overran time_budget 180 by 26% on a busy machine: the search ended in
    # time for a contest estimated from one warm run on a quieter moment, and the contest, whose
    # runs were many times slower, kept timing until each side had its seconds and min_runs.
    # Here every run takes 0.5 s, in the search as in the workers: the estimate follows the
    # search's pace, so the search leaves the contest the room it takes.
    budget = 100.0
    report = _busy_tune(model, machine, budget, search_run_s=0.5, min_runs=20)
    assert report.seconds == machine.clock.t <= 1.1 * budget, report.phases
    assert any(note.startswith("time budget 100 s: ") for note in report.notes), (
        report.notes,
        report.phases,
        report.rounds,
        report.candidates,
    )
    # a verdict all the same: the winner, at 0.8x, beats the defaults in a full contest
    assert report.replaced_defaults and report.reliable
    assert report.defaults.runs >= 20 and report.best.runs >= 20
    assert not any("reached the budget's end" in note for note in report.notes)


def test_a_machine_that_gets_busy_during_the_search_brings_the_searchs_end_forward(model, machine):
    # the defaults were timed on a quiet machine in round 1; from round 2 on every run takes
    # twice as long (another job started), and so will the contest's: the candidates measured
    # again show it, and the search leaves the contest the room it now takes
    clock = machine.clock
    measured: list[float] = []

    def measure(candidate, runs):
        run_s = 0.25 if len(measured) < 17 else 0.5  # the grid has 17 candidates
        run_s *= 0.8 if SPINNING in candidate.settings["config"] else 1.0
        measured.append(run_s)
        clock.t += 0.5 + run_s * runs
        return [run_s * 1000] * runs

    machine.run_s = 0.5
    config = TuneConfig(
        time_budget=100.0, levels=("all", "basic"), threads=(1,), batch=4, min_runs=40
    )
    report = tune(model, config, measure=measure, clock=clock)
    assert len(measured) > 17, "round 2 began"
    assert report.seconds == clock.t <= 1.1 * 100.0, report.phases
    assert report.defaults.runs >= 40


def test_a_contest_slower_than_the_search_stops_at_the_budget_and_says_so(model, machine):
    budget = 100.0
    # the machine gets busier when the contest starts: its runs take twice the search's
    machine.run_s = 1.0
    report = _busy_tune(model, machine, budget, search_run_s=0.5, min_runs=10, contest_seconds=30)
    assert report.seconds == machine.clock.t <= 1.1 * budget, report.phases
    assert report.defaults.runs >= 10 and report.best.runs >= 10
    assert any(
        note.startswith("time budget 100 s: the final contest reached the budget's end")
        for note in report.notes
    ), report.notes
    assert report.decision, "a verdict all the same"


def test_a_machine_that_gets_busy_when_the_contest_starts_gets_a_shorter_contest(model, machine):
    # the search ran at 0.1 s a run and planned the contest at that pace (min_runs 30 per
    # side); then another job started and the workers' runs take 0.4 s: 30 runs a side no
    # longer fit, and the contest stops at what does
    machine.run_s = 0.4
    budget = 60.0
    report = _busy_tune(model, machine, budget, search_run_s=0.1)
    assert report.seconds == machine.clock.t <= 1.1 * budget, report.phases
    assert _contest.FEWEST_RUNS <= report.defaults.runs < 30
    assert any("reached the budget's end" in note for note in report.notes), report.notes


def test_a_spoiled_contest_is_timed_again_only_within_the_budget(model, machine):
    machine.spoiled = True
    budget = 100.0
    report = _busy_tune(model, machine, budget, search_run_s=0.5, min_runs=20)
    assert report.seconds == machine.clock.t <= 1.1 * budget, report.phases
    assert not report.reliable and not report.replaced_defaults
    assert any("left no room to time it again" in note for note in report.notes), report.notes


def test_graph_rewrites_start_none_that_would_end_past_the_deadline(tmp_path):
    from onnx import helper

    from models import model as make
    from models import value
    from onnxgate.model import load_model
    from onnxgate.perf._fusion import graph_candidates

    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax")]
    loaded = load_model(save(make(nodes, [value("x")], [value("y")]), tmp_path / "softmax.onnx"))
    clock = Clock()
    notes: list[str] = []
    # a Softmax invites the attention rewrites; the deadline has passed: none is made
    found = graph_candidates(loaded, notes=notes, deadline=-1.0, clock=clock)
    assert [g.label for g in found] == ["as given"]
    assert notes == [
        "the deadline for graph candidates (a third of the time budget) came before these "
        "rewrites were made: attention-fusion, attention-fusion-mha"
    ]
    # in time, the rewrite is tried (and finds no attention here)
    notes.clear()
    graph_candidates(loaded, notes=notes, deadline=1.0, clock=clock)
    assert notes == ["attention-fusion: no attention pattern matched; not tried"]
    # the first rewrite has a pace too: one expected to take longer than the time left is not
    # started (a rewrite of MiniLM took 3.9 s, started 0.1 s before its deadline)
    notes.clear()
    found = graph_candidates(loaded, notes=notes, deadline=1.0, clock=clock, first_s=2.0)
    assert [g.label for g in found] == ["as given"]
    assert notes[-1].endswith("rewrites were made: attention-fusion, attention-fusion-mha")


def test_a_search_that_overran_leaves_no_time_for_the_winners_parity_and_keeps_the_defaults(
    model, machine
):
    clock = machine.clock
    machine.run_s = 0.002
    measured: list[bool] = []

    def measure(candidate, runs):
        fast = SPINNING in candidate.settings["config"]
        # the first fast candidate's session stalls for 96 s: nothing in the search could see
        # it coming, and the search ends past its deadline
        clock.t += 96.0 if fast and not any(measured) else 1.0
        measured.append(fast)
        return [1.0 if fast else 2.0] * runs

    config = TuneConfig(time_budget=100.0, levels=("all",), threads=(1,), batch=4, min_runs=5)
    report = tune(model, config, measure=measure, clock=clock)
    assert not report.replaced_defaults and report.best.label == "as given; defaults"
    assert "winner parity" not in report.phases
    assert any(
        note.startswith("time budget 100 s: no time was left to check the search's winner")
        for note in report.notes
    ), report.notes
    assert report.decision.endswith(
        "the time budget left no time to check the search's winner for parity"
    )
    assert report.seconds == clock.t <= 1.1 * 100.0


def test_the_budget_counts_the_commands_start_up_and_its_workers_start_as_slowly(model, machine):
    # `onnxgate tune --budget 30` took 6.7 s to start on a busy machine (Python, the CLI and
    # ONNX Runtime imported) before tune's clock started, and a contest worker starts as slowly:
    # here 20 s each, against a budget of 80 s (the estimate of 3 s a worker overran it by 21%)
    machine.start_s = 20.0
    budget = 80.0
    report = _busy_tune(model, machine, budget, search_run_s=0.3, started=-20.0)
    assert report.phases["start-up"] == 20.0
    assert report.seconds == machine.clock.t + 20.0 <= 1.1 * budget, report.phases
    assert report.least_budget is None
    assert report.defaults.runs >= _contest.FEWEST_RUNS, "a verdict all the same"


def test_the_record_keeps_its_time_at_the_budgets_end(model, machine, monkeypatch):
    # reading the model took 8 s, and the record writes an optimised graph as large: the
    # contest ends early enough for it, not at the budget's end
    def slow(call):
        def slowed(*args, **kwargs):
            machine.clock.t += 8.0
            return call(*args, **kwargs)

        return slowed

    monkeypatch.setattr(_tune, "load_model", slow(_tune.load_model))
    monkeypatch.setattr(_tune, "record_tuning", slow(_tune.record_tuning))
    budget = 60.0
    report = _busy_tune(model, machine, budget, search_run_s=0.1, min_runs=10)
    assert report.phases["load"] == 8.0 and report.phases["record"] == 8.0
    assert report.seconds == machine.clock.t <= 1.1 * budget, report.phases
    assert report.written, "recorded"


def test_a_budget_below_what_the_model_as_given_costs_names_the_least_that_can_be_kept(
    model, machine
):
    # the model as given is always gated, measured and timed: here that costs more than 5 s
    budget = 5.0
    report = _busy_tune(model, machine, budget, search_run_s=0.5, started=-2.0)
    least = report.least_budget
    assert least is not None and least > budget
    assert any(
        note.startswith("time budget 5 s is less than the least this run costs")
        and note.endswith(f"time_budget={least:g} or more can be kept")
        for note in report.notes
    ), report.notes
    # a verdict all the same, from only what every verdict needs
    assert [(v.graph, v.level) for v in report.gate] == [(AS_GIVEN, "all")]
    assert report.rounds[0].candidates == 1 and not report.replaced_defaults
    assert report.defaults.runs >= _contest.FEWEST_RUNS
    assert report.seconds <= 1.1 * least, (report.seconds, least, report.phases)
    # and the least budget named is kept
    machine.clock.t = 0.0
    kept = _busy_tune(model, machine, least, search_run_s=0.5, started=-2.0)
    assert kept.least_budget is None
    assert kept.seconds == machine.clock.t + 2.0 <= 1.1 * least, kept.phases


def test_a_run_past_a_budget_it_could_have_kept_says_by_how_much(model, machine):
    clock = machine.clock
    stalled: list[bool] = []

    def measure(candidate, runs):
        # one session stalls for 58 s of a 60 s budget, past the search's deadline: nothing
        # could see it coming, and the contest that every verdict needs runs past the budget
        clock.t += 58.0 if len(stalled) == 1 else 0.5
        stalled.append(True)
        return [2.0] * runs

    config = TuneConfig(time_budget=60.0, levels=("all",), threads=(1,), batch=4, min_runs=10)
    report = tune(model, config, measure=measure, clock=clock)
    assert report.seconds == clock.t > 60.0
    assert report.least_budget is None, "60 s could have been kept"
    assert report.notes[-1] == (
        f"time budget 60 s: the run took {report.seconds:.1f} s, "
        f"{report.seconds / 60 - 1:.0%} past it: a phase took longer than its pace so far said"
    )


def test_the_least_budget_is_no_more_than_what_the_run_needed(model, machine):
    # the workers start in 0.5 s, well under the 3 s a worker is expected to take: the least
    # budget named is what the run needed, not the estimate (`--budget 3` took 3.2 s on
    # FastestDet and named 5 s)
    machine.start_s, machine.run_s = 0.5, 0.01
    report = _busy_tune(model, machine, 3.0, search_run_s=0.01, started=-1.0, min_runs=10)
    assert report.seconds > 3.0
    assert 3.0 < report.least_budget <= math.ceil(report.seconds), (report.seconds, report.phases)
