"""Tensors on the wire: the Open Inference Protocol's datatypes, JSON data and binary data.

Both protocols meet NumPy here. Every decoder checks the declared shape against the size limit
*before* it allocates, and the data's length against the shape, so a request that declares a
terabyte or sends a truncated buffer is refused with a message naming the input.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxgate.errors import InvalidRequest, PayloadTooLarge
from onnxgate.serve._refuse import echo

DATATYPES: dict[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BYTES": "string",
}
"""Open Inference Protocol datatype → the ONNX element type name onnxgate's signatures use."""
OIP_OF: dict[str, str] = {onnx: oip for oip, onnx in DATATYPES.items()}
MAX_RANK = 64
"""NumPy's limit on dims (ONNX Runtime's is higher; no model takes more)."""

_LENGTH = struct.Struct("<I")


def datatype_of(dtype: str | None) -> str:
    """The protocol datatype of an ONNX element type (``float32`` → ``FP32``).

    Raises:
        InvalidRequest: the type has no protocol datatype (bfloat16, complex, sequences).
    """
    found = OIP_OF.get(dtype or "")
    if found is None:
        raise InvalidRequest(f"element type {dtype!r} has no Open Inference Protocol datatype.")
    return found


def numpy_dtype(datatype: str) -> np.dtype:
    """The NumPy dtype a protocol datatype decodes to (BYTES → object)."""
    onnx = DATATYPES.get(datatype)
    if onnx is None:
        raise InvalidRequest(
            f"datatype {echo(datatype)} is not an Open Inference Protocol datatype "
            f"({', '.join(DATATYPES)})."
        )
    return np.dtype(object) if onnx == "string" else np.dtype(onnx)


def check_shape(name: str, shape: Sequence[Any], datatype: str, limit: int) -> int:
    """The element count of a declared shape, refused when malformed or above ``limit`` bytes.

    Raises:
        InvalidRequest: an unknown datatype, more than ``MAX_RANK`` dims, or a dim that is not a
            non-negative integer.
        PayloadTooLarge: the tensor would take more than ``limit`` bytes.
    """
    if datatype not in DATATYPES:
        raise InvalidRequest(
            f"input {echo(name)}: datatype {echo(datatype)} is not an Open Inference Protocol datatype "
            f"({', '.join(DATATYPES)}) (rule input.datatype)"
        )
    if len(shape) > MAX_RANK:
        raise InvalidRequest(
            f"input {echo(name)}: shape has {len(shape)} dims; at most {MAX_RANK} are possible "
            "(rule input.shape)"
        )
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidRequest(
                f"input {echo(name)}: shape {echo(list(shape))} is not a list of non-negative integers."
            )
        dims.append(dim)
    count = math.prod(dims)
    width = 1 if datatype in ("BYTES", "BOOL") else numpy_dtype(datatype).itemsize
    if count == 0 and math.prod(d for d in dims if d) * width > limit:
        # NumPy refuses such a shape even when empty ("Maximum allowed dimension exceeded")
        raise InvalidRequest(
            f"input {echo(name)}: shape {dims} is empty, but its other dims are beyond the "
            f"server's limit of {limit} bytes per request."
        )
    if count * width > limit:
        raise PayloadTooLarge(
            f"input {echo(name)}: shape {dims} of {datatype} needs {count * width} bytes, above the "
            f"server's limit of {limit} bytes per request."
        )
    return count


def _rows(name: str, data: list[Any], shape: Sequence[int]) -> list[Any]:
    """Nested ``data`` flattened, row-major, refused unless it nests exactly as ``shape``.

    A regular array only: ``[[1, 2], [3, 4]]`` for ``[2, 2]``, never ``[[1], [2, 3, 4]]``, whose
    count is right but whose rows are not. Walked one dim at a time, so the depth is the rank.
    """
    level: list[Any] = [data]
    for axis, dim in enumerate(shape):
        below: list[Any] = []
        for index, item in enumerate(level):
            if not isinstance(item, list) or len(item) != dim:
                where = "data" + "".join(
                    f"[{i}]" for i in np.unravel_index(index, tuple(shape[:axis]))
                )
                has = f"{len(item)} values" if isinstance(item, list) else "a single value"
                raise InvalidRequest(
                    f"input {echo(name)}: data is nested, but not as shape {list(shape)}: "
                    f"{where} has {has} where dim {axis} is {dim}; send the values flat, or "
                    "nested exactly as the shape."
                )
            below.extend(item)
        level = below
    return level


