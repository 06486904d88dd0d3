"""Output shapes as the golden samples produced them, where they contradict the declaration.

An exporter can declare an output ``[1, seqlen]`` while the model returns ``[N, 1, 8210]``
(ddddocr's OCR model does). ONNX Runtime only logs it; everything that trusts the declaration (a
Triton config, a client's buffers) breaks at run time. The golden samples are what the model
returned, so the contract records the shape they have (``signature.observed``): ``check``
reports it (SHP003), ``deploy triton`` deploys it, ``deploy check`` holds configs to it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate._pathtext import shown
from onnxgate.contract_store import SIDECAR, ContractStore, ObservedShape, sha256_file
from onnxgate.data import Sample
from onnxgate.errors import ModelLoadError
from onnxgate.model import Signature

log = logging.getLogger(__name__)


def _contradiction(declared: tuple, shapes: list[tuple[int, ...]], inputs: list[dict]) -> str:
    """What in ``shapes`` the declared shape does not allow ("" when it allows them all)."""
    for shape, sizes in zip(shapes, inputs, strict=True):
        if len(shape) != len(declared):
            return f"rank {len(shape)}, declared {len(declared)}"
        bound: dict[str, int] = {}
        for axis, (size, dim) in enumerate(zip(shape, declared, strict=True)):
            if isinstance(dim, int) and size != dim:
                return f"axis {axis} is {size}, declared {dim}"
            if isinstance(dim, str) and dim:
                # a name is one size per run: the input dim of that name, or its own first size
                want = sizes.get(dim, bound.setdefault(dim, size))
                if size != want:
                    return f"axis {axis} ({dim}) is {size} where {dim} is {want}"
    return ""


def observed_shapes(
    signature: Signature, produced: Sequence[tuple[Sample, Mapping[str, np.ndarray]]]
) -> dict[str, ObservedShape]:
    """The shape each output really has, for outputs whose golden values contradict the declaration.

    An output contradicts its declared shape when a golden value has another rank, another size
    on a fixed axis, or a size a named dim cannot take (the input dim of that name had another
    size, or the name took two sizes in one value). Its observed shape gives each axis the size
    all samples had, else the input dim that had the same size in every sample, else a fresh
    name. Outputs without a declared rank, and values of different ranks, are left out: there
    is no one shape to record.
    """
    inputs = [_input_sizes(signature, sample.feeds) for sample, _ in produced]
    taken = {d for spec in (*signature.inputs, *signature.outputs) for d in spec.symbolic_dims}
    observed = {}
    for spec in signature.outputs:
        shapes = [
            tuple(int(n) for n in out[spec.name].shape) for _, out in produced if spec.name in out
        ]
        if spec.shape is None or len(shapes) != len(produced) or not shapes:
            continue
        why = _contradiction(spec.shape, shapes, inputs)
        if not why or len({len(s) for s in shapes}) != 1:
            continue
        dims: list[int | str] = []
        for axis, sizes in enumerate(zip(*shapes, strict=True)):
            if len(set(sizes)) == 1:
                dims.append(sizes[0])
                continue
            tied = [
                name
                for name in inputs[0]
                if all(known.get(name) == size for known, size in zip(inputs, sizes, strict=True))
            ]
            if tied:
                dims.append(tied[0])
                continue
            fresh, n = f"{spec.name}_dim{axis}", 1
            while fresh in taken:
                fresh, n = f"{spec.name}_dim{axis}_{n}", n + 1
            taken.add(fresh)
            dims.append(fresh)
        observed[spec.name] = ObservedShape(
            declared=spec.shape, shape=tuple(dims), seen=shapes, why=why
        )
        log.info(
            "output %s: declared %s, the model produced %s (%s)",
            spec.name, list(spec.shape), shapes[0], why,
        )  # fmt: skip
    return observed


def _input_sizes(signature: Signature, feeds: Mapping[str, Any]) -> dict[str, int]:
    """The size each named input dim has in these feeds (the first input that names it)."""
    sizes: dict[str, int] = {}
    for spec in signature.inputs:
        value = feeds.get(spec.name)
        shape = getattr(value, "shape", None)
        if spec.shape is None or shape is None or len(shape) != len(spec.shape):
            continue
        for dim, size in zip(spec.shape, shape, strict=True):
            if isinstance(dim, str) and dim:
                sizes.setdefault(dim, int(size))
    return sizes


def observed_outputs(model: Path, *, store: ContractStore = SIDECAR) -> dict[str, ObservedShape]:
    """The observed output shapes the contract beside ``model`` records (empty when it has none).

    A contract of other bytes (the model was replaced since) or one that cannot be read gives
    none: its evidence is not about this model.
    """
    try:
        if not store.exists(model):
            return {}
        contract = store.read(model)
        if sha256_file(model) != contract.identity.model.sha256:
            return {}
    except (ModelLoadError, OSError) as err:
        log.info("%s: its contract's observed shapes are not used: %s", shown(model), err)
        return {}
    return dict(contract.signature.observed)
