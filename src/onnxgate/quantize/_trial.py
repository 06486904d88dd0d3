"""One int8 (or fp16) candidate through the gate and the search for nodes to keep in float.

``quantize`` tries one candidate from the resolved settings, or one per recipe (``recipes``):
each is made from the pre-processed float model (fused first when its recipe says), judged
where it will run (``Judge.on``) and, when it misses the budget, searched for the worst nodes to
keep in float. What the candidates share (the data, the float model's outputs) is read once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnxgate._words import setting
from onnxgate.contract import (
    contract_dims,
)
from onnxgate.data import Sample, synthetic_samples
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature
from onnxgate.quantize import _data, _float16
from onnxgate.quantize._config import (
    QuantizeConfig,
    Settings,
)
from onnxgate.quantize._gate import Judge
from onnxgate.quantize._ort import (
    candidates,
    name_nodes,
    preprocess,
    quantisable,
    quantise,
    quantised_nodes,
    speed_costs,
)
from onnxgate.quantize._recipes import Recipe, choose_recipes, fuse_graph, recipe_settings
from onnxgate.quantize._report import (
    Attempt,
    DataInfo,
    NodeScore,
)
from onnxgate.quantize._search import Make, naive, search

log = logging.getLogger(__name__)


def words(settings: Settings) -> tuple[str, str]:
    """The format converted to and the one nodes are kept in: int8/float, fp16/fp32."""
    return (settings.to, "float" if settings.to == "int8" else "fp32")


@dataclass
class Data:
    """The calibration and evaluation data, read and checked against each other."""

    calibration: list[Sample]
    calibration_info: DataInfo | None
    evaluation: list[Sample]
    eval_source: str
    eval_rows: int
    labels: np.ndarray | None
    overlap_rows: int
    warnings: list[str]


def read_data(
    config: QuantizeConfig,
    static: bool,
    signature: Signature,
    loaded: LoadedModel,
    say: Callable[[str], None],
) -> Data:
    """Read the calibration data (static mode), the evaluation data (or synthesise it), labels."""
    _data.check_distinct(config.calibration, config.eval)
    warnings: list[str] = []
    calibration: list[Sample] = []
    calibration_info = None
    if static:
        assert config.calibration is not None  # resolve() refused static without it
        say("reading the calibration data")
        calibration = _data.load_samples(config.calibration, signature, option="calibration")
        calibration_info = DataInfo(
            source=config.calibration,
            samples=len(calibration),
            rows=sum(_data.rows(s) for s in calibration),
        )
    if config.eval is not None:
        say("reading the evaluation data")
        evaluation = _data.load_samples(config.eval, signature, option="eval")
        eval_source = config.eval
    else:
        evaluation = synthetic_samples(
            signature, model=loaded.proto, seed=config.seed, known=contract_dims(loaded.path)
        )
        eval_source = f"synthetic (seed {config.seed})"
        warnings.append(
            f"no evaluation data ({setting('eval')}): the gate ran on synthetic inputs, which say "
            "little about accuracy on real data"
        )
    eval_rows = sum(_data.rows(s) for s in evaluation)
    labels = _data.load_labels(config.labels, eval_rows) if config.labels is not None else None
    overlap_rows = _data.overlap(calibration, evaluation) if calibration else 0
    if overlap_rows:
        warnings.append(
            f"{overlap_rows} of {eval_rows} evaluation row(s) also appear in the calibration "
            "data: the accuracy measured on them flatters the model"
        )
    return Data(
        calibration,
        calibration_info,
        evaluation,
        eval_source,
        eval_rows,
        labels,
        overlap_rows,
        warnings,
    )


@dataclass
class Found:
    """What the search for nodes to keep in float found, and the attempt the report shows."""

    attempts: list[Attempt]
    ranking: list[NodeScore]
    best: tuple[Path, list[str]] | None
    shown: Path
    shown_attempt: Attempt
    reason: str | None
    ranked_on: str | None


def keep_in_float(
    config: QuantizeConfig,
    first: Attempt,
    all_int8: Path,
    nodes: list[onnx.NodeProto],
    make: Make,
    keep: Callable[[Path, int], Path],
    judge: Judge,
    prepared: onnx.ModelProto,
    say: Callable[[str], None],
    warnings: list[str],
    settings: Settings,
    *,
    calibration: list[Sample],
    calibration_judge: Callable[[], Judge],
) -> Found:
    """When every node in int8 misses the budget, search for the worst nodes to keep in float."""
    low, high = words(settings)
    attempts: list[Attempt] = [first]
    ranking: list[NodeScore] = []
    best: tuple[Path, list[str]] | None = (all_int8, []) if first.passed else None
    shown, shown_attempt = all_int8, first
    reason = None
    ranked_on = None
    limit = len(nodes) - 1 if config.max_excluded is None else config.max_excluded
    limit = min(limit, len(nodes) - 1)  # at least one node stays int8
    if not first.passed and config.search and limit >= 1:
        error = judge.error
        ranked_on = "evaluation"
        if calibration:
            say(f"running the float model on {len(calibration)} calibration sample(s)")
            error = calibration_judge().error
            ranked_on = "calibration"
        found = search(
            nodes,
            make,
            judge.judge,
            error=error,
            max_excluded=limit,
            progress=say,
            keep=keep,
            costs=speed_costs(prepared, nodes),
            words=(low, high),
        )
        attempts += found.attempts
        ranking = found.ranking
        best = found.best
        if best is not None:
            shown = best[0]
            shown_attempt = next(a for a in found.attempts if a.passed and a.excluded == best[1])
        else:
            if found.last is not None:
                shown, shown_attempt = found.last
            reason = (
                f"the budget cannot be met: with the {found.limit} worst of {len(nodes)} "
                f"node(s) kept in {high}"
                + (
                    f" ({setting('max_excluded', config.max_excluded)})"
                    if config.max_excluded is not None and found.limit == config.max_excluded
                    else f" (at least one must stay {low})"
                )
                + " it is still missed"
            )
        if ranked_on == "evaluation":
            warnings.append(
                f"nodes kept in {high} are chosen on the evaluation data ("
                + ("dynamic mode has" if settings.to == "int8" else f"{low} needs")
                + " no calibration data to rank them on): the gate's figures flatter the model "
                "a little; check it on other data"
            )
    elif not first.passed:
        why = (
            f" and the search is off ({setting('search', False)})"
            if not config.search
            else f" and {setting('max_excluded', 0)} allows no node in {high}"
            if config.max_excluded == 0
            else f" and the model has a single candidate node (it must stay {low})"
        )
        reason = f"the budget was missed with every node in {low}" + why
    return Found(attempts, ranking, best, shown, shown_attempt, reason, ranked_on)


@dataclass
class Tried:
    """One candidate through the gate and the search for nodes to keep in float."""

    recipe: Recipe | None
    settings: Settings
    judge: Judge
    """The gate, running the candidates where they will run."""
    prepared: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    all_int8: Path
    found: Found

    @property
    def label(self) -> str:
        return self.recipe.name if self.recipe is not None else "quantised"

    @property
    def delivered(self) -> Path | None:
        return self.found.best[0] if self.found.best is not None else None


def plans(
    config: QuantizeConfig, settings: Settings, features: list[str], notices: list[str]
) -> list[tuple[Recipe | None, Settings]]:
    """The candidates to try: one from the settings, or one per recipe (``recipes``)."""
    if not config.recipes or settings.to != "int8":
        return [(None, settings)]
    recipes, chosen = choose_recipes(
        config.recipes, features, calibration=config.calibration is not None
    )
    notices += chosen
    return [(r, recipe_settings(config, settings, r, quantisable)) for r in recipes]


def prepare(
    settings: Settings,
    recipe: Recipe | None,
    loaded: LoadedModel,
    source: Path,
    tmp: Path,
    done: dict[bool, Path],
    notices: list[str],
    say: Callable[[str], None],
) -> Path:
    """The pre-processed float model a candidate is made from (once per graph rewrite)."""
    fuse = recipe is not None and recipe.fuse
    if fuse in done:
        return done[fuse]
    pre = tmp / ("pre-fused.onnx" if fuse else "pre.onnx")
    if settings.to != "int8":  # the converter needs only node names: exclusion lists name nodes
        named = onnx.load(str(source))
        name_nodes(named)
        onnx.save(named, str(pre))
    else:
        start = source
        if fuse:
            say("fusing attention, layer norm and GELU (onnxscript's ONNX Runtime fusions)")
            fused = fuse_graph(loaded.proto)
            start = tmp / "fused.onnx"
            onnx.save(fused.proto, str(start))
            notices.append(f"fused before quantising: {fused.describe() or 'nothing matched'}")
        say("pre-processing (ONNX Runtime's quant_pre_process)")
        notices += [n for n in preprocess(start, pre) if n not in notices]
    done[fuse] = pre
    return pre


def try_candidate(
    config: QuantizeConfig,
    recipe: Recipe | None,
    settings: Settings,
    loaded: LoadedModel,
    pre: Path,
    folder: Path,
    judge: Judge,
    data: Data,
    notices: list[str],
    say: Callable[[str], None],
    calibration_judge: Callable[[], Judge],
) -> Tried:
    """Make one candidate, judge it where it runs, and search for nodes to keep in float.

    Raises:
        ConfigError: ONNX Runtime quantised none of the candidate nodes.
        GateError: the quantiser or a runtime failed.
    """
    low, _ = words(settings)
    folder.mkdir(exist_ok=True)
    session = judge.session
    judge = judge.on(settings.providers, settings.runtime)
    prepared = onnx.load(str(pre), load_external_data=False)
    nodes = (
        candidates(prepared, settings) if settings.to == "int8" else _float16.candidates(prepared)
    )
    overflow: dict[str, str] = {}
    if settings.to != "int8":
        say("looking for float32 outputs beyond float16's range")
        overflow = _float16.overflowing(pre, data.evaluation, session)
        nodes = [n for n in nodes if n.name not in overflow]
        if overflow:
            notices.append(
                f"kept in float32 before the search, their outputs beyond float16's range "
                f"on the evaluation data (infinite on float16 hardware, which ONNX "
                f"Runtime's CPU provider would not show): {'; '.join(overflow.values())}"
            )
    cache = folder / "calibration.json" if settings.mode == "static" else None

    def make(exclude: Sequence[str], only: Sequence[str] | None) -> Path:
        target = folder / "candidate.onnx"
        if settings.to != "int8":
            only = None if only is None else [n for n in only if n not in overflow]
            _float16.convert(
                pre,
                target,
                exclude=[*overflow, *exclude],
                only=only,
                ops_libraries=config.ops_libraries,
            )
            return target
        quantise(
            pre,
            target,
            settings,
            exclude=exclude,
            only=only,
            calibration=data.calibration,
            cache=cache,
        )
        return target

    def keep(path: Path, count: int) -> Path:
        return path.rename(folder / f"attempt-{count}.onnx")

    say(f"converting {len(nodes)} node(s) to {low}" + (f" ({recipe.name})" if recipe else ""))
    all_int8, first = naive(make, judge.judge, keep)
    if (
        settings.to == "int8"
        and quantised_nodes(onnx.load(str(all_int8), load_external_data=False)) == 0
    ):
        raise ConfigError(
            f"{loaded.path}: ONNX Runtime quantised none of its "
            f"{'/'.join(settings.op_types)} nodes.",
            hint=f"Check {setting('op_types')}; dynamic quantisation needs constant weights.",
        )
    found = keep_in_float(
        config,
        first,
        all_int8,
        nodes,
        make,
        keep,
        judge,
        prepared,
        say,
        data.warnings,
        settings,
        calibration=data.calibration,
        calibration_judge=lambda: calibration_judge().on(settings.providers, settings.runtime),
    )
    return Tried(recipe, settings, judge, prepared, nodes, all_int8, found)
