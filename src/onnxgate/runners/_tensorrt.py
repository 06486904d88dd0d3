"""TensorRT options a caller derives for a model, applied under the user's in every session.

What a model's contract proves becomes ONNX Runtime's TensorRT provider options (shape profiles
from the proven ranges, engine and timing caches, workspace, precision:
``onnxgate.contract_store.tensorrt_options``). Runners do not read contracts: whoever opens a
runner passes ``tensorrt``, a function of the model's path that gives those options
(``onnxgate.contract_store.contract_tensorrt``), and ``_ort.with_tensorrt`` adds them under
the options the user gave (which win) when TensorRT is among the providers. So ``bench``,
``verify``, ``compare`` and ``serve`` run TensorRT as ``deploy triton`` configures it:
``triton_parameters`` renames the same options to the keys the Triton ONNX Runtime backend reads
(``precision_mode``, ``max_workspace_size_bytes``, and the ``trt_*`` keys it passes through).
What was gated is what is deployed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

TENSORRT = "TensorrtExecutionProvider"
PRECISIONS = ("FP32", "FP16", "INT8")
WORKSPACE_MB = 2048

TensorrtFor = Callable[[Path], Mapping[str, str] | None]
"""The TensorRT provider options a model's own record gives it, by the model's path (None: none)."""


def triton_parameters(options: dict[str, str]) -> dict[str, str]:
    """The same options as the Triton ONNX Runtime backend's TensorRT accelerator parameters."""
    parameters = {}
    precision = "FP32"
    for key, value in options.items():
        if key == "trt_fp16_enable" and value == "1":
            precision = "FP16"
        elif key == "trt_int8_enable" and value == "1":
            precision = "INT8"
        elif key == "trt_max_workspace_size":
            parameters["max_workspace_size_bytes"] = value
        else:  # the backend passes trt_* keys through to the provider
            parameters[key] = value
    return {"precision_mode": precision, **parameters}
