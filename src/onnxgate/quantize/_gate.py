"""The accuracy gate: a quantised model against its float parent, on held-apart data.

The float model runs once; its outputs are replayed for every candidate the search tries. The
gate's own figures are taken per row over every evaluation sample, so the verdict does not depend
on how the data is batched: cosine is computed per row (each output reshaped to [rows, -1]; an
output of one axis or none is one row per sample) and the budget holds the *mean* row cosine,
with the worst row reported beside it; top-1 is the share of all rows whose argmax agrees with
the float model's; accuracy is the share of all rows whose argmax is the true label.
(``onnxgate compare`` computes cosine over a sample's whole output and keeps the lowest over
samples: one bad row then weighs by how the rows were batched.) Rules given with ``--metric`` are
judged by ``compare_runners`` and mean what they mean in ``compare``. The metric follows the
model: label accuracy when labels are given, top-1 agreement for outputs that look like class
scores, cosine for everything else (embeddings, hidden states).
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import onnx

from onnxgate._words import setting
from onnxgate.compare import Drift, compare_runners, drift
from onnxgate.contract import GoldenRunner
from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.model import Signature, load_model
from onnxgate.quantize._config import QuantizeConfig
from onnxgate.quantize._report import GateFigure
from onnxgate.runners import Inference, Runner, RunnerInfo
from onnxgate.settings import Criterion, SessionSettings, Tolerances, parse_metric

log = logging.getLogger(__name__)

_CLASS_NAMES = re.compile(r"logit|prob|score|class|pred", re.IGNORECASE)
_FLOAT_TYPES = {"float32", "float16", "float64", "bfloat16"}


@dataclass(frozen=True)
class Rule:
    """How one output is judged."""

    output: str
    metric: str
    criterion: Criterion | None
    """None for label accuracy, which is judged against the labels, not the float model."""
    explicit: bool = False
    """Given with ``--metric``: judged by ``compare`` as ``compare`` judges it."""

    @property
    def builtin(self) -> bool:
        """Judged by the gate's own per-row figures (cosine or top-1 agreement)."""
        return not self.explicit and self.metric in ("cosine", "top1")

    def text(self, max_drop: float) -> str:
        """The rule as the report shows it."""
        if self.criterion is None:
            return f"accuracy drop<={max_drop:g}"
        if self.builtin and self.metric == "cosine":
            return f"mean cosine>={self.criterion.value:g}"
        if self.builtin:
            return f"top1>={self.criterion.value:g}"
        return str(self.criterion)


_RESHAPING = {"Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity", "Cast", "Transpose"}
"""Ops that move or reshape values without changing them: a Softmax seen through them counts."""


def _producers(proto: onnx.ModelProto) -> dict[str, str]:
    """Output name → the op type that makes it, looking through ops in ``_RESHAPING``."""
    made = {o: n for n in proto.graph.node for o in n.output}
    producers: dict[str, str] = {}
    for name in made:
        node = made[name]
        for _ in range(len(made)):  # a chain is at most as long as the graph
            source = node.input[0] if node.input else ""
            if node.op_type not in _RESHAPING or source not in made:
                break
            node = made[source]
        producers[name] = node.op_type
    return producers


def looks_like_classes(name: str, shape: Sequence[Any] | None, producer: str | None) -> bool:
    """The one rule for which outputs are a classifier's scores (docs/commands/quantize.md).

    A float output of shape ``[rows, classes]`` (more than one class), made by Softmax or
    LogSoftmax (seen through ops that only reshape, such as the Squeeze of a [N, C, 1, 1]
    head), or named like scores (logits, probabilities, scores, classes, predictions).
    """
    if shape is None or len(shape) != 2:
        return False
    if isinstance(shape[-1], int) and 0 < shape[-1] < 2:
        return False
    return producer in ("Softmax", "LogSoftmax") or bool(_CLASS_NAMES.search(name))


