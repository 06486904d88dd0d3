"""Static checks: rules -> findings -> a report with a verdict."""

from onnxgate.check._check import CheckConfig, check_model, resolve_providers
from onnxgate.check._render import render_text
from onnxgate.check._report import RULES, CheckReport, Finding, Rule, Severity
from onnxgate.check._runtime_rules import RESOLVED_AT_LOAD

__all__ = [
    "RESOLVED_AT_LOAD",
    "RULES",
    "CheckConfig",
    "CheckReport",
    "Finding",
    "Rule",
    "Severity",
    "check_model",
    "render_text",
    "resolve_providers",
]
