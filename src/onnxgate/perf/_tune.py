"""``tune``: the fastest session settings (and graph) that still give the model's answers.

Four steps, in this order because each one protects the next:

1. **Parity gate.** Every graph candidate (the model as given, its attention-fused variants, ONNX
   Runtime's transformer fusions for a BERT-like encoder) at every optimisation level is compared with the model as given
   under ONNX Runtime's defaults, on the tuning shape and the contract's golden inputs, with the
   contract's rules per output. A candidate that fails is reported with its worst figures and is
   never timed: a fast wrong answer is not a result.
2. **Search.** The passing (graph, level) pairs crossed with the session grid (threads, execution
   mode, spinning, memory arena and patterns; provider options on a GPU) are searched by
   successive halving in this process, one session at a time.
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
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._version import __version__
from onnxgate._words import offered, setting
from onnxgate.compare import compare_runners
from onnxgate.compat.providers import CPU
from onnxgate.contract import (
    SIDECAR,
    Contract,
    GoldenRunner,
    Lineage,
    Machine,
    Timing,
    TunedSettings,
    config_from_rules,
    contract_dims,
    contract_samples,
    identity,
    read_golden,
)
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample, load_feeds, plan_dims, validate_feeds
from onnxgate.errors import ConfigError, ParityError, RunFailed
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._bench import batch_dim, synthetic_sample
from onnxgate.perf._contention import Conditions
from onnxgate.perf._final import (
    Racer,
    RunPace,
    Side,
    contest_cost,
    contest_race,
    timing,
    watched_race,
)
from onnxgate.perf._final import decision as decide
from onnxgate.perf._fusion import AS_GIVEN, GraphCandidate, graph_candidates
from onnxgate.perf._machine import fingerprint, usable_cpus
from onnxgate.perf._search import Candidate, Objective, Round, session_grid, successive_halving
from onnxgate.perf._stats import Judgement, judge
from onnxgate.perf._tuned import record_tuning
from onnxgate.settings import (
    FeedSettings,
    OptLevel,
    Part,
    SessionSettings,
    Tolerances,
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
    """Execution providers in preference order; CPU is appended."""
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
    """Seconds the whole run may take (None: no limit). Each phase is timed as it runs
    (``TuneReport.phases``): the graph rewrites and the parity gate start no step that would end
    past a third of the budget (at the pace of those done); the search starts no measurement
    that would end too late to leave the winner's parity check and the final contest (workers
    started, the model loaded, both sides timed at the pace the search saw) their share; the
    final contest ends at the budget's end, each side stopping there once it has ``min_runs``
    (or fewer, down to 10, when its warm-up's pace says those would not fit); a contest other
    load spoiled is timed again only when the budget has room for it. The model as given under
    the defaults is always gated and timed, so a tiny budget still gives a verdict (the
    defaults), a little late. What was skipped or cut short is in the report's notes."""
    search_budget: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds the search itself may take, on top of ``time_budget``: past them no further
    candidate is measured and the best of those measured goes to the final contest (the
    defaults are always measured first)."""

    def _refuse_contradictions(self) -> None:
        self.feeds.one_size()
        self.feeds.refuse_with_inputs(*(["batch"] if self.batch is not None else []))


class OutputVerdict(BaseModel):
    """One output of a graph candidate against the model as given."""

    model_config = ConfigDict(extra="forbid")

    output: str
    passed: bool
    mismatches: int
    elements: int
    max_abs: float | None
    max_rel: float | None
    rule: str
    reason: str | None = None


class GraphVerdict(BaseModel):
    """A graph candidate at one optimisation level: did it pass the parity gate?"""

    model_config = ConfigDict(extra="forbid")

    graph: str
    level: str
    passed: bool
    note: str = ""
    reason: str | None = None
    outputs: list[OutputVerdict] = []
    """The failing outputs, or the worst one when every output passed."""


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
    """How long the run took."""
    phases: dict[str, float] = {}
    """Seconds each phase took: ``reference``, ``graphs``, ``parity gate``, ``search``,
    ``winner parity``, ``contest``, ``record``; what a time budget is spent on."""
    decision: str = ""
    """Why the settings kept were kept, in one sentence (the gate's summary line)."""


def _tuning_sample(
    loaded: LoadedModel, signature: Signature, config: TuneConfig
) -> tuple[Sample, dict[str, int], int]:
    """The sample timed, the size of every symbolic dim in it, and its batch size.

    With ``feeds.inputs``, the first sample of that data, at the sizes it has. Otherwise a golden
    sample of the model's contract: the one at ``feeds.dims`` and ``batch`` when they are set
    and one is, else (nothing set) the largest no larger than the default tuning shape. Real
    inputs the model was proven on beat made-up ones: a model whose feeds must be real data (a
    scalar that selects a branch) cannot be tuned on random values. Without a fitting golden
    sample, synthetic feeds at ``feeds.dims`` and ``batch``.
    """
    feeds = config.feeds
    name = batch_dim(signature)
    if feeds.inputs is None:
        golden = _golden_sample(loaded, signature, config, name)
        if golden is not None:
            sizes = dict(golden.sized(signature).dims)
            batch = sizes.get(name, 1) if name else 1
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "fixed"
            label = f"golden sample {golden.label} ({shown})"
            feeds_ = validate_feeds(signature, golden.feeds, where=golden.label)
            return Sample(label, feeds_, sizes), sizes, batch
    if feeds.inputs is not None:
        data = load_feeds(feeds.inputs, signature=signature)
        if not data:
            raise ConfigError(f"{feeds.inputs}: holds no sample to tune on.", field="feeds.inputs")
        first = data[0].sized(signature)
        first = Sample(
            first.label, validate_feeds(signature, first.feeds, where=first.label), first.dims
        )
        batch = first.dims.get(name, 1) if name else 1
        label = f"{first.label} ({', '.join(f'{k}={v}' for k, v in first.dims.items()) or 'fixed'})"
        return Sample(label, first.feeds, dict(first.dims)), dict(first.dims), batch
    sample = synthetic_sample(loaded, signature, feeds, config.batch)
    feeds = validate_feeds(signature, sample.feeds, where=sample.label)
    shape: dict[str, int] = {}
    for spec in signature.inputs:
        value = feeds.get(spec.name)
        if spec.shape is None or not isinstance(value, np.ndarray):
            continue
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str) and dim not in shape and axis < value.ndim:
                shape[dim] = int(value.shape[axis])
    batch = shape.get(name, 1) if name else 1
    label = "tuning shape " + (", ".join(f"{k}={v}" for k, v in shape.items()) or "fixed")
    return Sample(label, feeds, shape), shape, batch


def _golden_sample(
    loaded: LoadedModel, signature: Signature, config: TuneConfig, name: str | None
) -> Sample | None:
    """The contract's golden sample to tune on (see ``_tuning_sample``), or None."""
    golden = contract_samples(loaded.path)
    if not golden:
        return None
    golden = [s.sized(signature) for s in golden]
    wanted = config.feeds.one_size()
    if config.batch is not None and name is not None:
        wanted[name] = config.batch
    if wanted:
        return next((s for s in golden if all(s.dims.get(k) == v for k, v in wanted.items())), None)

    def elements(sample: Sample) -> int:
        return sum(np.asarray(v).size for v in sample.feeds.values())

    # the default tuning shape: the sizes synthetic feeds would take (nothing is synthesized)
    plan = plan_dims(signature, loaded.proto, known=contract_dims(loaded.path))
    planned = {name: choice.size for name, choice in plan.named.items()}
    fitting = [s for s in golden if all(v <= planned.get(k, v) for k, v in s.dims.items())]
    return max(fitting, key=elements) if fitting else min(golden, key=elements)


def _contract(loaded: LoadedModel, write: bool) -> Contract | None:
    """The model's contract, refused when it describes other bytes."""
    path = SIDECAR.location(loaded.path)
    if not SIDECAR.exists(loaded.path):
        if write:
            raise ConfigError(
                f"{loaded.path}: there is no contract to record the tuning in ({Path(path).name}).",
                hint=f"Create one with `onnxgate contract init {loaded.path}` (its tolerances "
                "become the parity gate)"
                + (
                    f", or tune without recording ({setting('write', False)})."
                    if offered("write")
                    else "."
                ),
            )
        return None
    contract = SIDECAR.read(loaded.path)
    now = identity(loaded)
    if now.model.sha256 != contract.identity.model.sha256 or {
        f.path: f.sha256 for f in now.external_data
    } != {f.path: f.sha256 for f in contract.identity.external_data}:
        raise ConfigError(
            f"{path}: describes other bytes than {loaded.path} (sha256 differs), so neither its "
            "tolerances nor its record can be used.",
            hint=f"Re-create it with `onnxgate contract init --force {loaded.path}`.",
        )
    return contract


def _verdict(graph: GraphCandidate, level: str, report: Any) -> GraphVerdict:
    failing = [o for o in report.outputs if not o.passed]
    shown = failing or sorted(report.outputs, key=lambda o: -(o.max_abs or 0.0))[:1]
    return GraphVerdict(
        graph=graph.label,
        level=level,
        passed=report.passed,
        note=graph.note,
        reason="; ".join(f"{o.name}: {o.reason}" for o in failing) or None,
        outputs=[
            OutputVerdict(
                output=o.name,
                passed=o.passed,
                mismatches=o.mismatches,
                elements=o.elements,
                max_abs=o.max_abs,
                max_rel=o.max_rel,
                rule=o.criterion,
                reason=o.reason,
            )
            for o in shown
        ],
    )


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label)


