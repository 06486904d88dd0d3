"""The accuracy gate: a quantised model against its float parent, on held-apart data.

The float model runs once; its outputs are replayed for every candidate the search tries, and
each candidate is judged by ``compare_runners`` so that the figures mean what they mean in
``onnxgate compare`` (cosine over a sample's whole output, the lowest over samples; top-1 as the
share of rows whose argmax agrees). The metric follows the model: label accuracy when labels are
given, top-1 agreement for outputs that look like class scores, cosine for everything else
(embeddings, hidden states), or any ``compare`` rule per output.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import onnx

from onnxgate.compare import CompareConfig, Criterion, compare_runners, parse_metric
from onnxgate.contract import GoldenRunner
from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.model import Signature, load_model
from onnxgate.quantize._config import QuantizeConfig
from onnxgate.quantize._report import GateFigure
from onnxgate.runners import Inference, Runner

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

    def text(self, max_drop: float) -> str:
        """The rule as the report shows it."""
        if self.criterion is None:
            return f"accuracy drop<={max_drop:g}"
        return str(self.criterion)


def _producers(proto: onnx.ModelProto) -> dict[str, str]:
    return {o: n.op_type for n in proto.graph.node for o in n.output}


def looks_like_classes(name: str, shape: Sequence[Any] | None, producer: str | None) -> bool:
    """Class scores: [rows, classes] from a Softmax, or named like logits/probabilities."""
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
                f"--output {name!r} is not an output of the model; outputs: {', '.join(outputs)}."
            )
    chosen = list(config.outputs) or [n for n, o in outputs.items() if o.dtype in _FLOAT_TYPES]
    producers = _producers(proto)
    notices: list[str] = []
    explicit = dict(parse_metric(m) for m in config.metrics)
    for name in explicit:
        if name is not None and name not in outputs:
            raise ConfigError(f"--metric names output {name!r}; outputs: {', '.join(outputs)}.")
    judged = list(dict.fromkeys([*chosen, *(n for n in explicit if n is not None)]))
    if not judged:
        raise ConfigError(
            "the model has no float output for the gate to judge.",
            hint="Name outputs with --output and judge them with --metric.",
        )
    floor = 1.0 - config.max_drop
    rules: list[Rule] = []
    for name in judged:
        spec = outputs[name]
        if name in explicit or None in explicit:
            criterion = explicit.get(name, explicit.get(None))
            rules.append(Rule(name, criterion.metric, criterion))  # type: ignore[union-attr]
            continue
        metric = config.gate_metric
        if metric == "auto":
            classes = looks_like_classes(name, spec.shape, producers.get(name))
            metric = "accuracy" if classes and has_labels else "top1" if classes else "cosine"
        if metric == "accuracy":
            if not has_labels:
                raise ConfigError("--gate-metric accuracy needs --labels.")
            rules.append(Rule(name, "accuracy", None))
        else:
            rules.append(Rule(name, metric, Criterion(metric, ">=", floor)))
    if has_labels and not any(r.metric == "accuracy" for r in rules):
        raise ConfigError(
            "--labels was given but no output looks like class scores ([rows, classes] from a "
            "Softmax, or named logits/probabilities).",
            hint="Name the scores with --output NAME --gate-metric accuracy.",
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


def _ort_runner(path: Path) -> Runner:
    from onnxgate.runners import OrtRunner

    return OrtRunner(load_model(path))


def _argmax(value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind in "iu" and array.ndim == 1:
        return array.astype(np.int64)
    return np.argmax(array.reshape(-1, array.shape[-1]), axis=-1)


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
    ) -> None:
        self.signature = signature
        self.samples = list(samples)
        self.rules = list(rules)
        self.max_drop = max_drop
        self.labels = labels
        recorder = _Recorder(_ort_runner(float_model))
        with recorder:
            for sample in self.samples:
                recorder.infer(sample.feeds)
        self.reference = GoldenRunner(
            [(s, out) for s, out in zip(self.samples, recorder.outputs, strict=True)],
            f"float model {float_model.name}",
            signature,
        )
        self._float_outputs = recorder.outputs
        self.float_accuracy = {
            r.output: self._accuracy(recorder.outputs, r.output)
            for r in self.rules
            if r.criterion is None
        }

    def _accuracy(self, outputs: Sequence[Mapping[str, Any]], name: str) -> float:
        predicted = np.concatenate([_argmax(o[name]) for o in outputs])
        assert self.labels is not None
        if predicted.size != self.labels.size:
            raise ConfigError(
                f"output {name!r} gives {predicted.size} prediction(s) for {self.labels.size} "
                "label(s): one label per row is needed."
            )
        return float(np.mean(predicted == self.labels))

    def config(self) -> CompareConfig:
        """The compare rules of the judged outputs (accuracy is judged by top-1 agreement here)."""
        metrics: dict[str | None, Criterion] = {}
        for rule in self.rules:
            metrics[rule.output] = rule.criterion or Criterion("top1", ">=", 1.0 - self.max_drop)
        return CompareConfig(metrics=metrics)

    def judge(self, candidate: Path) -> tuple[list[GateFigure], float | None]:
        """The gate's figures for a quantised model, and its worst 1 - cosine over the outputs."""
        recorder = _Recorder(_ort_runner(candidate))
        report = compare_runners(
            recorder, self.reference, self.samples, signature=self.signature, config=self.config()
        )
        by_name = {o.name: o for o in report.outputs}
        figures: list[GateFigure] = []
        for rule in self.rules:
            found = by_name[rule.output]
            if rule.criterion is None:
                reference = self.float_accuracy[rule.output]
                value = self._accuracy(recorder.outputs, rule.output)
                drop = reference - value
                passed = drop <= self.max_drop + 1e-12 and found.nonfinite_mismatches == 0
                figures.append(
                    GateFigure(
                        output=rule.output,
                        metric="accuracy",
                        rule=rule.text(self.max_drop),
                        value=value,
                        reference=reference,
                        drop=drop,
                        passed=passed,
                        reason=None
                        if passed
                        else f"accuracy {value:.4f} vs {reference:.4f} in float: "
                        f"{drop * 100:.2f} points lost",
                    )
                )
                continue
            value = getattr(found, rule.metric, None)
            drop = 1.0 - value if value is not None and rule.metric in ("cosine", "top1") else None
            figures.append(
                GateFigure(
                    output=rule.output,
                    metric=rule.metric,
                    rule=rule.text(self.max_drop),
                    value=value,
                    drop=drop,
                    passed=found.passed,
                    reason=found.reason,
                )
            )
        cosines = [by_name[r.output].cosine for r in self.rules]
        known = [c for c in cosines if c is not None]
        worst = 1.0 - min(known) if known else None
        return figures, worst