def from_json(name: str, datatype: str, shape: Sequence[int], data: Any, limit: int) -> np.ndarray:
    """An input's ``data`` (nested or flat, row-major) as an array of ``shape``.

    Raises:
        InvalidRequest: the data is not a list, holds the wrong number or kind of values.
        PayloadTooLarge: the declared shape is above the limit.
    """
    count = check_shape(name, shape, datatype, limit)
    dtype = numpy_dtype(datatype)
    if not isinstance(data, list):
        data = [data]
    if data and isinstance(data[0], list):
        flat = _rows(name, data, shape)
    else:
        flat = data  # flat: a value that is a list is refused below, as not a value
    if len(flat) != count:
        has = f"{len(flat)}" if len(flat) <= count else "more"
        raise InvalidRequest(
            f"input {echo(name)}: shape {list(shape)} holds {count} values, the data has {has}."
        )
    if datatype == "BYTES":
        if not all(isinstance(v, str | bytes) for v in flat):
            raise InvalidRequest(f"input {echo(name)}: BYTES data must be strings.")
        try:
            values = [v.encode() if isinstance(v, str) else v for v in flat]
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800"): JSON can say it, UTF-8 cannot
            raise InvalidRequest(
                f"input {echo(name)}: a BYTES string holds a lone surrogate, which is not text."
            ) from None
        return np.array(values, dtype=object).reshape(tuple(shape))
    kind = bool if datatype == "BOOL" else (float if dtype.kind == "f" else int)
    for v in flat:
        ok = (
            isinstance(v, bool)
            if kind is bool
            else (isinstance(v, int | float) and not isinstance(v, bool))
        )
        if not ok or (kind is int and isinstance(v, float) and not v.is_integer()):
            raise InvalidRequest(f"input {echo(name)}: {echo(v, 40)} is not a {datatype} value.")
    try:
        with np.errstate(over="raise", invalid="raise"):
            array = np.array(flat, dtype=dtype)
    except (OverflowError, FloatingPointError, ValueError) as err:
        raise InvalidRequest(
            f"input {echo(name)}: a value does not fit {datatype} ({err})."
        ) from None
    if kind is int and any(int(a) != v for a, v in zip(array, flat, strict=True)):
        raise InvalidRequest(f"input {echo(name)}: a value does not fit {datatype}.")
    return array.reshape(tuple(shape))


def from_bytes(
    name: str, datatype: str, shape: Sequence[int], buffer: bytes | memoryview, limit: int
) -> np.ndarray:
    """An input's raw bytes (little-endian, row-major; BYTES length-prefixed) as an array.

    Raises:
        InvalidRequest: the buffer's length does not match the shape.
        PayloadTooLarge: the declared shape is above the limit.
    """
    count = check_shape(name, shape, datatype, limit)
    if datatype == "BYTES":
        items, view, offset = [], memoryview(buffer), 0
        while offset < len(view):
            if len(items) == count:  # stop early: a buffer of empty strings is 4 bytes each
                raise InvalidRequest(
                    f"input {echo(name)}: shape {list(shape)} holds {count} values, the data has more."
                )
            if offset + 4 > len(view):
                raise InvalidRequest(f"input {echo(name)}: BYTES data ends inside a length prefix.")
            (size,) = _LENGTH.unpack_from(view, offset)
            offset += 4
            if offset + size > len(view):
                raise InvalidRequest(f"input {echo(name)}: BYTES element runs past the data's end.")
            items.append(bytes(view[offset : offset + size]))
            offset += size
        if len(items) != count:
            raise InvalidRequest(
                f"input {echo(name)}: shape {list(shape)} holds {count} values, the data has "
                f"{len(items)}."
            )
        return np.array(items, dtype=object).reshape(tuple(shape))
    dtype = numpy_dtype(datatype).newbyteorder("<")
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise InvalidRequest(
            f"input {echo(name)}: shape {list(shape)} of {datatype} needs {expected} bytes, the data "
            f"has {len(buffer)}."
        )
    array = np.frombuffer(buffer, dtype=dtype).reshape(tuple(shape))
    if datatype == "BOOL" and count and int(array.view(np.uint8).max()) > 1:
        raise InvalidRequest(f"input {echo(name)}: BOOL bytes must be 0 or 1.")
    return array.astype(dtype.newbyteorder("="), copy=False)


def to_bytes(array: np.ndarray) -> bytes:
    """An output's raw bytes: little-endian, row-major, BYTES length-prefixed."""
    if array.dtype == object or array.dtype.kind in "SU":
        parts = []
        for item in array.reshape(-1):
            raw = item if isinstance(item, bytes) else str(item).encode()
            parts.append(_LENGTH.pack(len(raw)) + raw)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def to_json(array: np.ndarray) -> list[Any]:
    """An output's values as a flat JSON list (strings for BYTES)."""
    flat = array.reshape(-1)
    if array.dtype == object or array.dtype.kind in "SU":
        return [v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in flat]
    return flat.tolist()  # NaN and infinities as JSON's common extension (NaN, Infinity)


def output_datatype(array: np.ndarray) -> str:
    """The protocol datatype of an output array."""
    if array.dtype == object or array.dtype.kind in "SU":
        return "BYTES"
    return datatype_of(array.dtype.name)
