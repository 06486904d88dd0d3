"""Which of the int8 candidates that met the budget is kept: the fastest, timed, not guessed.

Every candidate that passed the accuracy gate is timed against the float model in one contest
(``_speed.race``: each model in a worker process of its own, interleaved), so the float model and
every candidate see the same machine. The fastest by the geometric mean of its speed-ups over the
shapes timed wins; a candidate not proven slower than it (``perf._stats.judge``: the interval of
their ratio holds 1 at every shape) ties with it, and of tied
candidates the more accurate one is kept, then the smaller. Whether the one kept beats the float
model is the speed gate's question (``_speed.judge_speed``), asked of it alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onnxgate.perf import judge
from onnxgate.quantize._config import Settings
from onnxgate.quantize._report import Attempt, CandidateResult, Latency
from onnxgate.quantize._speed import judge_speed, latency_row, race

if TYPE_CHECKING:
    from onnxgate.data import Sample
    from onnxgate.quantize._recipes import Recipe


@dataclass(frozen=True)
class Choice:
    """The candidate kept, and each candidate's figures against the float model."""

    chosen: str
    rows: dict[str, list[Latency]]
    """Per candidate, one row per shape against the float model."""
    speedup: dict[str, float]
    """Per candidate, the geometric mean of its speed-ups over the shapes."""
    why: dict[str, str]
    """Per candidate, why it was kept or not."""


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values))


def choose(
    dims: Sequence[Mapping[str, int]],
    float_ms: Sequence[Sequence[float]],
    candidates: Mapping[str, Sequence[Sequence[float]]],
    *,
    errors: Mapping[str, float | None],
    sizes: Mapping[str, int],
    seed: int = 0,
    unreliable: Sequence[str] = (),
) -> Choice:
    """Keep the fastest candidate; of those not proven slower than it, the most accurate.

    Args:
        dims: the shapes timed, in order.
        float_ms: the float model's latencies per shape (ms).
        candidates: each candidate's latencies per shape, timed in the same contest.
        errors: each candidate's gate error (1 - mean cosine of its worst output; lower is
            better; None when the gate has no cosine figure).
        sizes: each candidate's file size in bytes.
        seed: the bootstrap's seed.
        unreliable: why the machine spoiled the timings (``Conditions.reasons``).

    Raises:
        ValueError: no candidate.
    """
    if not candidates:
        raise ValueError("choose needs at least one candidate")
    rows = {
        name: [
            latency_row(d, f, c, seed=seed, unreliable=unreliable)
            for d, f, c in zip(dims, float_ms, runs, strict=True)
        ]
        for name, runs in candidates.items()
    }
    speedup = {name: _geomean([r.speedup for r in found]) for name, found in rows.items()}
    fastest = max(speedup, key=lambda name: speedup[name])

    def slower_than_fastest(name: str) -> bool:
        # judged on the interval alone: the machine's load (``unreliable``) spoils a verdict
        # against the float model's earlier baseline, but the candidates ran interleaved in one
        # contest, so load hits both alike and only widens the interval
        return any(
            judge(f, c, "latency", seed=seed).verdict == "slower"
            for f, c in zip(candidates[fastest], candidates[name], strict=True)
        )

    def against_float(name: str) -> int:
        # what its own speed gate will say: a tie must not swap a passing fastest candidate
        # for one the gate then finds slower than the float model
        verdict = judge_speed(rows[name], allow_slower=False, unreliable=unreliable).verdict
        return {"slower": 0, "faster": 2}.get(verdict, 1)

    tied = [
        n
        for n in candidates
        if n == fastest
        or (not slower_than_fastest(n) and against_float(n) >= against_float(fastest))
    ]

    def accuracy_then_size(name: str) -> tuple[float, int]:
        error = errors.get(name)
        return (math.inf if error is None else error, sizes.get(name, 0))

    chosen = min(tied, key=accuracy_then_size)
    why: dict[str, str] = {}
    for name in candidates:
        figures = f"x{speedup[name]:.2f} vs float"
        if name == chosen and len(tied) == 1:
            why[name] = f"kept: the fastest that met the budget ({figures})"
        elif name == chosen:
            others = ", ".join(n for n in tied if n != name)
            why[name] = (
                f"kept ({figures}): not slower beyond noise than {others}, and the most "
                "accurate (then smallest) of them"
            )
        elif name in tied:
            why[name] = (
                f"not kept ({figures}): within noise of {chosen} (x{speedup[chosen]:.2f}), "
                "which is more accurate or smaller"
            )
        elif not slower_than_fastest(name):
            why[name] = (
                f"not kept ({figures}): within noise of {fastest} (x{speedup[fastest]:.2f}), "
                "but its own timings against the float model are not as good"
            )
        else:
            why[name] = (
                f"not kept ({figures}): slower beyond noise than {fastest} "
                f"(x{speedup[fastest]:.2f}) at a shape timed"
            )
    return Choice(chosen=chosen, rows=rows, speedup=speedup, why=why)


