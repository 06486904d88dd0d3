"""Comparing two executions of a model: metrics, tolerances, reports and localisation."""

from onnxgate.compare._compare import CompareConfig, compare, compare_runners
from onnxgate.compare._localize import localize
from onnxgate.compare._metrics import (
    DEFAULT_TOLERANCES,
    METRICS,
    RULE,
    Criterion,
    Figures,
    Tolerance,
    default_tolerance,
    figures,
    parse_metric,
    parse_tolerance,
)
from onnxgate.compare._report import (
    CompareReport,
    Divergence,
    OutputComparison,
    SampleResult,
    TensorError,
)

__all__ = [
    "DEFAULT_TOLERANCES",
    "METRICS",
    "RULE",
    "CompareConfig",
    "CompareReport",
    "Criterion",
    "Divergence",
    "Figures",
    "OutputComparison",
    "SampleResult",
    "TensorError",
    "Tolerance",
    "compare",
    "compare_runners",
    "default_tolerance",
    "figures",
    "localize",
    "parse_metric",
    "parse_tolerance",
]
