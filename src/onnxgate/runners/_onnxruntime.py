"""ONNX Runtime's own packages, registered with the runner factory (``_runtimes.py``).

The installed runtime runs in this process (``OrtRunner``); another release or package runs in
its isolated environment (``IsolatedOrtRunner``), and its timing worker there is a script that
needs no onnxgate (``_isolated_worker.py``). Every ONNX Runtime package opens this way, so
another package (``_openvino.py``) registers these same two functions with its own facts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from onnxgate.errors import InternalError
from onnxgate.model import LoadedModel
from onnxgate.runners._base import Runner
from onnxgate.runners._runtimes import RunExtras, Runtime, RuntimeSpec
from onnxgate.runners._tensorrt import TENSORRT


def _is_tensorrt(provider: str) -> bool:
    """Whether a provider as written (``tensorrt``, ``TensorrtExecutionProvider``) is TensorRT."""
    return provider.lower().removesuffix("executionprovider") == TENSORRT.lower().removesuffix(
        "executionprovider"
    )


def open_ort(model: LoadedModel, settings: Any, spec: RuntimeSpec, extras: RunExtras) -> Runner:
    """ONNX Runtime on ``model``: here when installed, else in the release's environment.

    Raises:
        InternalError: TensorRT is requested and ``extras`` carry no contract options.
    """
    from onnxgate.runners._ort import OrtRunner  # imports ONNX Runtime
    from onnxgate.settings import SessionSettings

    options = settings if settings is not None else SessionSettings()
    written = (p.partition(":")[0] for p in options.providers)  # ``tensorrt:k=v`` too
    if extras.tensorrt is None and any(_is_tensorrt(p) for p in written):
        raise InternalError(
            f"a runner for {model.path} on TensorRT was opened without the contract's TensorRT "
            "options.",
            hint="Open it with extras=onnxgate.contract_store.contract_extras(...).",
        )
    if spec.installed:
        return OrtRunner(
            model,
            options,
            name=extras.name,
            profile_prefix=extras.profile_prefix,
            save_optimized=extras.save_optimized,
            tensorrt=extras.tensorrt,
        )
    from onnxgate.runners._isolated import IsolatedOrtRunner

    return IsolatedOrtRunner(
        model,
        spec,
        extras.samples,
        options,
        progress=extras.progress,
        tensorrt=extras.tensorrt,
    )


def ort_worker(spec: RuntimeSpec, env: dict[str, str]) -> list[str]:
    """Onnxgate's timing worker here, or the one that needs no onnxgate in an environment."""
    if spec.installed:
        # The worker imports onnxgate (and a torch factory's module) as this process does,
        # even when this process found them through a sys.path edited at run time.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        return [sys.executable, "-m", "onnxgate.perf._worker"]
    # another runtime's environment holds no onnxgate: a worker that needs none
    from onnxgate.compat.runtime import ensure_env

    env.pop("PYTHONPATH", None)
    env["PYTHONNOUSERSITE"] = "1"
    script = Path(__file__).with_name("_isolated_worker.py")
    return [str(ensure_env(spec)), "-X", "faulthandler", str(script)]


ONNXRUNTIME = Runtime(
    "onnxruntime", ("onnxruntime", "onnxruntime-gpu"), open=open_ort, worker=ort_worker
)
PLATFORM_BUILDS = Runtime(
    "onnxruntime platform builds",
    ("onnxruntime-directml", "onnxruntime-qnn"),
    open=open_ort,
    worker=ort_worker,
)
