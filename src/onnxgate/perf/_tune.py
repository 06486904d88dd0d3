"""``tune``: the fastest session settings (and graph) that still give the model's answers.

Four steps, in this order because each one protects the next:

1. **Parity gate.** Every graph candidate (the model as given, its attention-fused variants, ONNX
   Runtime's transformer fusions for a BERT-like encoder) at every optimisation level is compared with the model as given
   under ONNX Runtime's defaults, on the tuning shape and the contract's golden inputs, with the
   contract's rules per output. A candidate that fails is reported with its worst figures and is
   never timed: a fast wrong answer is not a result (``_parity``; what is tuned on: ``_subject``).
2. **Search.** The passing (graph, level) pairs crossed with the session grid (threads, execution
   mode, spinning, memory arena and patterns; provider options on a GPU) are searched by
   successive halving in this process, one session at a time (``_search``); a provider with
   settings of its own (OpenVINO) adds candidates gated one by one, and when they run on an
   isolated build every candidate is timed in a worker of its runtime instead (``_providers``).
3. **Contest.** The winner and the defaults are timed again, each in its own worker process, runs
   interleaved (``_contest``), ending with the time budget (``_final``). The winner replaces the
   defaults only when ``perf._stats.judge`` (the judge bench and quantize use) calls it faster:
   the 90% bootstrap interval of its improvement lies above 1, the gain is at least ``min_gain``
   (a 1% "win" on a shared machine is noise), and the machine did not spoil the contest.
4. **Record.** The settings kept (the winner's or the defaults'), both sides' figures and the
   interval go into the contract, filed under the machine fingerprint, objective and shape; an
   optimised graph is written beside the model.
"""

from __future__ import annotations

import logging
import math
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from onnxgate._version import __version__
from onnxgate._words import setting
from onnxgate.compat.providers import CPU
from onnxgate.contract import Contract, Lineage, Machine, Timing, TunedSettings
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._contention import Conditions
from onnxgate.perf._contest import FEWEST_RUNS
from onnxgate.perf._final import (
    WORKER_START_S,
    Outcome,
    Raced,
    Racer,
    RunPace,
    Side,
    contest_cost,
    contest_race,
    judged,
    watched_race,
)
from onnxgate.perf._fusion import AS_GIVEN, GraphCandidate, graph_candidates
from onnxgate.perf._machine import fingerprint, usable_cpus
from onnxgate.perf._parity import (
    GraphVerdict,
    Parity,
    expected,
    parity_gate,
    passed,
    reference,
    verdict,
)
from onnxgate.perf._providers import (
    Placement,
    gate_providers,
    interleaved,
    place_providers,
    provider_candidates,
    search_timer,
)
from onnxgate.perf._search import (
    Candidate,
    Objective,
    Round,
    describe,
    session_grid,
    successive_halving,
    thread_counts,
)
from onnxgate.perf._subject import tuning_contract, tuning_sample
from onnxgate.perf._tuned import record_tuning
from onnxgate.settings import (
    FeedSettings,
    OpsLibraries,
    OptLevel,
    Part,
    SessionSettings,
    config_hash,
)

log = logging.getLogger(__name__)

LEVELS = ("all", "extended", "basic")
"""ONNX Runtime optimisation levels searched by default."""

TIME_BUDGET = 600.0
"""Seconds a tuning run may take by default: all-MiniLM-L6-v2 at batch 32 × seq 128 on two
cores ran 32 minutes without one."""

GATE_SHARE = 1 / 3
"""The share of the time budget past which the parity gate tries no further graph candidate."""