def tune(
    model: str | Path | LoadedModel,
    config: TuneConfig | None = None,
    *,
    graphs: Sequence[GraphCandidate] | None = None,
    measure: Callable[[Candidate, int], Sequence[float]] | None = None,
    race: Racer | None = None,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] | None = None,
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

    Raises:
        ConfigError: bad options, no contract to write to, or a contract of other bytes.
        ParityError: the model as given does not even agree with itself under the defaults.
        RunFailed: ONNX Runtime cannot run the model.
    """
    from onnxgate.runners import (
        check_session,
        open_runner,  # imports ONNX Runtime
        resolved_providers,
    )

    config = config or TuneConfig()
    now = clock or time.monotonic
    started = now()
    budget_end = started + config.time_budget if config.time_budget is not None else None
    phases: dict[str, float] = {}
    mark = [started]

    def phase(name: str) -> None:
        """Close the phase ``name``: its seconds go into the report."""
        t = now()
        phases[name] = round(phases.get(name, 0.0) + t - mark[0], 3)
        mark[0] = t

    say = progress or (lambda message: log.info("%s", message))
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    contract = _contract(loaded, config.write)
    sample, shape, batch = _tuning_sample(loaded, signature, config)
    notes: list[str] = []
    compare_config = Tolerances()
    rule = "compare's default tolerances per dtype (no contract)"
    stored: list[tuple[Sample, dict[str, Any]]] = []
    if contract is not None and contract.golden is not None:
        compare_config = config_from_rules(contract.golden.rules)
        stored = [
            (Sample(s.label, validate_feeds(signature, s.feeds, where=s.label), s.dims), outputs)
            for s, outputs in read_golden(contract, loaded.path)
        ]
        rule = f"the contract's rules per output ({Path(SIDECAR.location(loaded.path)).name})"
    samples = [sample, *(s for s, _ in stored)]
    # Resolved as the grid resolves them, so the defaults and their twin in the grid are one.
    resolved = resolved_providers(config.providers)
    defaults = SessionSettings(providers=tuple(p for p in resolved if p != CPU))
    providers = resolved_providers(defaults)
    machine = fingerprint(providers)

    # The tuning shape has no stored outputs: the model as given under the defaults is its
    # reference. The golden samples are judged against their stored outputs, as `verify` judges
    # them, so a candidate that passes here cannot fail the contract by stacking its error on
    # the defaults' own.
    say("running the model as given under ONNX Runtime's defaults (the parity reference)")
    loading = now()
    with open_runner(loaded, defaults, extras=contract_extras()) as runner:
        load_s = now() - loading  # a contest worker loads the model as long again
        reference = runner.infer(sample.feeds)
        expected = [(sample, dict(reference.outputs)), *stored]
        # a warm run, for the time budget's estimate of the contest (the first one is cold)
        run_s = runner.infer(sample.feeds).latency_ns / 1e9 if budget_end is not None else 0.0
    golden = GoldenRunner(
        expected, "onnxruntime defaults (tuning shape) and the contract's golden outputs", signature
    )
    phase("reference")

    budget = f"time budget {config.time_budget or 0:g} s"
    # the graph rewrites and their parity gate share the first third of the budget
    gate_end = started + GATE_SHARE * config.time_budget if config.time_budget is not None else None
    if graphs is None:
        say("looking for graph rewrites (attention fusion; transformer fusions for encoders)")
        graphs = []
        if config.fusions:
            graphs = graph_candidates(loaded, notes=notes, deadline=gate_end, clock=now)
        if not graphs:
            graphs = [GraphCandidate(AS_GIVEN, None, "the model file as given")]
    if not any(g.label == AS_GIVEN and g.proto is None for g in graphs):
        raise ConfigError(f"the graph candidates must include {AS_GIVEN!r} (the model file).")

    with tempfile.TemporaryDirectory(prefix="onnxgate-tune-") as tmp:
        files: dict[str, LoadedModel] = {}
        for g in graphs:
            if g.proto is None:
                files[g.label] = loaded
                continue
            path = Path(tmp) / f"{_safe(g.label)}.onnx"
            path.write_bytes(g.proto.SerializeToString())
            files[g.label] = load_model(path)
        by_label = {g.label: g for g in graphs}
        phase("graphs")

        gate: list[GraphVerdict] = []
        levels = list(dict.fromkeys([defaults.opt_level, *config.levels]))
        pairs = [(g, level) for g in graphs for level in levels]
        # the model as given under the defaults first: it is the one pair always gated
        pairs.sort(key=lambda pair: not (pair[0].label == AS_GIVEN and pair[1] == levels[0]))
        pair_s: list[float] = []  # how long each pair took: the next one is expected to as well
        for done, (g, level) in enumerate(pairs):
            if done and gate_end is not None and now() + statistics.fmean(pair_s) > gate_end:
                skipped = sorted({f"{p.label} @ {lv}" for p, lv in pairs[done:]})
                notes.append(
                    f"{budget}: the parity gate stopped after "
                    f"{done} of {len(pairs)} graph candidates × levels; not tried: "
                    + ", ".join(skipped)
                )
                break
            pair_start = now()
            say(f"parity gate: {g.label} at level {level}")
            options = SessionSettings.from_wire(defaults.wire() | {"optimization": level})
            candidate = open_runner(
                files[g.label], options, extras=contract_extras(name=f"{g.label} @ {level}")
            )
            try:
                report = compare_runners(
                    candidate, golden, samples, signature=signature, tolerances=compare_config
                )
            except RunFailed as err:
                gate.append(
                    GraphVerdict(
                        graph=g.label,
                        level=level,
                        passed=False,
                        note=g.note,
                        reason=err.message,
                    )
                )
            else:
                gate.append(_verdict(g, level, report))
            pair_s.append(now() - pair_start)
        phase("parity gate")
        passing = [(v.graph, v.level) for v in gate if v.passed]
        if (AS_GIVEN, defaults.opt_level) not in passing:
            raise ParityError(
                f"{loaded.path}: the model as given under ONNX Runtime's defaults fails the "
                "parity gate itself: it misses the contract's golden outputs, or does not "
                "reproduce its own outputs (random or non-deterministic operators?), so no "
                "candidate can be judged.",
                hint=f"Run `onnxgate verify {loaded.path}` to see which output fails.",
            )

        grid = [Candidate(AS_GIVEN, defaults.wire())]
        grid += session_grid(
            passing, usable=usable_cpus(), providers=providers, threads=config.threads
        )
        unique: dict[tuple[str, str], Candidate] = {}
        for c in grid:  # the defaults stay first, so they win a tie
            unique.setdefault(c.key, c)
        grid = list(unique.values())

        def describe(c: Candidate) -> str:
            settings = SessionSettings.from_wire(c.settings)
            check_session(settings)  # before the line that names them, as ever
            return f"{c.graph}; {settings.describe()}"

        def in_process(c: Candidate, runs: int) -> list[float]:
            options = SessionSettings.from_wire(c.settings)
            with open_runner(files[c.graph], options, extras=contract_extras()) as runner:
                for _ in range(config.search_warmup):
                    runner.infer(sample.feeds)
                return [runner.infer(sample.feeds).latency_ns / 1e6 for _ in range(runs)]

        timer = measure or in_process
        pace = RunPace(run_s)  # a contest run, at the pace the search sees the machine at

        def timed(c: Candidate, runs: int) -> list[float]:
            latencies = list(timer(c, runs))
            pace.saw(c.key, latencies, defaults=c.key == grid[0].key)
            return latencies

        def contest_s(*, least: bool = False) -> float:
            return contest_cost(
                2,
                run_s=pace.run_s,
                load_s=load_s,
                warmup=config.warmup,
                budget_s=config.contest_seconds,
                min_runs=config.min_runs,
                least=least,
            )

        parity_s = max(pair_s)  # the winner's parity check, as long as the slowest pair
        say(f"searching {len(grid)} candidates by successive halving")
        limits: dict[str, Callable[[], float]] = {}
        if config.search_budget is not None:
            search_end = now() + config.search_budget
            limits[f"search_budget {config.search_budget:g} s"] = lambda: search_end
        if budget_end is not None:
            # what follows the search keeps its share: the winner's parity check and the
            # final contest, re-estimated as the search measures the defaults
            end = budget_end
            limits[budget] = lambda: end - parity_s - contest_s()

        def deadline() -> float:
            return min(limit() for limit in limits.values())

        dropped: str | None = None
        best, rounds = successive_halving(
            grid,
            timed,
            objective=config.objective,
            batch=batch,
            first_runs=config.first_runs,
            eta=config.eta,
            max_runs=config.max_runs,
            describe=describe,
            progress=say,
            deadline=deadline if limits else None,
            clock=now,
        )
        phase("search")
        measured = rounds[0].candidates if rounds else len(grid)
        cut_by = min(limits, key=lambda name: limits[name]()) if limits else ""
        if measured < len(grid):
            notes.append(
                f"{cut_by}: {measured} of {len(grid)} candidates measured before it ran out"
            )
        elif rounds and rounds[-1].cut:
            notes.append(
                f"{cut_by}: the search ended in round {len(rounds)} of successive halving "
                f"({rounds[-1].candidates} candidates × {rounds[-1].runs} runs); its best goes "
                "to the final contest"
            )
        if best.key != grid[0].key and best.settings != defaults.wire() | {
            "optimization": best.settings["optimization"]
        }:
            # threads or provider options can change reduction order: judge the exact settings
            if budget_end is not None and now() + parity_s + contest_s(least=True) > budget_end:
                # the search ran past its end: a check and the shortest contest no longer fit
                notes.append(
                    f"{budget}: no time was left to check the search's winner ({describe(best)}) "
                    "for parity with its exact settings; the defaults are kept"
                )
                dropped = "the time budget left no time to check the search's winner for parity"
                best = grid[0]
            else:
                say(f"parity gate: the winner's exact settings ({describe(best)})")
                options = SessionSettings.from_wire(best.settings)
                runner = open_runner(files[best.graph], options, extras=contract_extras())
                report = compare_runners(
                    runner, golden, samples, signature=signature, tolerances=compare_config
                )
                if not report.passed:
                    verdict = _verdict(by_label[best.graph], best.settings["optimization"], report)
                    notes.append(
                        f"the search's winner ({describe(best)}) failed parity with its exact "
                        f"settings ({verdict.reason}); the defaults are kept"
                    )
                    dropped = "the search's winner failed parity with its exact settings"
                    best = grid[0]
                phase("winner parity")

        racer = race or contest_race(
            warmup=config.warmup,
            budget_s=config.contest_seconds,
            min_runs=config.min_runs,
            say=say,
            clock=now,
        )
        sides: list[Side] = [("defaults", loaded.path, grid[0].settings)]
        if best.key == grid[0].key:
            why = dropped or "the defaults won the search"
            say(f"{why}; timing the defaults in a worker process")
        else:
            say("final contest: the defaults against the winner, interleaved, one process each")
            sides.append(("tuned", files[best.graph].path, best.settings))
        raced = watched_race(
            racer, sides, sample.feeds, say, notes, clock=now, deadline=budget_end, budget=budget
        )
        latencies, best_latencies = raced.latencies[0], raced.latencies[-1]
        phase("contest")
    spoiled = tuple(raced.conditions.reasons) if raced.conditions is not None else ()
    reliable = not spoiled
    default_timing = timing("defaults", grid[0].settings, AS_GIVEN, latencies, batch)
    best_timing = timing(describe(best), best.settings, best.graph, best_latencies, batch)
    contested = best.key != grid[0].key
    judged: Judgement | None = None
    if contested:
        judged = judge(
            latencies,
            best_latencies,
            config.objective,
            unreliable=spoiled,
            min_gain=config.min_gain,
            seed=config.feeds.seed,
        )
        ratio, interval = judged.ratio, judged.interval
    else:
        ratio, interval = 1.0, (1.0, 1.0)
    replaced = judged is not None and judged.verdict == "faster"
    if not reliable:
        notes.append(
            "UNRELIABLE: the final contest was spoiled by a busy machine ("
            + "; ".join(spoiled)
            + "): its figures are reported, the defaults are kept; tune again on a quiet machine"
        )
    elif judged is not None and not replaced:
        notes.append(
            f"the best candidate measured {ratio:.3f}× the defaults (90% interval "
            f"{interval[0]:.3f}–{interval[1]:.3f}); it needs an interval above 1 and a gain of "
            f"at least {config.min_gain:.0%} to replace them, so the defaults are kept"
        )
    decision = decide(
        judged,
        objective=config.objective,
        min_gain=config.min_gain,
        defaults=default_timing,
        best=best_timing,
        dropped=dropped,
    )
    kept = best if replaced else grid[0]
    written: list[str] = []
    if config.write and contract is not None:
        record = TunedSettings(
            machine=machine,
            objective=config.objective,
            shape=shape,
            source_sha256=contract.identity.model.sha256,
            settings=dict(kept.settings),
            graph=kept.graph,
            replaced_defaults=replaced,
            defaults=default_timing,
            best=best_timing,
            ratio=ratio,
            interval=interval,
            min_gain=config.min_gain,
            onnxgate=__version__,
        )
        proto = by_label[kept.graph].proto
        if proto is not None:
            record = record.model_copy(
                update={
                    "lineage": Lineage(
                        parent_sha256=contract.identity.model.sha256,
                        step="tune",
                        config_hash=config_hash(config),
                    )
                }
            )
        _, paths = record_tuning(loaded.path, contract, record, proto)
        written = [str(p) for p in paths]
    phase("record")
    return TuneReport(
        passed=True,
        model=str(loaded.path),
        machine=machine,
        objective=config.objective,
        shape=shape,
        parity_rule=rule,
        parity_samples=len(samples),
        gate=gate,
        candidates=len(grid),
        rounds=rounds,
        defaults=default_timing,
        best=best_timing,
        ratio=ratio,
        interval=interval,
        min_gain=config.min_gain,
        replaced_defaults=replaced,
        settings=dict(kept.settings),
        graph=kept.graph,
        written=written,
        notes=notes,
        conditions=raced.conditions,
        reliable=reliable,
        time_budget=config.time_budget,
        seconds=now() - started,
        phases=phases,
        decision=decision,
    )
