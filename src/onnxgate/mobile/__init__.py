"""The mobile and edge target: ONNX Runtime's ORT format, proven on the goldens, held to budgets.

``mobile_target`` writes the ``.ort`` file and ``required_operators.config`` with ONNX Runtime's
own converter, runs the contract's golden samples on the ``.ort`` file under the contract's rules,
and measures the sizes, the peak resident memory and the single-thread p50 an edge budget holds.
The gate's ``[steps.mobile]`` and ``deploy mobile`` both call it.
"""

from onnxgate.mobile._convert import convert, place_converted, required_operators
from onnxgate.mobile._render import render_mobile
from onnxgate.mobile._target import (
    MobileConfig,
    MobileReport,
    judge_budgets,
    mobile_target,
)

__all__ = [
    "MobileConfig",
    "MobileReport",
    "convert",
    "judge_budgets",
    "mobile_target",
    "place_converted",
    "render_mobile",
    "required_operators",
]