class TuneConfig(Part):
    """What to tune for, and how much to spend on it."""

    objective: Objective = "latency"
    """``latency`` (p50 at the batch) or ``throughput`` (samples/s at the batch)."""
    batch: int | None = Field(None, ge=1)
    """Size of the batch dimension (the first input's axis 0, when symbolic)."""
    feeds: FeedSettings = FeedSettings()
    """What is tuned on: a data file (its first sample), or one size per symbolic dimension, at
    which a golden sample of the model's contract is used when there is one (with no size and no
    ``batch``, the largest golden sample within the default shape), else synthetic feeds with
    these value ranges; and the seed (also the bootstrap's)."""
    providers: tuple[str, ...] = ()
    """Execution providers. Those of the installed ONNX Runtime run every candidate, in
    preference order (CPU appended). A provider with settings of its own (OpenVINO: threads,
    streams, precision, performance hint) is searched as candidates of its own instead, on the
    installed ONNX Runtime when it includes it (it is then searched unnamed too), else on its
    isolated build (``onnxruntime-openvino==1.24.1``)."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries every candidate's session registers (``SessionSettings``)."""
    min_gain: float = Field(0.02, ge=0, lt=10)
    """The smallest improvement (0.02 = 2%) for which the winner replaces the defaults."""
    write: bool = True
    """Record the result in the contract (which must exist and describe this model)."""
    fusions: bool = True
    """Try graph rewrites: attention fusion, and ONNX Runtime's transformer fusions for encoders."""
    levels: tuple[OptLevel, ...] = Field(LEVELS, min_length=1)
    """ONNX Runtime optimisation levels searched."""
    threads: tuple[Annotated[int, Field(ge=1)], ...] | None = None
    """Intra-op thread counts to search instead of 1, 2, 4 ... up to the usable CPUs."""
    search_warmup: int = Field(2, ge=0)
    first_runs: int = Field(3, ge=1)
    """Timed runs per candidate in the first round of successive halving."""
    eta: int = Field(3, ge=2)
    """Each round keeps the best third, which then gets three times the runs."""
    max_runs: int = Field(60, ge=1)
    """The most timed runs one candidate gets in the search."""
    warmup: int = Field(10, ge=0)
    """Uncounted runs of each side of the final contest."""
    contest_seconds: float = Field(3.0, gt=0, allow_inf_nan=False)
    """Seconds of timed runs per side in the final contest (at least ``min_runs``)."""
    min_runs: int = Field(30, ge=2)
    time_budget: float | None = Field(TIME_BUDGET, gt=0, allow_inf_nan=False)
    """Seconds the whole run may take (None: no limit), from the call, or from the command's
    start when its caller gives it (``tune(started=)``: the CLI's process start, so its imports
    count). Each phase is timed as it runs (``TuneReport.phases``), and the work ends early
    enough for the record (as long as the model's load took). The graph rewrites and the parity
    gate start no step that would end past a third of the budget (at the pace of those done; the
    first rewrite as long as ONNX Runtime's load of the model); the search starts no measurement
    that would end too late to leave the winner's parity check and the final contest (workers
    started as slowly as the command did, the model loaded, both sides timed at the pace the
    search saw) their share; the final contest ends at the work's end, each side stopping there
    once it has ``min_runs`` (or fewer, down to 10, when its warm-up's pace says those would not
    fit); a contest other load spoiled is timed again only when the budget has room for it. The
    model as given under the defaults is always gated and timed, so a tiny budget still gives a
    verdict (the defaults), late: the report's ``least_budget`` and notes then give the least
    budget that can be kept. What was skipped or cut short is in the report's notes."""
    search_budget: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds the search itself may take, on top of ``time_budget``: past them no further
    candidate is measured and the best of those measured goes to the final contest (the
    defaults are always measured first)."""

    def _refuse_contradictions(self) -> None:
        self.feeds.one_size()
        self.feeds.refuse_with_inputs(*(["batch"] if self.batch is not None else []))


class TuneReport(BaseModel):
    """The answer of ``onnxgate tune``."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """The tuning finished and its result (winner or defaults) stands."""
    model: str
    machine: Machine
    objective: Objective
    shape: dict[str, int]
    parity_rule: str
    """Where the tolerances came from: the contract's rules, or compare's defaults."""
    parity_samples: int
    gate: list[GraphVerdict]
    candidates: int
    rounds: list[Round]
    defaults: Timing
    best: Timing
    ratio: float
    interval: tuple[float, float]
    min_gain: float
    replaced_defaults: bool
    settings: dict[str, Any]
    """The settings kept: the best candidate's when it replaced the defaults, else the defaults."""
    graph: str
    written: list[str] = []
    notes: list[str] = []
    conditions: Conditions | None = None
    """What the machine did during the final contest (the last one, if it was timed twice)."""
    reliable: bool = True
    """False when other load spoiled the final contest (timed again when the budget had room);
    the defaults are then kept."""
    time_budget: float | None = None
    """The time budget the run was given (seconds), None for none."""
    seconds: float = 0.0
    """How long the run took (from the command's start when it was timed: ``tune(started=)``)."""
    least_budget: float | None = None
    """The least time budget this run could have kept on this machine, set when the one given
    was less (seconds): the model as given was gated and timed all the same, past the budget."""
    phases: dict[str, float] = {}
    """Seconds each phase took: ``start-up`` (when the command's start was timed), ``load``,
    ``reference``, ``graphs``, ``parity gate``, ``search``, ``winner parity``, ``contest``,
    ``record``; what a time budget is spent on."""
    decision: str = ""
    """Why the settings kept were kept, in one sentence (the gate's summary line)."""
    provider: str = CPU
    """The execution provider the settings kept run on."""
    runtime: str | None = None
    """Where the settings kept run: None for the installed ONNX Runtime, else the isolated
    build (``onnxruntime-openvino==1.24.1``)."""


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label)


