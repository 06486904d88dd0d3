"""The main job: run a ``gate.toml`` end to end, write one report, register what passed."""

from onnxgate.gate._config import (
    CONFIG_VERSION,
    GateConfig,
    load_config,
)
from onnxgate.gate._github import render_github
from onnxgate.gate._init import starter_config, write_starter
from onnxgate.gate._pipeline import environment, exit_code, run_gate, write_outputs
from onnxgate.gate._publish import publish_version
from onnxgate.gate._records import NEEDS, ORDER
from onnxgate.gate._render import render_step, render_text
from onnxgate.gate._report import (
    GATE_REPORT_FORMAT,
    Artefact,
    Environment,
    GateReport,
    Registration,
    StepResult,
)
from onnxgate.gate._shadow_html import render_shadow_html, write_shadow_html
from onnxgate.settings import config_hash

__all__ = [
    "CONFIG_VERSION",
    "GATE_REPORT_FORMAT",
    "NEEDS",
    "ORDER",
    "Artefact",
    "Environment",
    "GateConfig",
    "GateReport",
    "Registration",
    "StepResult",
    "config_hash",
    "environment",
    "exit_code",
    "load_config",
    "publish_version",
    "render_github",
    "render_shadow_html",
    "render_step",
    "render_text",
    "run_gate",
    "starter_config",
    "write_outputs",
    "write_shadow_html",
    "write_starter",
]
