"""The search for what to keep in float when the fully quantised model misses the budget.

Each node is measured, not guessed: the model is quantised with that node alone in int8 and the
error of the gated outputs (1 - their lowest cosine to the float model) is its score. Error that
one layer injects is amplified or damped by everything after it, which per-tensor noise figures
(SQNR) do not see; quantising one node at a time measures what the output suffers. The worst nodes
are then kept in float, one, two, four... at a time until the budget is met, and the smallest
count that meets it is found by bisection between the last miss and the first hit. A count that
exhausts the candidates (or ``max_excluded``) ends the search with a clear no.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxgate.quantize._report import Attempt, GateFigure, NodeScore

log = logging.getLogger(__name__)

Make = Callable[[Sequence[str], Sequence[str] | None], Path]
"""(exclude, only) -> path of a quantised model."""
Judge = Callable[[Path], tuple[list[GateFigure], float | None]]


@dataclass
class Found:
    """What the search ended with."""

    attempts: list[Attempt]
    ranking: list[NodeScore]
    best: tuple[Path, list[str]] | None
    """The delivered model and the nodes it keeps in float; None when the budget cannot be met."""


def rank(
    nodes: Sequence[onnx.NodeProto],
    make: Make,
    judge: Judge,
    progress: Callable[[str], None],
) -> list[NodeScore]:
    """Every candidate node's error when it alone is quantised, worst first."""
    scores = []
    for index, node in enumerate(nodes, 1):
        progress(f"ranking node {index}/{len(nodes)}: {node.name} ({node.op_type}) alone in int8")
        path = make((), [node.name])
        _, worst = judge(path)
        scores.append(NodeScore(node=node.name, op_type=node.op_type, score=max(worst or 0.0, 0.0)))
    return sorted(scores, key=lambda s: s.score, reverse=True)


def _attempt(
    make: Make, judge: Judge, excluded: Sequence[str], attempts: list[Attempt]
) -> tuple[Path, Attempt]:
    path = make(list(excluded), None)
    figures, worst = judge(path)
    attempt = Attempt(
        excluded=list(excluded),
        passed=all(f.passed for f in figures),
        worst=worst,
        figures=figures,
    )
    attempts.append(attempt)
    return path, attempt


def search(
    nodes: Sequence[onnx.NodeProto],
    make: Make,
    judge: Judge,
    *,
    max_excluded: int | None,
    progress: Callable[[str], None],
    keep: Callable[[Path, int], Path],
) -> Found:
    """Rank the nodes, then keep the fewest worst ones in float that bring the model in budget.

    Args:
        nodes: candidates (the nodes the full quantisation put in int8).
        make: quantises with some nodes excluded (or only some included).
        judge: the gate's figures of a quantised model.
        max_excluded: the most nodes that may be kept in float.
        progress: called before each step.
        keep: moves a passing model out of the way of later attempts (path, count) -> new path.
    """
    ranking = rank(nodes, make, judge, progress)
    limit = len(ranking) if max_excluded is None else min(max_excluded, len(ranking))
    attempts: list[Attempt] = []
    order = [s.node for s in ranking]
    passing: dict[int, Path] = {}
    last_miss = 0
    count = 1
    while count <= limit:
        progress(f"keeping the {count} worst node(s) in float")
        path, attempt = _attempt(make, judge, order[:count], attempts)
        if attempt.passed:
            passing[count] = keep(path, count)
            break
        last_miss = count
        if count == limit:
            break
        count = min(count * 2, limit)
    if not passing:
        return Found(attempts, ranking, None)
    low, high = last_miss, min(passing)
    while high - low > 1:
        middle = (low + high) // 2
        progress(f"keeping the {middle} worst node(s) in float")
        path, attempt = _attempt(make, judge, order[:middle], attempts)
        if attempt.passed:
            passing[middle] = keep(path, middle)
            high = middle
        else:
            low = middle
    best = min(passing)
    return Found(attempts, ranking, (passing[best], order[:best]))


def naive(make: Make, judge: Judge) -> tuple[Path, Attempt]:
    """The model with every candidate quantised, judged."""
    attempts: list[Attempt] = []
    return _attempt(make, judge, (), attempts)