class _Clock:
    """tune's clock: where the time budget ends, and the seconds each phase took.

    The budget counts from ``started``: the command's start when its caller timed it (the CLI's
    interpreter start-up and imports are spent from the budget too), else the call. Its work
    ends before the budget does by what ``keep`` set aside for the record.
    """

    def __init__(
        self, now: Callable[[], float], time_budget: float | None, started: float | None = None
    ) -> None:
        self.now = now
        called = now()
        self.started = called if started is None else min(started, called)
        self.time_budget = time_budget
        self.budget_end = self.started + time_budget if time_budget is not None else None
        """Where the work ends: the budget's end, less what ``keep`` set aside."""
        # the graph rewrites and their parity gate share the first third of the budget
        self.gate_end = self.started + GATE_SHARE * time_budget if time_budget is not None else None
        self.budget = f"time budget {time_budget or 0:g} s"
        """How notes name the time budget."""
        self.phases: dict[str, float] = {}
        if started is not None:
            self.phases["start-up"] = round(called - self.started, 3)
        self._mark = called

    @property
    def start_up_s(self) -> float:
        """Seconds the command took to start before tune was called (0.0 when not timed)."""
        return self.phases.get("start-up", 0.0)

    def phase(self, name: str) -> None:
        """Close the phase ``name``: its seconds go into the report."""
        t = self.now()
        self.phases[name] = round(self.phases.get(name, 0.0) + t - self._mark, 3)
        self._mark = t

    def keep(self, seconds: float) -> None:
        """Set ``seconds`` aside at the budget's end (the record): the work ends that much sooner."""
        if self.budget_end is not None:
            self.budget_end -= seconds


@dataclass(frozen=True)
class _Run:
    """What the phases of one tuning run share: its settings, clock, subject and notes."""

    config: TuneConfig
    clock: _Clock
    say: Callable[[str], None]
    notes: list[str]
    loaded: LoadedModel
    sample: Sample
    batch: int
    defaults: SessionSettings


@dataclass(frozen=True)
class _Reserve:
    """The time what follows the search needs: the winner's parity check and the final contest."""

    parity_s: float
    """The winner's parity check, as long as the slowest pair of the gate."""
    pace: RunPace
    """A contest run, at the pace the search sees the machine at."""
    load_s: float
    config: TuneConfig
    start_s: float = WORKER_START_S
    """A contest worker's start-up: as long as the command's own took, and at least
    ``WORKER_START_S``."""

    def contest_s(self, *, least: bool = False) -> float:
        """Seconds the final contest is expected to take (``least``: its shortest)."""
        return contest_cost(
            2,
            run_s=self.pace.run_s,
            load_s=self.load_s,
            warmup=self.config.warmup,
            budget_s=self.config.contest_seconds,
            min_runs=self.config.min_runs,
            least=least,
            start_s=self.start_s,
        )

    def alone_s(self) -> float:
        """Seconds the shortest contest takes: the defaults alone, at the fewest runs a race keeps."""
        return contest_cost(
            1,
            run_s=self.pace.run_s,
            load_s=self.load_s,
            warmup=self.config.warmup,
            budget_s=self.config.contest_seconds,
            min_runs=min(self.config.min_runs, FEWEST_RUNS),
            least=True,
            start_s=self.start_s,
        )


def _least(reserve: _Reserve, pair_s: float, contest_s: float) -> float:
    """Seconds the rest of a run takes at the least, after its reference: what every verdict needs.

    The model as given gated under the defaults (``pair_s``), the defaults measured once in the
    search, and timed alone in a worker at the fewest runs (no longer than the contest run,
    ``contest_s``: a worker may start sooner than estimated).
    """
    config, run_s = reserve.config, reserve.pace.run_s
    measured = reserve.load_s + (config.search_warmup + config.first_runs) * run_s
    return pair_s + measured + min(reserve.alone_s(), contest_s)


