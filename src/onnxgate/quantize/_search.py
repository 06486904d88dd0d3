"""The search for what to keep in float when the fully quantised model misses the budget.

Each node is measured, not guessed: the model is quantised with that node alone in int8 and the
error of the gated outputs (1 - the mean row cosine of the worst one) is its score. In static mode
the nodes are ranked on the calibration data, so the evaluation data only decides how many of the
worst are kept in float; without calibration data (dynamic mode) both are chosen on the
evaluation data, which the report says. Error that
one layer injects is amplified or damped by everything after it, which per-tensor noise figures
(SQNR) do not see; quantising one node at a time measures what the output suffers. Nodes are then
ordered by error, and among errors within a factor of two by what float costs
(``speed_costs``: a node's multiply-adds; a Gather's table size), so that of two nodes with
about the same error the cheaper one stays float; they are kept in float in that order, one, two, four... at a time until the budget is met; the smallest count
that meets it is found by bisection between the last miss and the first hit. A count that
exhausts the candidates (or ``max_excluded``) ends the search with a clear no.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxgate.quantize._report import Attempt, GateFigure, NodeScore

log = logging.getLogger(__name__)

Make = Callable[[Sequence[str], Sequence[str] | None], Path]
"""(exclude, only) -> path of a quantised model (a scratch path the next call overwrites)."""
Judge = Callable[[Path], tuple[list[GateFigure], float | None]]
Error = Callable[[Path], float | None]
"""A quantised model's error: 1 - the mean row cosine of its worst gated output."""


@dataclass
class Found:
    """What the search ended with."""

    attempts: list[Attempt]
    ranking: list[NodeScore]
    best: tuple[Path, list[str]] | None
    """The delivered model and the nodes it keeps in float; None when the budget cannot be met."""
    last: tuple[Path, Attempt] | None
    """The last model judged and its attempt (what a report shows when the budget is missed)."""
    limit: int
    """The most nodes the search was allowed to keep in float."""


def rank(
    nodes: Sequence[onnx.NodeProto],
    make: Make,
    error: Error,
    progress: Callable[[str], None],
    costs: Mapping[str, float] | None = None,
    words: tuple[str, str] = ("int8", "float"),
) -> list[NodeScore]:
    """Every candidate node's error when it alone is quantised, in the order to keep them in float.

    The most error first; errors in the same power-of-two band count as equal, and among them
    the node with the least ``costs`` (what float costs in speed or size) goes first, so cost
    breaks near-ties and never lets a node jump ahead of one with twice its error.
    """
    costs = costs or {}
    scores = []
    for index, node in enumerate(nodes, 1):
        progress(
            f"ranking node {index}/{len(nodes)}: {node.name} ({node.op_type}) alone in {words[0]}"
        )
        path = make((), [node.name])
        worst = error(path)
        scores.append(
            NodeScore(
                node=node.name,
                op_type=node.op_type,
                score=max(worst or 0.0, 0.0),
                cost=max(costs.get(node.name, 1.0), 1.0),
            )
        )
    return sorted(scores, key=_order)


def _order(score: NodeScore) -> tuple[float, float, float]:
    band = -math.floor(math.log2(score.score)) if score.score > 0 else math.inf
    return band, score.cost, -score.score


def _attempt(
    make: Make,
    judge: Judge,
    excluded: Sequence[str],
    attempts: list[Attempt],
    keep: Callable[[Path, int], Path],
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
    return keep(path, len(excluded)), attempt


def search(
    nodes: Sequence[onnx.NodeProto],
    make: Make,
    judge: Judge,
    *,
    error: Error,
    max_excluded: int,
    progress: Callable[[str], None],
    keep: Callable[[Path, int], Path],
    costs: Mapping[str, float] | None = None,
    words: tuple[str, str] = ("int8", "float"),
) -> Found:
    """Rank the nodes, then keep the fewest worst ones in float that bring the model in budget.

    Args:
        nodes: candidates (the nodes the full quantisation put in int8).
        make: quantises with some nodes excluded (or only some included).
        judge: the gate's figures of a quantised model, on the evaluation data.
        error: the error that ranks nodes (on the calibration data when there is any).
        max_excluded: the most nodes that may be kept in float (at least 1).
        progress: called before each step.
        keep: moves a judged model out of the way of later attempts (path, count) -> new path.
        costs: each node's speed cost in float (``speed_costs``); none: every node costs 1.
        words: the format converted to and the one kept (``int8``/``float``, ``fp16``/``fp32``),
            for progress messages.

    Raises:
        ValueError: ``max_excluded`` below 1.
    """
    if max_excluded < 1:
        raise ValueError(f"max_excluded is {max_excluded}; the search needs at least 1")
    ranking = rank(nodes, make, error, progress, costs, words)
    limit = min(max_excluded, len(ranking))
    attempts: list[Attempt] = []
    order = [s.node for s in ranking]
    passing: dict[int, Path] = {}
    last: tuple[Path, Attempt] | None = None
    last_miss = 0
    count = 1
    while count <= limit:
        progress(f"keeping the first {count} ranked node(s) in {words[1]}")
        last = _attempt(make, judge, order[:count], attempts, keep)
        if last[1].passed:
            passing[count] = last[0]
            break
        last_miss = count
        if count == limit:
            break
        count = min(count * 2, limit)
    if not passing:
        return Found(attempts, ranking, None, last, limit)
    low, high = last_miss, min(passing)
    while high - low > 1:
        middle = (low + high) // 2
        progress(f"keeping the first {middle} ranked node(s) in {words[1]}")
        last = _attempt(make, judge, order[:middle], attempts, keep)
        if last[1].passed:
            passing[middle] = last[0]
            high = middle
        else:
            low = middle
    best = min(passing)
    return Found(attempts, ranking, (passing[best], order[:best]), last, limit)


def naive(make: Make, judge: Judge, keep: Callable[[Path, int], Path]) -> tuple[Path, Attempt]:
    """The model with every candidate quantised, judged."""
    attempts: list[Attempt] = []
    return _attempt(make, judge, (), attempts, keep)