def gate_rules(
    proto: onnx.ModelProto, signature: Signature, config: QuantizeConfig, has_labels: bool
) -> tuple[list[Rule], list[str]]:
    """The rule per judged output, and notices about the choice.

    Raises:
        ConfigError: unknown outputs, or nothing the gate could judge.
    """
    outputs = {o.name: o for o in signature.outputs}
    for name in config.outputs:
        if name not in outputs:
            raise ConfigError(
                f"{setting('outputs')} names {name!r}, which is not an output of the model; "
                f"outputs: {', '.join(outputs)}."
            )
    chosen = list(config.outputs) or [n for n, o in outputs.items() if o.dtype in _FLOAT_TYPES]
    producers = _producers(proto)
    notices: list[str] = []
    explicit = dict(parse_metric(m, path="metrics") for m in config.metrics)
    for name in explicit:
        if name is not None and name not in outputs:
            raise ConfigError(
                f"{setting('metrics')} names output {name!r}; outputs: {', '.join(outputs)}."
            )
    judged = list(dict.fromkeys([*chosen, *(n for n in explicit if n is not None)]))
    if not judged:
        raise ConfigError(
            "the model has no float output for the gate to judge.",
            hint=f"Name outputs with {setting('outputs')} and judge them with "
            f"{setting('metrics')}.",
        )
    floor = 1.0 - config.max_drop
    rules: list[Rule] = []
    for name in judged:
        spec = outputs[name]
        if name in explicit or None in explicit:
            criterion = explicit.get(name, explicit.get(None))
            rules.append(Rule(name, criterion.metric, criterion, explicit=True))  # type: ignore[union-attr]
            continue
        metric = config.gate_metric
        if metric == "auto":
            classes = looks_like_classes(name, spec.shape, producers.get(name))
            metric = "accuracy" if classes and has_labels else "top1" if classes else "cosine"
        if metric == "accuracy":
            if not has_labels:
                raise ConfigError(
                    f"{setting('gate_metric', 'accuracy')} needs {setting('labels')}."
                )
            rules.append(Rule(name, "accuracy", None))
        else:
            rules.append(Rule(name, metric, Criterion(metric, ">=", floor)))
    if has_labels and not any(r.metric == "accuracy" for r in rules):
        raise ConfigError(
            f"{setting('labels')} was given but no output looks like class scores ([rows, "
            "classes] from a Softmax, or named logits/probabilities).",
            hint=f"Name the scores with {setting('outputs')} and judge them with "
            f"{setting('gate_metric', 'accuracy')}.",
        )
    notices.append("gate: " + "; ".join(f"{r.output} by {r.text(config.max_drop)}" for r in rules))
    return rules, notices


class _Recorder:
    """A runner that keeps what the runner it wraps returned, in call order."""

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.name = inner.name
        self.outputs: list[dict[str, Any]] = []

    def __enter__(self) -> Self:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)

    def input_specs(self) -> Signature:
        return self.inner.input_specs()

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        result = self.inner.infer(feeds)
        self.outputs.append(result.outputs)
        return result

    def info(self) -> RunnerInfo:
        """The wrapped runner's ``info()`` (what ran, with its settings): compare reports it."""
        return self.inner.info()


def _ort_runner(path: Path, session: SessionSettings, runtime: str | None = None) -> Runner:
    from onnxgate.runners import open_runner

    return open_runner(load_model(path), session, runtime=runtime or "installed")


