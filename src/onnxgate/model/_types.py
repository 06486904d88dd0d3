"""ONNX element and value types as strings: ``float32`` for people, ``tensor(float)`` for kernels."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, TypeProto

from onnxgate.model._walk import iter_model_graphs

_ELEM_NAMES: dict[int, str] = {
    value: name.lower() for name, value in TensorProto.DataType.items() if value != 0
}

# Friendlier names for the element types people meet every day; the rest keep ONNX's name.
_FRIENDLY = {"float": "float32", "double": "float64"}

# Bytes per element for the fixed-size element types; sub-byte types are handled by _BITS.
_BITS: dict[str, int] = {
    "float": 32, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "int32": 32, "int64": 64,
    "bool": 8, "float16": 16, "double": 64, "uint32": 32, "uint64": 64, "complex64": 64,
    "complex128": 128, "bfloat16": 16, "float8e4m3fn": 8, "float8e4m3fnuz": 8, "float8e5m2": 8,
    "float8e5m2fnuz": 8, "uint4": 4, "int4": 4, "float4e2m1": 4, "float8e8m0": 8, "uint2": 2,
    "int2": 2, "float6e2m3": 6, "float6e3m2": 6,
}  # fmt: skip


def elem_type_name(elem_type: int) -> str:
    """ONNX's own name of an element type, as used in type strings: ``float``, ``int64``."""
    return _ELEM_NAMES.get(elem_type, f"unknown({elem_type})")


def dtype_name(elem_type: int) -> str:
    """The name people use for an element type: ``float32``, ``int64``, ``bfloat16``."""
    name = elem_type_name(elem_type)
    return _FRIENDLY.get(name, name)


def tensor_nbytes(elem_type: int, dims: list[int] | tuple[int, ...]) -> int | None:
    """Bytes a dense tensor of this type and shape occupies, or None for variable-size types."""
    bits = _BITS.get(elem_type_name(elem_type))
    if bits is None:
        return None
    count = int(np.prod(dims, dtype=object)) if dims else 1
    return (count * bits + 7) // 8


def type_string(tp: TypeProto) -> str | None:
    """The type as ONNX Runtime's kernel constraints spell it, e.g. ``seq(tensor(float))``.

    Returns None when the type is not set (unknown until shape inference says otherwise).
    """
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        if not tp.tensor_type.elem_type:
            return None
        return f"tensor({elem_type_name(tp.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        if not tp.sparse_tensor_type.elem_type:
            return None
        return f"sparse_tensor({elem_type_name(tp.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    if kind == "map_type":
        inner = type_string(tp.map_type.value_type)
        key = elem_type_name(tp.map_type.key_type)
        return f"map({key},{inner})" if inner else None
    return None


def value_types(model: ModelProto) -> dict[str, str | None]:
    """Type string of every named value across all graphs (inputs, outputs, value_info, weights).

    None marks a value whose type is not known (a Constant's output before inference, a sparse
    initializer). Names are global across graphs: a subgraph's name shadows an outer one.
    """
    types: dict[str, str | None] = {}
    for graph in iter_model_graphs(model):
        for info in (*graph.input, *graph.value_info, *graph.output):
            found = type_string(info.type)
            if found or info.name not in types:
                types[info.name] = found
        for tensor in graph.initializer:
            types[tensor.name] = f"tensor({elem_type_name(tensor.data_type)})"
        for sparse in graph.sparse_initializer:
            types.setdefault(sparse.values.name, None)
    return types