def _overrun(
    clock: _Clock, reserve: _Reserve, first_pair_s: float, seconds: float, notes: list[str]
) -> float | None:
    """Say that a run went past its budget, and why when even what every verdict needs did.

    What every verdict needs is re-estimated at the pace the search saw (``_least``, the model
    as given gated as long as it was, the contest no longer than it was), with what the
    start-up, the load, the reference and the record took.

    Returns:
        The least budget that can be kept, when the one given was less; else None.
    """
    budget = clock.time_budget
    if budget is None or seconds <= budget:
        return None
    fixed = sum(clock.phases.get(p, 0.0) for p in ("start-up", "load", "reference", "record"))
    least = math.ceil(fixed + _least(reserve, first_pair_s, clock.phases["contest"]))
    if least <= budget:
        notes.append(
            f"{clock.budget}: the run took {seconds:.1f} s, {seconds / budget - 1:.0%} past "
            "it: a phase took longer than its pace so far said"
        )
        return None
    notes.append(
        f"{clock.budget} is less than the least this run costs on this machine now, about "
        f"{least} s: the start-up and the model's load, the parity reference, the model as "
        "given gated and measured once, then timed alone in a worker, and the record, which "
        f"every verdict needs; the run took {seconds:.1f} s. "
        f"{setting('time_budget', least)} or more can be kept"
    )
    return float(least)


def _graphs(
    run: _Run, given: Sequence[GraphCandidate] | None, *, first_s: float
) -> Sequence[GraphCandidate]:
    """The graph candidates: those given, else the rewrites found within the gate's share.

    The first rewrite is expected to take ``first_s``.
    """
    graphs = given
    if graphs is None:
        run.say("looking for graph rewrites (attention fusion; transformer fusions for encoders)")
        graphs = []
        if run.config.fusions:
            graphs = graph_candidates(
                run.loaded,
                notes=run.notes,
                deadline=run.clock.gate_end,
                clock=run.clock.now,
                first_s=first_s,
            )
        if not graphs:
            graphs = [GraphCandidate(AS_GIVEN, None, "the model file as given")]
    if not any(g.label == AS_GIVEN and g.proto is None for g in graphs):
        raise ConfigError(f"the graph candidates must include {AS_GIVEN!r} (the model file).")
    return graphs


def _graph_files(
    graphs: Sequence[GraphCandidate], loaded: LoadedModel, tmp: Path
) -> dict[str, LoadedModel]:
    """Each candidate's model, by label: rewritten graphs are written to ``tmp`` and loaded."""
    files: dict[str, LoadedModel] = {}
    for g in graphs:
        if g.proto is None:
            files[g.label] = loaded
            continue
        path = tmp / f"{_safe(g.label)}.onnx"
        path.write_bytes(g.proto.SerializeToString())
        files[g.label] = load_model(path)
    return files


def _grid(
    run: _Run,
    passing: list[tuple[str, str]],
    providers: Sequence[str],
    gated: Sequence[Candidate] = (),
) -> list[Candidate]:
    """The defaults first, the session grid over the passing pairs, then ``gated``.

    ``gated``: the providers' own candidates that passed the gate. Each setting once.
    """
    grid = [Candidate(AS_GIVEN, run.defaults.wire())]
    libraries = (
        {"ops_libraries": list(run.defaults.ops_libraries)} if run.defaults.ops_libraries else {}
    )
    cpu = [
        Candidate(c.graph, dict(c.settings) | libraries)
        for c in session_grid(
            passing, usable=usable_cpus(), providers=providers, threads=run.config.threads
        )
    ]
    # a deadline cuts the first round after a prefix of the grid: every provider gets its turn
    grid += interleaved(cpu, gated)
    unique: dict[tuple[str, str, str], Candidate] = {}
    for c in grid:  # the defaults stay first, so they win a tie
        unique.setdefault(c.key, c)
    return list(unique.values())


