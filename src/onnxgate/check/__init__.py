"""Static checks: rules -> findings -> a report with a verdict."""

from onnxgate.check._check import check_model, resolve_providers
from onnxgate.check._report import RULES, CheckReport, Finding, Rule, Severity

__all__ = [
    "RULES",
    "CheckReport",
    "Finding",
    "Rule",
    "Severity",
    "check_model",
    "resolve_providers",
]
