"""Comparing two executions of a model: metrics, tolerances, reports and localisation."""

from onnxgate.compare._compare import (
    CompareConfig,
    compare,
    compare_runners,
    declared_dtype,
    judge_output,
)
from onnxgate.compare._localize import localize
from onnxgate.compare._metrics import RULE, Drift, Figures, as_array, drift, figures, reorder
from onnxgate.compare._render import render_text
from onnxgate.compare._report import (
    CompareReport,
    Divergence,
    OutputComparison,
    SampleResult,
    TensorError,
)
from onnxgate.settings import (
    DEFAULT_TOLERANCES,
    METRICS,
    Criterion,
    Tolerance,
    Tolerances,
    default_tolerance,
    parse_metric,
    parse_tolerance,
)

__all__ = [
    "DEFAULT_TOLERANCES",
    "METRICS",
    "RULE",
    "CompareConfig",
    "CompareReport",
    "Criterion",
    "Divergence",
    "Drift",
    "Figures",
    "OutputComparison",
    "SampleResult",
    "TensorError",
    "Tolerance",
    "Tolerances",
    "as_array",
    "compare",
    "compare_runners",
    "declared_dtype",
    "default_tolerance",
    "drift",
    "figures",
    "judge_output",
    "localize",
    "parse_metric",
    "parse_tolerance",
    "render_text",
    "reorder",
]