def _gate_providers(
    run: _Run, placed: Sequence[Placement], parity: Parity
) -> tuple[list[GraphVerdict], list[Candidate]]:
    """The providers' own candidates (``_providers``), each gated with its exact settings."""
    if not placed:
        return [], []
    threads = run.config.threads or thread_counts(usable_cpus())
    candidates = provider_candidates(
        placed, run.defaults, objective=run.config.objective, threads=threads
    )
    if run.config.fusions:
        run.notes.append(
            "the providers' own candidates run the model as given: the rewritten graphs use ONNX "
            "Runtime's com.microsoft operators, which those providers do not compile"
        )
    return gate_providers(
        candidates,
        run.loaded,
        parity,
        deadline=run.clock.gate_end,
        now=run.clock.now,
        budget=run.clock.budget,
        notes=run.notes,
        say=run.say,
    )


def _search(
    run: _Run,
    grid: list[Candidate],
    files: Mapping[str, LoadedModel],
    reserve: _Reserve,
    measure: Callable[[Candidate, int], Sequence[float]] | None,
) -> tuple[Candidate, list[Round]]:
    """Successive halving over the grid, leaving what follows the search its share of the budget.

    Returns:
        The best candidate measured, and the rounds.
    """
    from onnxgate.runners import open_runner  # imports ONNX Runtime

    config, clock, sample = run.config, run.clock, run.sample

    def in_process(c: Candidate, runs: int) -> list[float]:
        options = SessionSettings.from_wire(c.settings)
        with open_runner(files[c.graph], options, extras=contract_extras()) as runner:
            for _ in range(config.search_warmup):
                runner.infer(sample.feeds)
            return [runner.infer(sample.feeds).latency_ns / 1e6 for _ in range(runs)]

    timer = measure or in_process

    def timed(c: Candidate, runs: int) -> list[float]:
        latencies = list(timer(c, runs))
        reserve.pace.saw(c.key, latencies, defaults=c.key == grid[0].key)
        return latencies

    run.say(f"searching {len(grid)} candidates by successive halving")
    limits: dict[str, Callable[[], float]] = {}
    if config.search_budget is not None:
        search_end = clock.now() + config.search_budget
        limits[f"search_budget {config.search_budget:g} s"] = lambda: search_end
    if clock.budget_end is not None:
        # what follows the search keeps its share: the winner's parity check and the
        # final contest, re-estimated as the search measures the defaults
        end = clock.budget_end
        limits[clock.budget] = lambda: end - reserve.parity_s - reserve.contest_s()

    def deadline() -> float:
        return min(limit() for limit in limits.values())

    best, rounds = successive_halving(
        grid,
        timed,
        objective=config.objective,
        batch=run.batch,
        first_runs=config.first_runs,
        eta=config.eta,
        max_runs=config.max_runs,
        describe=describe,
        progress=run.say,
        deadline=deadline if limits else None,
        clock=clock.now,
    )
    clock.phase("search")
    measured = rounds[0].candidates if rounds else len(grid)
    cut_by = min(limits, key=lambda name: limits[name]()) if limits else ""
    if measured < len(grid):
        run.notes.append(
            f"{cut_by}: {measured} of {len(grid)} candidates measured before it ran out"
        )
    elif rounds and rounds[-1].cut:
        run.notes.append(
            f"{cut_by}: the search ended in round {len(rounds)} of successive halving "
            f"({rounds[-1].candidates} candidates × {rounds[-1].runs} runs); its best goes "
            "to the final contest"
        )
    return best, rounds


def _winner_parity(
    run: _Run,
    best: Candidate,
    grid: list[Candidate],
    graphs: Mapping[str, GraphCandidate],
    files: Mapping[str, LoadedModel],
    parity: Parity,
    reserve: _Reserve,
) -> tuple[Candidate, str | None]:
    """The search's winner gated again with its exact settings, when no pair gated had them.

    Threads or provider options can change reduction order. Returns the candidate that goes to
    the final contest (the defaults when the winner fails or no time is left to check it) and
    why the winner was dropped (None when it was not).
    """
    from onnxgate.runners import open_runner  # imports ONNX Runtime

    if (
        best.gated
        or best.key == grid[0].key
        or best.settings == run.defaults.wire() | {"optimization": best.settings["optimization"]}
    ):
        return best, None
    clock = run.clock
    if (
        clock.budget_end is not None
        and clock.now() + reserve.parity_s + reserve.contest_s(least=True) > clock.budget_end
    ):
        # the search ran past its end: a check and the shortest contest no longer fit
        run.notes.append(
            f"{clock.budget}: no time was left to check the search's winner ({describe(best)}) "
            "for parity with its exact settings; the defaults are kept"
        )
        return grid[0], "the time budget left no time to check the search's winner for parity"
    dropped: str | None = None
    run.say(f"parity gate: the winner's exact settings ({describe(best)})")
    options = SessionSettings.from_wire(best.settings)
    report = parity.check(open_runner(files[best.graph], options, extras=contract_extras()))
    if not report.passed:
        checked = verdict(graphs[best.graph], best.settings["optimization"], report)
        run.notes.append(
            f"the search's winner ({describe(best)}) failed parity with its exact "
            f"settings ({checked.reason}); the defaults are kept"
        )
        dropped = "the search's winner failed parity with its exact settings"
        best = grid[0]
    clock.phase("winner parity")
    return best, dropped


