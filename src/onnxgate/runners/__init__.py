"""Everything that executes a model, behind one protocol.

The ONNX Runtime adapter is imported lazily: importing ``onnxgate.runners`` does not start ONNX
Runtime, and the PyTorch and scikit-learn adapters import their frameworks only when entered.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnxgate.runners import _js, _onnxruntime, _openvino
from onnxgate.runners._base import Inference, Runner, RunnerInfo, TensorTap
from onnxgate.runners._channel import Channel
from onnxgate.runners._protocol import UnknownRequest, private_stdout
from onnxgate.runners._protocol import serve as serve_requests
from onnxgate.runners._reference import ReferenceRunner, describe_nodes, outside_evaluator
from onnxgate.runners._reference_fixes import known_deviations, schema_version
from onnxgate.runners._refusal import refusal
from onnxgate.runners._sklearn import SklearnRunner, load_estimator
from onnxgate.runners._spec import SPEC_HELP, make_runner
from onnxgate.runners._tensorrt import PRECISIONS, WORKSPACE_MB, triton_parameters
from onnxgate.runners._tfenv import (
    DEFAULT_TOOLCHAIN,
    KERAS_SUFFIXES,
    TfToolchain,
    tf_env,
    tf_python,
)
from onnxgate.runners._torch import TorchRunner, import_root, load_entry
from onnxgate.runners.runtimes import (
    RunExtras,
    Runtime,
    RuntimeSpec,
    Script,
    isolated_build,
    open_runner,
    refuse_libraries,
    register,
    run_script,
    worker_command,
)

# Every runtime kind, once; the order is the one `runtime` errors list packages in.
register(_onnxruntime.ONNXRUNTIME, _openvino.OPENVINO, _onnxruntime.PLATFORM_BUILDS, _js.JAVASCRIPT)

if TYPE_CHECKING:
    from onnxgate.runners._isolated import IsolatedOrtRunner
    from onnxgate.runners._ort import (
        OrtFormatRunner,
        OrtRunner,
        available_providers,
        check_session,
        label,
        require_providers,
        resolved_providers,
        resolved_wire,
        runtime_version,
        with_tensorrt,
    )

__all__ = [
    "DEFAULT_TOOLCHAIN",
    "KERAS_SUFFIXES",
    "PRECISIONS",
    "SPEC_HELP",
    "WORKSPACE_MB",
    "Channel",
    "Inference",
    "IsolatedOrtRunner",
    "OrtFormatRunner",
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
    "TfToolchain",
    "TorchRunner",
    "UnknownRequest",
    "available_providers",
    "check_session",
    "describe_nodes",
    "import_root",
    "isolated_build",
    "known_deviations",
    "label",
    "load_entry",
    "load_estimator",
    "make_runner",
    "open_runner",
    "outside_evaluator",
    "private_stdout",
    "refusal",
    "refuse_libraries",
    "register",
    "require_providers",
    "resolved_providers",
    "resolved_wire",
    "run_script",
    "runtime_version",
    "schema_version",
    "serve_requests",
    "tf_env",
    "tf_python",
    "triton_parameters",
    "with_tensorrt",
    "worker_command",
]


_LAZY = {
    **dict.fromkeys(
        (
            "OrtFormatRunner",
            "OrtRunner",
            "available_providers",
            "check_session",
            "label",
            "require_providers",
            "resolved_providers",
            "resolved_wire",
            "runtime_version",
            "with_tensorrt",
        ),
        "_ort",
    ),
    "IsolatedOrtRunner": "_isolated",
}
"""Names imported on first use, by module: the ONNX Runtime adapter (importing it starts ONNX
Runtime) and the isolated runner (it imports ``compat.runtime``, which imports this package)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"onnxgate.runners.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'onnxgate.runners' has no attribute {name!r}")
