"""Quantisation to int8 with an accuracy gate on real data, and a search for what to keep in float.

ONNX Runtime's ``onnxruntime.quantization`` is imported only when a model is quantised.
"""

from onnxgate.quantize._config import (
    DEFAULT_OP_TYPES,
    OPTION_NAMES,
    PRESET_HELP,
    PRESETS,
    Preset,
    QuantizeConfig,
    Settings,
    cpu_features,
    detect_preset,
    resolve,
)
from onnxgate.quantize._quantize import quantize
from onnxgate.quantize._report import (
    Attempt,
    DataInfo,
    GateFigure,
    Latency,
    NodeScore,
    QuantizeReport,
)

__all__ = [
    "DEFAULT_OP_TYPES",
    "OPTION_NAMES",
    "PRESETS",
    "PRESET_HELP",
    "Attempt",
    "DataInfo",
    "GateFigure",
    "Latency",
    "NodeScore",
    "Preset",
    "QuantizeConfig",
    "QuantizeReport",
    "Settings",
    "cpu_features",
    "detect_preset",
    "quantize",
    "resolve",
]