def _argmax(value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind in "iu" and array.ndim == 1:
        return array.astype(np.int64)
    return np.argmax(array.reshape(-1, array.shape[-1]), axis=-1)


@dataclass(frozen=True)
class RowFigures:
    """The gate's figures of one output over all rows of all samples."""

    rows: int = 0
    cosine: float | None = None
    """The mean row cosine: what the budget holds."""
    worst: float | None = None
    """The lowest row cosine."""
    worst_row: int | None = None
    """Its index, counting rows across samples in order."""
    top1: float | None = None
    """The share of all rows whose argmax agrees with the float model's."""
    nonfinite: int = 0
    """NaN or infinite values on one side not matched on the other."""
    problem: str | None = None
    """Why the output cannot be compared (shape or dtype), when it cannot."""


def _rows(array: np.ndarray) -> np.ndarray:
    """[rows, -1]: axis 0 is the row axis; an output of one axis or none is one row."""
    return array.reshape(array.shape[0], -1) if array.ndim >= 2 else array.reshape(1, -1)


def row_figures(
    reference: Sequence[Mapping[str, Any]], candidate: Sequence[Mapping[str, Any]], name: str
) -> RowFigures:
    """Per-row cosine and top-1 agreement of one output, over every sample.

    The figures are the same however the rows are split into samples.
    """
    cosines: list[np.ndarray] = []
    agree: list[np.ndarray] = []
    nonfinite = 0
    for ref_out, cand_out in zip(reference, candidate, strict=True):
        b, a = np.asarray(ref_out[name]), np.asarray(cand_out.get(name))
        if a.shape != b.shape:
            return RowFigures(problem=f"shape {list(a.shape)} vs the float model's {list(b.shape)}")
        if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
            return RowFigures(problem=f"dtype {a.dtype} vs {b.dtype}: not numbers")
        if a.size == 0:
            continue
        a64, b64 = _rows(a.astype(np.float64)), _rows(b.astype(np.float64))
        finite = np.isfinite(a64) & np.isfinite(b64)
        same = (np.isnan(a64) & np.isnan(b64)) | (np.isinf(a64) & (a64 == b64))
        nonfinite += int((~finite & ~same).sum())
        fa, fb = np.where(finite, a64, 0.0), np.where(finite, b64, 0.0)
        norms = np.linalg.norm(fa, axis=1) * np.linalg.norm(fb, axis=1)
        both_zero = ~fa.any(axis=1) & ~fb.any(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            row = np.where(norms > 0, np.sum(fa * fb, axis=1) / norms, np.where(both_zero, 1, 0))
        cosines.append(np.clip(row, -1.0, 1.0))
        if a.ndim >= 1 and a.shape[-1] >= 2:
            agree.append(_argmax(a) == _argmax(b))
    if not cosines:
        return RowFigures(nonfinite=nonfinite)
    every = np.concatenate(cosines)
    worst_row = int(np.argmin(every))
    return RowFigures(
        rows=int(every.size),
        cosine=float(np.mean(every)),
        worst=float(every[worst_row]),
        worst_row=worst_row,
        top1=float(np.mean(np.concatenate(agree))) if len(agree) == len(cosines) else None,
        nonfinite=nonfinite,
    )


class Judge:
    """Runs the float model once, then judges quantised candidates against it."""

    def __init__(
        self,
        float_model: Path,
        signature: Signature,
        samples: Sequence[Sample],
        rules: Sequence[Rule],
        *,
        max_drop: float,
        labels: np.ndarray | None = None,
        session: SessionSettings | None = None,
    ) -> None:
        self.float_model = float_model
        self.session = session or SessionSettings()
        """The sessions' settings (their custom operator libraries), every model's alike."""
        self.runtime: str | None = None
        """The runtime candidates run on (``on``); the float model runs on the installed one."""
        self.signature = signature
        self.samples = list(samples)
        self.rules = list(rules)
        self.max_drop = max_drop
        self.labels = labels
        recorder = _Recorder(_ort_runner(float_model, self.session))
        with recorder:
            for sample in self.samples:
                recorder.infer(sample.feeds)
        self.reference = GoldenRunner(
            [(s, out) for s, out in zip(self.samples, recorder.outputs, strict=True)],
            f"float model {float_model.name}",
            signature,
        )
        self._float_outputs = recorder.outputs
        self.float_accuracy = (
            {
                r.output: self._accuracy(recorder.outputs, r.output)
                for r in self.rules
                if r.criterion is None
            }
            if labels is not None
            else {}
        )

    def on(self, providers: Sequence[str], runtime: str | None) -> Judge:
        """This judge with candidates run on ``providers`` of ``runtime`` (None: installed).

        The float model's outputs stay the reference: a candidate is judged where it will run
        against the float model where it was made.
        """
        if not providers and runtime is None:
            return self
        other = copy.copy(self)
        other.session = self.session.model_copy(update={"providers": tuple(providers)})
        other.runtime = runtime
        return other

    def _accuracy(self, outputs: Sequence[Mapping[str, Any]], name: str) -> float:
        predicted = np.concatenate([_argmax(o[name]) for o in outputs])
        assert self.labels is not None
        if predicted.size != self.labels.size:
            raise ConfigError(
                f"output {name!r} gives {predicted.size} prediction(s) for {self.labels.size} "
                "label(s): one label per row is needed."
            )
        return float(np.mean(predicted == self.labels))

    def compare_config(self) -> Tolerances:
        """The gate's rules in ``compare`` terms (accuracy becomes top-1 agreement)."""
        metrics: dict[str | None, Criterion] = {}
        for rule in self.rules:
            metrics[rule.output] = rule.criterion or Criterion("top1", ">=", 1.0 - self.max_drop)
        return Tolerances.from_criteria(metrics)

    def _run(self, candidate: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The candidate's outputs per sample, and compare's verdicts on ``--metric`` rules."""
        recorder = _Recorder(_ort_runner(candidate, self.session, self.runtime))
        explicit = {r.output: r.criterion for r in self.rules if r.explicit and r.criterion}
        if not explicit:
            with recorder:
                for sample in self.samples:
                    recorder.infer(sample.feeds)
            return recorder.outputs, {}
        report = compare_runners(
            recorder,
            self.reference,
            self.samples,
            signature=self.signature,
            tolerances=Tolerances.from_criteria(explicit),  # type: ignore[arg-type]
        )
        return recorder.outputs, {o.name: o for o in report.outputs}

    def _error(self, found: Mapping[str, RowFigures]) -> float | None:
        known = [1.0 - f.cosine for f in found.values() if f.cosine is not None]
        return max(known) if known else None

    def error(self, candidate: Path) -> float | None:
        """1 - the mean row cosine of the worst gated output (the search's measure of error)."""
        outputs, _ = self._run(candidate)
        return self._error(
            {r.output: row_figures(self._float_outputs, outputs, r.output) for r in self.rules}
        )

    def judge(self, candidate: Path) -> tuple[list[GateFigure], float | None]:
        """The gate's figures for a quantised model, and its error (see ``error``)."""
        outputs, compared = self._run(candidate)
        rows = {r.output: row_figures(self._float_outputs, outputs, r.output) for r in self.rules}
        figures = [
            self._figure(rule, rows[rule.output], outputs, compared).model_copy(
                update={"drift": self._drift(outputs, rule.output)}
            )
            for rule in self.rules
        ]
        return figures, self._error(rows)

    def _drift(self, outputs: Sequence[Mapping[str, Any]], name: str) -> Drift | None:
        """How the int8 model's error on one output spreads, as ``compare`` measures it."""
        return drift(
            (cand.get(name), ref[name])
            for ref, cand in zip(self._float_outputs, outputs, strict=True)
            if cand.get(name) is not None
        )

    def _figure(
        self,
        rule: Rule,
        found: RowFigures,
        outputs: Sequence[Mapping[str, Any]],
        compared: Mapping[str, Any],
    ) -> GateFigure:
        text = rule.text(self.max_drop)
        worst = {"worst": found.worst, "worst_row": found.worst_row, "rows": found.rows or None}
        trouble = found.problem or (
            f"{found.nonfinite} NaN or infinite value(s) not in the float model's output"
            if found.nonfinite
            else None
        )
        if rule.explicit:
            comparison = compared[rule.output]
            value = getattr(comparison, rule.metric, None)
            return GateFigure(
                output=rule.output,
                metric=rule.metric,
                rule=text,
                value=value,
                drop=1.0 - value
                if value is not None and rule.metric in ("cosine", "top1")
                else None,
                passed=comparison.passed,
                reason=comparison.reason,
                **worst,
            )
        if rule.criterion is None:
            reference = self.float_accuracy[rule.output]
            value = self._accuracy(outputs, rule.output)
            drop = reference - value
            passed = drop <= self.max_drop + 1e-12 and trouble is None
            reason = trouble or (
                None
                if passed
                else f"accuracy {value:.4f} vs {reference:.4f} in float: "
                f"{drop * 100:.2f} points lost"
            )
            return GateFigure(
                output=rule.output,
                metric="accuracy",
                rule=text,
                value=value,
                reference=reference,
                drop=drop,
                passed=passed,
                reason=reason,
                **worst,
            )
        value = found.cosine if rule.metric == "cosine" else found.top1
        passed = trouble is None and rule.criterion.holds(value)
        what = "mean row cosine" if rule.metric == "cosine" else "top-1 agreement over all rows"
        reason = trouble or (
            None if passed else f"{what} = {value} does not meet >= {rule.criterion.value:g}"
        )
        return GateFigure(
            output=rule.output,
            metric=rule.metric,
            rule=text,
            value=value,
            drop=1.0 - value if value is not None else None,
            passed=passed,
            reason=reason,
            **worst,
        )
