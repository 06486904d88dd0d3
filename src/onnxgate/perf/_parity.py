"""``tune``'s parity gate: which graph candidates, at which levels, still give the model's answers.

A fast wrong answer is not a result, so nothing is timed before it passes here. The reference is
the model as given under ONNX Runtime's defaults on the tuning shape (which has no stored
outputs), and the contract's stored golden outputs on its golden samples, judged by the
contract's rules as ``verify`` judges them: a candidate that passes cannot fail the contract by
stacking its error on the defaults' own. The gate tries the model as given under the defaults
first (the one pair always gated) and, on a deadline, starts no further pair that would end past
it at the pace of those done.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from onnxgate.compare import CompareReport, compare_runners
from onnxgate.contract import SIDECAR, Contract, GoldenRunner, config_from_rules, read_golden
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample, validate_feeds
from onnxgate.errors import ParityError, RunFailed
from onnxgate.model import LoadedModel, Signature
from onnxgate.perf._fusion import AS_GIVEN, GraphCandidate
from onnxgate.settings import SessionSettings, Tolerances

if TYPE_CHECKING:
    from onnxgate.runners import Runner


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
    provider: str | None = None
    """For a candidate of a provider's own settings (``_providers``): the provider, its options
    in ``note``; None for a graph at a level under the defaults."""
    runtime: str | None = None
    """The isolated build the candidate ran on; None for the installed ONNX Runtime."""


@dataclass(frozen=True)
class Expected:
    """What the contract says the model answers: its rules and its stored golden outputs."""

    tolerances: Tolerances
    rule: str
    """Where the tolerances came from: the contract's rules, or compare's defaults."""
    stored: list[tuple[Sample, dict[str, Any]]]


def expected(contract: Contract | None, loaded: LoadedModel, signature: Signature) -> Expected:
    """The contract's rules and golden outputs; compare's defaults and none without a contract."""
    if contract is None or contract.golden is None:
        return Expected(Tolerances(), "compare's default tolerances per dtype (no contract)", [])
    tolerances = config_from_rules(contract.golden.rules)
    stored = [
        (Sample(s.label, validate_feeds(signature, s.feeds, where=s.label), s.dims), outputs)
        for s, outputs in read_golden(contract, loaded.path)
    ]
    rule = f"the contract's rules per output ({Path(SIDECAR.location(loaded.path)).name})"
    return Expected(tolerances, rule, stored)


@dataclass(frozen=True)
class Parity:
    """What every candidate is compared with: the reference outputs, their samples, the rules."""

    golden: GoldenRunner
    samples: list[Sample]
    """The tuning sample first, then the contract's golden samples."""
    signature: Signature
    tolerances: Tolerances

    def check(self, candidate: Runner) -> CompareReport:
        """The candidate's outputs against the reference's, on every sample."""
        return compare_runners(
            candidate,
            self.golden,
            self.samples,
            signature=self.signature,
            tolerances=self.tolerances,
        )


def reference(
    loaded: LoadedModel,
    sample: Sample,
    contract: Expected,
    defaults: SessionSettings,
    *,
    signature: Signature,
    say: Callable[[str], None],
    now: Callable[[], float],
    warm_run: bool,
) -> tuple[Parity, float, float]:
    """Run the model as given under the defaults on the tuning sample: the parity reference.

    Returns:
        The parity reference, the seconds the model took to load (a contest worker loads it as
        long again) and, with ``warm_run``, the seconds of a warm run (0.0 without).
    """
    from onnxgate.runners import open_runner  # imports ONNX Runtime

    say("running the model as given under ONNX Runtime's defaults (the parity reference)")
    loading = now()
    with open_runner(loaded, defaults, extras=contract_extras()) as runner:
        load_s = now() - loading  # a contest worker loads the model as long again
        outputs = runner.infer(sample.feeds)
        expected_ = [(sample, dict(outputs.outputs)), *contract.stored]
        # a warm run, for the time budget's estimate of the contest (the first one is cold)
        run_s = runner.infer(sample.feeds).latency_ns / 1e9 if warm_run else 0.0
    golden = GoldenRunner(
        expected_,
        "onnxruntime defaults (tuning shape) and the contract's golden outputs",
        signature,
    )
    samples = [sample, *(s for s, _ in contract.stored)]
    return Parity(golden, samples, signature, contract.tolerances), load_s, run_s


def parity_gate(
    graphs: Sequence[GraphCandidate],
    levels: Sequence[str],
    files: Mapping[str, LoadedModel],
    parity: Parity,
    defaults: SessionSettings,
    *,
    deadline: float | None,
    now: Callable[[], float],
    budget: str,
    notes: list[str],
    say: Callable[[str], None],
) -> tuple[list[GraphVerdict], list[float]]:
    """Every graph candidate at every level against the reference, the model as given first.

    Returns:
        A verdict per pair tried, and the seconds each took.
    """
    from onnxgate.runners import open_runner  # imports ONNX Runtime

    gate: list[GraphVerdict] = []
    pairs = [(g, level) for g in graphs for level in levels]
    # the model as given under the defaults first: it is the one pair always gated
    pairs.sort(key=lambda pair: not (pair[0].label == AS_GIVEN and pair[1] == levels[0]))
    pair_s: list[float] = []  # how long each pair took: the next one is expected to as well
    for done, (g, level) in enumerate(pairs):
        if done and deadline is not None and now() + statistics.fmean(pair_s) > deadline:
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
            report = parity.check(candidate)
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
            gate.append(verdict(g, level, report))
        pair_s.append(now() - pair_start)
    return gate, pair_s


def passed(gate: Sequence[GraphVerdict], level: str, path: Path) -> list[tuple[str, str]]:
    """The (graph, level) pairs that passed the gate; the model as given at ``level`` must.

    Raises:
        ParityError: the model as given fails under the defaults: no candidate can be judged.
    """
    passing = [(v.graph, v.level) for v in gate if v.passed]
    if (AS_GIVEN, level) not in passing:
        raise ParityError(
            f"{path}: the model as given under ONNX Runtime's defaults fails the "
            "parity gate itself: it misses the contract's golden outputs, or does not "
            "reproduce its own outputs (random or non-deterministic operators?), so no "
            "candidate can be judged.",
            hint=f"Run `onnxgate verify {path}` to see which output fails.",
        )
    return passing


def verdict(graph: GraphCandidate, level: str, report: CompareReport) -> GraphVerdict:
    """The gate's verdict on one pair, from its comparison with the reference."""
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
