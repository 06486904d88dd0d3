"""Quantisation to int8 with an accuracy gate on real data, and a search for what to keep in float.

The quantised model must also not be slower than its float parent on this machine beyond noise
(timed against it in worker processes; ``allow_slower`` writes it anyway).

ONNX Runtime's ``onnxruntime.quantization`` is imported only when a model is quantised.
"""

from onnxgate.quantize._config import (
    DEFAULT_OP_TYPES,
    PRESET_HELP,
    PRESETS,
    TARGET_HELP,
    Preset,
    QuantizeConfig,
    Settings,
    cpu_features,
    detect_preset,
    resolve,
)
from onnxgate.quantize._quantize import quantize
from onnxgate.quantize._recipes import CPU_RECIPES, RECIPES, RECIPES_HELP, Recipe, choose_recipes
from onnxgate.quantize._render import render_text
from onnxgate.quantize._report import (
    Attempt,
    CandidateResult,
    DataInfo,
    GateFigure,
    Latency,
    NodeCost,
    NodeScore,
    OpGrowth,
    QuantizeReport,
    SpeedCost,
    SpeedGate,
)

__all__ = [
    "CPU_RECIPES",
    "DEFAULT_OP_TYPES",
    "PRESETS",
    "PRESET_HELP",
    "RECIPES",
    "RECIPES_HELP",
    "TARGET_HELP",
    "Attempt",
    "CandidateResult",
    "DataInfo",
    "GateFigure",
    "Latency",
    "NodeCost",
    "NodeScore",
    "OpGrowth",
    "Preset",
    "QuantizeConfig",
    "QuantizeReport",
    "Recipe",
    "Settings",
    "SpeedCost",
    "SpeedGate",
    "choose_recipes",
    "cpu_features",
    "detect_preset",
    "quantize",
    "render_text",
    "resolve",
]
