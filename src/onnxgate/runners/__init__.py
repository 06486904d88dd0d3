"""Everything that executes a model, behind one protocol.

The ONNX Runtime adapter is imported lazily: importing ``onnxgate.runners`` does not start ONNX
Runtime, and the PyTorch and scikit-learn adapters import their frameworks only when entered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxgate.runners import _onnxruntime, _openvino
from onnxgate.runners._base import Inference, Runner, RunnerInfo, TensorTap
from onnxgate.runners._reference import ReferenceRunner
from onnxgate.runners._runtimes import (
    RunExtras,
    Runtime,
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
register(_onnxruntime.ONNXRUNTIME, _openvino.OPENVINO, _onnxruntime.PLATFORM_BUILDS)

if TYPE_CHECKING:
    from onnxgate.runners._ort import OrtRunner

__all__ = [
    "SPEC_HELP",
    "Inference",
    "OrtRunner",
    "ReferenceRunner",
    "RunExtras",
    "Runner",
    "RunnerInfo",
    "Runtime",
    "RuntimeSpec",
    "Script",
    "SklearnRunner",
    "TensorTap",
    "TorchRunner",
    "load_entry",
    "load_estimator",
    "make_runner",
    "open_runner",
    "register",
    "run_script",
    "worker_command",
]


def __getattr__(name: str) -> Any:
    if name == "OrtRunner":
        from onnxgate.runners import _ort

        return _ort.OrtRunner
    raise AttributeError(f"module 'onnxgate.runners' has no attribute {name!r}")
