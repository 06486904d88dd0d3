"""``deploy check``'s warm-up rules (DPL020-DPL024).

Each ``model_warmup`` against the config, the contract's proven ranges and the data files in the
model's ``warmup`` folder: Triton runs them before it calls the model ready, and fails the load
when one fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.deploy._findings import Findings


def check_warmups(
    config: Any,
    model_dir: Path,
    where: str,
    batched: bool,
    bounds: dict[str, Any],
    model_inputs: Sequence[Any],
    found: Findings,
) -> None:
    """Every warm-up: its batch size, its inputs (all the config's, only those), and each input."""
    from onnxgate.deploy._proto import DATATYPES, model_config_pb2

    if not config.model_warmup:
        found.add(
            "DPL024", "warning", where,
            "no model_warmup: Triton reports the model ready before it has run once",
            "onnxgate deploy triton writes one per golden sample.",
        )  # fmt: skip
        return
    inputs = {s.name: s for s in config.input}
    model_specs = {s.name: s for s in model_inputs}
    sizes = {  # bytes per element of each fixed-width Triton datatype
        model_config_pb2.DataType.Value(name): 2
        if dtype == "bfloat16"
        else np.dtype(dtype).itemsize
        for dtype, name in DATATYPES.items()
        if dtype != "string"
    }
    for warm in config.model_warmup:
        at = f"{where} warm-up {warm.name}"
        if batched and warm.batch_size > config.max_batch_size:
            found.add(
                "DPL022", "error", at,
                f"batch_size {warm.batch_size} beyond max_batch_size {config.max_batch_size}",
            )  # fmt: skip
        if not batched and warm.batch_size > 1:
            found.add(
                "DPL022", "error", at, f"batch_size {warm.batch_size} on a model without batching"
            )
        for name in inputs:
            if name not in warm.inputs:
                found.add(
                    "DPL020",
                    "error",
                    at,
                    f"misses input {name!r}: Triton fails the warm-up, and the load",
                )
        for name, data in warm.inputs.items():
            spec = inputs.get(name)
            if spec is None:
                found.add("DPL020", "error", at, f"input {name!r} is not in the config")
                continue
            dims = _check_dims(at, name, data, spec, found)
            if dims is None:
                continue
            model_spec = model_specs.get(name)
            if model_spec is not None and model_spec.shape is not None and bounds:
                _check_proven(at, name, warm, spec, dims, model_spec, batched, bounds, found)
            if data.WhichOneof("input_data_type") == "input_data_file":
                _check_file(at, name, data, dims, model_dir, sizes, found)


def _check_dims(at: str, name: str, data: Any, spec: Any, found: Findings) -> list[int] | None:
    """DPL021: the warm-up input's datatype and dims against the config's; None: dims unusable."""
    from onnxgate.deploy._proto import datatype_name

    if data.data_type != spec.data_type:
        found.add(
            "DPL021", "error", at,
            f"{name}: data_type {datatype_name(data.data_type)}, the config's is "
            f"{datatype_name(spec.data_type)}",
        )  # fmt: skip
    dims = list(data.dims)
    if any(d < 1 for d in dims):
        found.add(
            "DPL021", "error", at,
            f"{name}: dims {dims}: a warm-up's dims are sizes, never -1 or 0",
        )  # fmt: skip
        return None
    if len(dims) != len(spec.dims) or any(
        c not in (-1, d) for c, d in zip(spec.dims, dims, strict=False)
    ):
        found.add(
            "DPL021", "error", at,
            f"{name}: dims {dims} do not fit the config's {list(spec.dims)}",
        )  # fmt: skip
        return None
    return dims


def _check_proven(
    at: str,
    name: str,
    warm: Any,
    spec: Any,
    dims: list[int],
    model_spec: Any,
    batched: bool,
    bounds: dict[str, Any],
    found: Findings,
) -> None:
    """DPL022: the shape the warm-up runs, inside the ranges the contract proves."""
    shape = ([max(warm.batch_size, 1)] if batched else []) + (
        list(spec.reshape.shape) if spec.HasField("reshape") else dims
    )
    for size, dim in zip(shape, model_spec.shape, strict=False):
        bound = bounds.get(dim) if isinstance(dim, str) else None
        if bound is None:
            continue
        if (bound.min is not None and size < bound.min) or (
            bound.max is not None and size > bound.max
        ):
            found.add(
                "DPL022", "error", at,
                f"{name}: {dim}={size} is outside the proven {bound.min}..{bound.max}",
                "Warm up inside what the contract proves (its golden samples).",
            )  # fmt: skip


def _check_file(
    at: str,
    name: str,
    data: Any,
    dims: list[int],
    model_dir: Path,
    sizes: dict[int, int],
    found: Findings,
) -> None:
    """DPL023: the data file is in the warmup folder, with the bytes its dims need."""
    file = model_dir / "warmup" / data.input_data_file
    if Path(data.input_data_file).name != data.input_data_file:
        found.add(
            "DPL023", "error", at,
            f"{name}: input_data_file {data.input_data_file!r} is not a file name "
            "in the warmup folder",
        )  # fmt: skip
    elif not file.is_file():
        found.add("DPL023", "error", at, f"{name}: {file} does not exist")
    elif data.data_type in sizes:
        want = int(np.prod(dims or [1])) * sizes[data.data_type]
        if file.stat().st_size != want:
            found.add(
                "DPL023", "error", at,
                f"{name}: {file.name} holds {file.stat().st_size} bytes, dims "
                f"{dims} need {want}",
            )  # fmt: skip
