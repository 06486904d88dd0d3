"""TensorRT options from what a model's contract proves: one function for every place that runs it.

``tensorrt_options`` turns the contract into ONNX Runtime's TensorRT provider options: shape
profiles (``trt_profile_min/opt/max_shapes``) from the proven ranges of the symbolic dims, the
engine and timing caches at a stated path, the workspace and the precision. ``deploy triton``
writes them into the model's config; ``contract_tensorrt`` reads them for a model from the
contract beside it, and steps pass it to every runner they open through ``contract_extras``
(``onnxgate.runners.open_runner`` refuses a TensorRT runner opened without it); the runner adds
them to every TensorRT session (``runners._ort.with_tensorrt``; the user's options win).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxgate._fs import cache_dir
from onnxgate.contract_store._schema import Contract
from onnxgate.contract_store._store import SIDECAR
from onnxgate.errors import GateError
from onnxgate.runners import PRECISIONS, WORKSPACE_MB, RunExtras


def default_cache(contract: Contract) -> str:
    """Where engines of this model are cached on this machine: by the model's sha256."""
    return str(cache_dir() / "tensorrt" / contract.identity.model.sha256[:16])


def tensorrt_options(
    contract: Contract,
    *,
    precision: str = "FP32",
    workspace_mb: int = WORKSPACE_MB,
    engine_cache: str | None = None,
    batch_dim: str | None = None,
    max_batch: int | None = None,
    notes: list[str] | None = None,
) -> dict[str, str]:
    """ONNX Runtime TensorRT provider options from what the contract proves.

    Profiles: min and max of each symbolic dim's proven range (``batch_dim`` up to ``max_batch``
    when given), opt at the largest, so one engine covers every proven shape. A symbolic or
    unnamed input dim without a proven range means no profile (TensorRT then builds per shape),
    said in ``notes``.

    Args:
        contract: the model's contract.
        precision: FP32 (what the gate judged), FP16 or INT8.
        workspace_mb: the builder's workspace.
        engine_cache: the engine and timing cache folder; default one per model in onnxgate's
            cache.
        batch_dim: the batch dim, when a server batches along it.
        max_batch: the largest batch the server forms.
        notes: where to say what was left out.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    signature = contract.signature
    ranges: dict[str, tuple[int, int]] = {}
    for name, bound in signature.dims.items():
        if bound.min is None or bound.max is None:
            continue
        low, high = bound.min, bound.max
        if name == batch_dim and max_batch:
            low, high = min(low, max_batch), max_batch
        ranges[name] = (low, high)
    cache = engine_cache or default_cache(contract)
    options = {
        "trt_max_workspace_size": str(workspace_mb << 20),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": cache,
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": cache,
    }
    if precision == "FP16":
        options["trt_fp16_enable"] = "1"
    elif precision == "INT8":
        options["trt_int8_enable"] = "1"
    dims = [d for spec in signature.inputs for d in spec.shape or ()]
    free = sorted({str(d) for d in dims if not isinstance(d, int) and str(d) not in ranges})
    if free:
        if notes is not None:
            notes.append(
                f"no TensorRT shape profile: {', '.join(free)} has no proven range (prove one "
                "with `onnxgate contract init --dim`); TensorRT builds an engine per new shape"
            )
    elif any(not isinstance(d, int) for d in dims):
        for key, pick in (("min", 0), ("opt", 1), ("max", 1)):
            options[f"trt_profile_{key}_shapes"] = ",".join(
                f"{spec.name}:"
                + "x".join(
                    str(d if isinstance(d, int) else ranges[str(d)][pick]) for d in spec.shape or ()
                )
                for spec in signature.inputs
            )
    return options


def contract_tensorrt(model: Path) -> dict[str, str] | None:
    """The TensorRT options of the contract beside ``model``; None without a readable one.

    What steps pass to the runners they open as ``tensorrt``: the runner asks only for a session
    with TensorRT among its providers.
    """
    try:
        if not SIDECAR.exists(model):
            return None
        contract = SIDECAR.read(model)
    except GateError:  # a damaged contract is verify's to report, not the session's
        return None
    return tensorrt_options(contract)


def contract_extras(**given: Any) -> RunExtras:
    """The per-run extras of a runner opened for a model that may have a contract.

    The one way steps pass ``contract_tensorrt`` to ``onnxgate.runners.open_runner`` (which
    refuses a TensorRT runner opened without it); ``given`` are the other ``RunExtras`` fields.
    """
    return RunExtras(tensorrt=contract_tensorrt, **given)
