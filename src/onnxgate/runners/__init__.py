"""Everything that executes a model, behind one protocol.

The ONNX Runtime adapter is imported lazily: importing ``onnxgate.runners`` does not start ONNX
Runtime, and the PyTorch and scikit-learn adapters import their frameworks only when entered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxgate.runners._base import Inference, Runner, RunnerInfo, TensorTap
from onnxgate.runners._onnxruntime import ONNXRUNTIME, PLATFORM_BUILDS
from onnxgate.runners._openvino import OPENVINO
from onnxgate.runners._reference import ReferenceRunner
from onnxgate.runners._runtimes import (
    RunExtras,
    RuntimeSpec,
    Script,
    open_runner,
    register,
    run_script,
    worker_command,
)
from onnxgate.runners._sklearn import SklearnRunner, load_estimator
from onnxgate.runners._spec import SPEC_HELP, make_runner
from onnxgate.runners._torch import TorchRunner, load_entry

# Every runtime kind, once; the order is the one `runtime` errors list packages in.
register(ONNXRUNTIME, OPENVINO, PLATFORM_BUILDS)

if TYPE_CHECKING:
    from onnxgate.runners._ort import OrtOptions, OrtRunner

__all__ = [
    "SPEC_HELP",
    "Inference",
    "OrtOptions",
    "OrtRunner",
    "ReferenceRunner",
    "Runner",
    "RunExtras",
    "RunnerInfo",
    "RuntimeSpec",
    "Script",
    "SklearnRunner",
    "TensorTap",
    "TorchRunner",
    "load_entry",
    "load_estimator",
    "make_runner",
    "open_runner",
    "run_script",
    "worker_command",
]


def __getattr__(name: str) -> Any:
    if name in ("OrtOptions", "OrtRunner"):
        from onnxgate.runners import _ort

        return getattr(_ort, name)
    raise AttributeError(f"module 'onnxgate.runners' has no attribute {name!r}")
