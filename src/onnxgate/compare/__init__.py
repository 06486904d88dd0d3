"""Comparing two executions of a model: metrics, tolerances, reports and localisation."""

from onnxgate.compare._compare import CompareConfig, compare, compare_runners
from onnxgate.compare._localize import localize
from onnxgate.compare._metrics import RULE, Drift, Figures, drift, figures
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
    "compare",
    "compare_runners",
    "default_tolerance",
    "drift",
    "figures",
    "localize",
    "parse_metric",
    "parse_tolerance",
]