def _final_contest(
    run: _Run,
    best: Candidate,
    grid: list[Candidate],
    files: Mapping[str, LoadedModel],
    race: Racer | None,
    dropped: str | None,
) -> Raced:
    """The defaults (and the winner, when it is not them) timed in worker processes."""
    config, clock, say = run.config, run.clock, run.say
    racer = race or contest_race(
        warmup=config.warmup,
        budget_s=config.contest_seconds,
        min_runs=config.min_runs,
        say=say,
        clock=clock.now,
        runtimes={"tuned": best.runtime} if best.runtime else None,
    )
    sides: list[Side] = [("defaults", run.loaded.path, grid[0].settings)]
    if best.key == grid[0].key:
        why = dropped or "the defaults won the search"
        say(f"{why}; timing the defaults in a worker process")
    else:
        on = f" (on {best.runtime})" if best.runtime else ""
        say(f"final contest: the defaults against the winner{on}, interleaved, one process each")
        sides.append(("tuned", files[best.graph].path, best.settings))
    return watched_race(
        racer,
        sides,
        run.sample.feeds,
        say,
        run.notes,
        clock=clock.now,
        deadline=clock.budget_end,
        budget=clock.budget,
    )


def _record(
    run: _Run,
    outcome: Outcome,
    contract: Contract,
    machine: Machine,
    shape: dict[str, int],
    proto: Any,
) -> list[str]:
    """File the settings kept, both sides' figures and an optimised graph in the contract.

    Settings kept on an isolated build are filed under this machine as that build runs here
    (its version in the fingerprint), which is how ``tuned_for`` finds them again.
    """
    kept = outcome.kept
    if kept.runtime is not None:
        from onnxgate.runners import RuntimeSpec

        machine = fingerprint(machine.providers, runtime=RuntimeSpec.parse(kept.runtime).version)
    record = TunedSettings(
        machine=machine,
        objective=run.config.objective,
        shape=shape,
        source_sha256=contract.identity.model.sha256,
        settings=dict(kept.settings),
        runtime=kept.runtime,
        graph=kept.graph,
        replaced_defaults=outcome.replaced,
        defaults=outcome.defaults,
        best=outcome.best,
        ratio=outcome.ratio,
        interval=outcome.interval,
        min_gain=run.config.min_gain,
        onnxgate=__version__,
    )
    if proto is not None:
        record = record.model_copy(
            update={
                "lineage": Lineage(
                    parent_sha256=contract.identity.model.sha256,
                    step="tune",
                    config_hash=config_hash(run.config),
                )
            }
        )
    _, paths = record_tuning(run.loaded.path, contract, record, proto)
    return [str(p) for p in paths]