def race_candidates(
    float_model: Path,
    models: Mapping[str, tuple[Path, Settings]],
    samples: Sequence[Sample],
    *,
    errors: Mapping[str, float | None],
    budget_s: float,
    seed: int,
    ops_libraries: Sequence[str],
    progress: Callable[[str], None],
) -> tuple[Choice, list[str]]:
    """Time the float model (first) and every candidate in one contest, and choose.

    Each candidate runs where its settings say (providers, runtime); the contest is run once
    more when the machine spoiled it. Returns the choice and why the timings are unreliable.

    Raises:
        GateError: a worker failed.
    """
    from onnxgate.perf import Contender

    libraries = {"ops_libraries": list(ops_libraries)} if ops_libraries else {}
    contenders = [Contender("float model", onnx=float_model, settings=libraries)]
    for name, (path, settings) in models.items():
        wire = libraries | ({"providers": list(settings.providers)} if settings.providers else {})
        contenders.append(
            Contender(f"{name} model", onnx=path, settings=wire, runtime=settings.runtime)
        )
    timed, conditions = race(contenders, samples, budget_s=budget_s, progress=progress)
    if not conditions.reliable:  # the machine was busy: once more before judging
        progress("the machine was busy while timing; timing again")
        timed, conditions = race(contenders, samples, budget_s=budget_s, progress=progress)
    names = list(models)
    choice = choose(
        [dims for dims, _ in timed],
        [latencies[0] for _, latencies in timed],
        {name: [latencies[i + 1] for _, latencies in timed] for i, name in enumerate(names)},
        errors=errors,
        sizes={name: path.stat().st_size for name, (path, _) in models.items()},
        seed=seed,
        unreliable=conditions.reasons,
    )
    return choice, list(conditions.reasons)


def no_gain_text(chosen: str, note: str) -> str:
    """The reason when the int8 candidate kept does not beat the float model here."""
    return (
        f"no int8 recipe beats the float model on this CPU: the recipe kept of those that met "
        f"the budget, {chosen}, is {note}"
    )


def _worst_cosine(attempt: Attempt) -> float | None:
    worst = [f.worst for f in attempt.figures if f.worst is not None]
    return min(worst) if worst else None


def candidate_results(
    tried: Sequence[tuple[Recipe, Settings, Attempt, Path, bool]],
    failed: Mapping[str, tuple[Recipe, str]],
    choice: Choice | None,
    *,
    size_before: int,
    kept: str | None,
    timed: bool,
) -> list[CandidateResult]:
    """One row per recipe: accuracy, size, speed against float, and why it was kept or not.

    ``tried``: per recipe that ran, its settings, the attempt shown (the delivered one when it
    passed), that model's file and whether it met the budget. ``failed``: recipes that could
    not be made or run, with why. ``kept``: the recipe delivered, if any.
    """
    rows: list[CandidateResult] = []
    for recipe, settings, attempt, path, passed in tried:
        size = path.stat().st_size
        timed_rows = choice.rows.get(recipe.name, []) if choice else []
        if not passed:
            why = "failed the accuracy budget (even with the search's nodes kept in float)"
        elif choice is not None:
            why = choice.why[recipe.name]
            if kept is None and recipe.name == choice.chosen:
                why += "; refused by the speed gate"
        elif not timed:
            why = "met the budget; speed not timed" + (
                ", kept: the most accurate" if recipe.name == kept else ""
            )
        else:
            why = "met the budget"
        rows.append(
            CandidateResult(
                recipe=recipe.name,
                where=recipe.where(),
                settings=settings,
                passed_accuracy=passed,
                error=attempt.worst,
                worst_cosine=_worst_cosine(attempt),
                kept_in_float=len(attempt.excluded),
                size_bytes=size,
                size_ratio=size / size_before,
                latency=timed_rows,
                speedup=choice.speedup.get(recipe.name) if choice else None,
                verdict=judge_speed(timed_rows, allow_slower=True).verdict if timed_rows else None,
                chosen=recipe.name == kept,
                why=why,
            )
        )
    for name, (recipe, message) in failed.items():
        rows.append(
            CandidateResult(
                recipe=name,
                where=recipe.where(),
                settings=Settings(),
                passed_accuracy=False,
                why=f"could not be made or run: {message}",
            )
        )
    return rows
