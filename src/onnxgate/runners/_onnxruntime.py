"""ONNX Runtime's own packages, registered with the runner factory (``runtimes.py``).

The installed runtime runs in this process (``OrtRunner``); another release or package runs in
its isolated environment (``IsolatedOrtRunner``), and its timing worker there is a script that
needs no onnxgate (``_isolated_worker.py``); a script of onnxgate's (the placement audit) is
called here, or run by that environment's Python. Every ONNX Runtime package runs this way, so
another package (``_openvino.py``) registers these same three functions with its own facts.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.errors import InternalError, RunFailed
from onnxgate.model import LoadedModel
from onnxgate.runners._base import Runner
from onnxgate.runners._tensorrt import TENSORRT
from onnxgate.runners.runtimes import RunExtras, Runtime, RuntimeSpec, Script


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

    if extras.save_optimized is not None or extras.profile_prefix is not None:
        raise InternalError(
            f"save_optimized and profile_prefix are for the installed ONNX Runtime; {spec} "
            "runs in its own environment.",
            hint="Refuse the combination where the user gave it, as compare does.",
        )
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


def ort_script(
    script: Script,
    spec: RuntimeSpec,
    request: dict[str, Any],
    arrays: Mapping[str, Any] | None,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """The script's function called here, or its file run by the release's environment.

    Raises:
        RunFailed: the script died in the environment without an answer (the runtime crashed).
        RuntimeEnvError: the environment cannot be built, or the script cannot start or timed out.
    """
    if spec.installed:
        return getattr(importlib.import_module(script.module), script.function)(request, arrays)
    from onnxgate.compat.runtime import ensure_env, run_json_script

    python = ensure_env(spec, progress=progress)
    found = importlib.util.find_spec(script.module)
    if found is None or found.origin is None:
        raise InternalError(f"{script.what}: module {script.module} has no file to run.")
    with tempfile.TemporaryDirectory(prefix=script.prefix) as tmp:
        folder = Path(tmp)
        if arrays is not None:
            np.savez(folder / "feeds.npz", **arrays)
            request = request | {"feeds": str(folder / "feeds.npz")}
        return run_json_script(
            python, Path(found.origin), folder, request, what=script.what, crash=RunFailed
        )


ONNXRUNTIME = Runtime(
    "onnxruntime",
    ("onnxruntime", "onnxruntime-gpu"),
    open=open_ort,
    worker=ort_worker,
    script=ort_script,
)
PLATFORM_BUILDS = Runtime(
    "onnxruntime platform builds",
    ("onnxruntime-directml", "onnxruntime-qnn"),
    open=open_ort,
    worker=ort_worker,
    script=ort_script,
)