def tune(
    model: str | Path | LoadedModel,
    config: TuneConfig | None = None,
    *,
    graphs: Sequence[GraphCandidate] | None = None,
    measure: Callable[[Candidate, int], Sequence[float]] | None = None,
    race: Racer | None = None,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] | None = None,
    started: float | None = None,
) -> TuneReport:
    """Find the fastest settings that pass parity; the library function behind ``onnxgate tune``.

    Args:
        model: the ONNX model.
        config: objective, shape, and how much to spend.
        graphs: graph candidates instead of :func:`graph_candidates` (the model as given must be
            among them, labelled ``as given`` with no proto).
        measure: ``measure(candidate, runs)`` → latencies in ms, instead of timing in process.
        race: the final contest instead of worker processes (``_contest``).
        progress: called with a short message before each step.
        clock: seconds, instead of ``time.monotonic`` (the time budget reads only this clock).
        started: a reading of ``clock`` when the command began (the CLI's process start): the
            time budget counts from there, so its start-up is spent from the budget too.
            Default: the call.

    Raises:
        ConfigError: bad options, no contract to write to, or a contract of other bytes.
        ParityError: the model as given does not even agree with itself under the defaults.
        RunFailed: ONNX Runtime cannot run the model.
    """
    from onnxgate.runners import resolved_providers  # imports ONNX Runtime

    config = config or TuneConfig()
    time_ = _Clock(clock or time.monotonic, config.time_budget, started)
    say = progress or (lambda message: log.info("%s", message))
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    contract = tuning_contract(loaded, config.write)
    sample, shape, batch = tuning_sample(loaded, signature, config.feeds, config.batch)
    notes: list[str] = []
    answers = expected(contract, loaded, signature)
    # Resolved as the grid resolves them, so the defaults and their twin in the grid are one;
    # a provider with settings of its own is searched apart (``_providers``)
    kept_providers, placed = place_providers(config.providers)
    defaults = SessionSettings(providers=kept_providers, ops_libraries=config.ops_libraries)
    providers = resolved_providers(defaults)
    machine = fingerprint(providers)
    time_.phase("load")
    # set aside for the record, which writes what the load read: the contract, and an
    # optimised graph as large as the model
    time_.keep(time_.phases["load"])

    parity, load_s, run_s = reference(
        loaded,
        sample,
        answers,
        defaults,
        signature=signature,
        say=say,
        now=time_.now,
        warm_run=time_.budget_end is not None,
    )
    time_.phase("reference")

    run = _Run(config, time_, say, notes, loaded, sample, batch, defaults)
    graphs = _graphs(run, graphs, first_s=load_s)
    with tempfile.TemporaryDirectory(prefix="onnxgate-tune-") as tmp:
        files = _graph_files(graphs, loaded, Path(tmp))
        by_label = {g.label: g for g in graphs}
        time_.phase("graphs")

        gate, pair_s = parity_gate(
            graphs,
            list(dict.fromkeys([defaults.opt_level, *config.levels])),
            files,
            parity,
            defaults,
            deadline=time_.gate_end,
            now=time_.now,
            budget=time_.budget,
            notes=notes,
            say=say,
        )
        passing = passed(gate, defaults.opt_level, loaded.path)
        own, gated = _gate_providers(run, placed, parity)
        gate += own
        time_.phase("parity gate")

        grid = _grid(run, passing, providers, gated)
        start_s = max(WORKER_START_S, time_.start_up_s)  # a worker starts as the command did
        reserve = _Reserve(max(pair_s), RunPace(run_s), load_s, config, start_s)
        with search_timer(
            grid, files, sample.feeds, warmup=config.search_warmup, notes=notes, given=measure
        ) as timer:
            best, rounds = _search(run, grid, files, reserve, timer)
        best, dropped = _winner_parity(run, best, grid, by_label, files, parity, reserve)
        raced = _final_contest(run, best, grid, files, race, dropped)
        time_.phase("contest")
    outcome = judged(
        raced,
        best,
        grid[0],
        run.batch,
        objective=config.objective,
        min_gain=config.min_gain,
        seed=config.feeds.seed,
        dropped=dropped,
        notes=notes,
    )
    written: list[str] = []
    if config.write and contract is not None:
        proto = by_label[outcome.kept.graph].proto
        written = _record(run, outcome, contract, machine, shape, proto)
    time_.phase("record")
    seconds = time_.now() - time_.started
    least_budget = _overrun(time_, reserve, pair_s[0], seconds, notes)
    return TuneReport(
        passed=True,
        model=str(loaded.path),
        machine=machine,
        objective=config.objective,
        shape=shape,
        parity_rule=answers.rule,
        parity_samples=len(parity.samples),
        gate=gate,
        candidates=len(grid),
        rounds=rounds,
        defaults=outcome.defaults,
        best=outcome.best,
        ratio=outcome.ratio,
        interval=outcome.interval,
        min_gain=config.min_gain,
        replaced_defaults=outcome.replaced,
        settings=dict(outcome.kept.settings),
        graph=outcome.kept.graph,
        written=written,
        notes=notes,
        conditions=raced.conditions,
        reliable=outcome.reliable,
        time_budget=config.time_budget,
        seconds=seconds,
        least_budget=least_budget,
        phases=time_.phases,
        decision=outcome.decision,
        provider=(outcome.kept.settings.get("providers") or [CPU])[0],
        runtime=outcome.kept.runtime,
    )
