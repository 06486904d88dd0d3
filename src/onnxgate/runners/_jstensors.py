"""Onnxgate's tensor container, the file tensors cross to and from the JavaScript driver in.

Raw little-endian bytes, never JSON numbers: ``b"OGTNSR01"``, a 4-byte little-endian header
length, a JSON header ``{"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}]}``, zero
padding to a multiple of 8, then the data section (each tensor at its ``offset``, 8-aligned). A
string tensor carries ``"strings"`` (a flat list) in the header instead of bytes. ``dtype`` is
NumPy's name, which is ONNX Runtime's JavaScript name too. ``js/core.mjs`` reads and writes the
same format.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.errors import InternalError, RunFailed

MAGIC = b"OGTNSR01"
DTYPES = frozenset(
    {
        "float32",
        "float64",
        "float16",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "bool",
    }
)
"""The NumPy types ONNX Runtime's JavaScript API has tensors of, besides strings."""


def _align(n: int) -> int:
    return (n + 7) & ~7


def write_tensors(path: Path, arrays: Mapping[str, Any], *, runtime: str) -> None:
    """Write ``arrays`` as a container.

    Raises:
        RunFailed: an array of a type ONNX Runtime's JavaScript API has no tensors of
            (bfloat16, complex, ...), named by its input.
    """
    entries: list[dict[str, Any]] = []
    chunks: list[tuple[int, bytes]] = []
    offset = 0
    for name, value in arrays.items():
        array = np.asarray(value)
        shape = [int(d) for d in array.shape]
        if array.dtype.kind in "OUS":
            strings = [str(s.decode() if isinstance(s, bytes) else s) for s in array.reshape(-1)]
            entries.append({"name": name, "dtype": "string", "shape": shape, "strings": strings})
            continue
        if array.dtype.name not in DTYPES:
            raise RunFailed(
                f"input {name} is {array.dtype.name}: {runtime} (ONNX Runtime's JavaScript API) "
                "has no tensors of that type.",
                hint="Feed float32, float16, int64, bool, string or another type it has, or run "
                "this model on a Python build of ONNX Runtime.",
            )
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        entries.append(
            {"name": name, "dtype": array.dtype.name, "shape": shape, "offset": offset}
            | {"nbytes": len(data)}
        )
        chunks.append((offset, data))
        offset = _align(offset + len(data))
    header = json.dumps({"tensors": entries}).encode()
    start = _align(12 + len(header))
    with path.open("wb") as out:
        out.write(MAGIC + struct.pack("<I", len(header)) + header)
        out.write(b"\0" * (start - 12 - len(header)))
        at = 0
        for where, data in chunks:
            out.write(b"\0" * (where - at))
            out.write(data)
            at = where + len(data)


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a container, by name, in its order (strings as object arrays).

    Raises:
        InternalError: the file is no container, or its header does not fit its bytes (only
            onnxgate writes these files).
    """
    raw = path.read_bytes()

    def broken(why: str) -> InternalError:
        return InternalError(
            f"{path} is not a valid onnxgate tensor container: {why}.",
            hint="This is a bug in onnxgate, not a verdict on the model; please report it.",
        )

    if raw[:8] != MAGIC or len(raw) < 12:
        raise broken("it does not start with OGTNSR01")
    (length,) = struct.unpack_from("<I", raw, 8)
    if 12 + length > len(raw):
        raise broken(f"its header says {length} bytes, the file has {len(raw) - 12} after it")
    try:
        header = json.loads(raw[12 : 12 + length])
        entries = list(header["tensors"])
    except (ValueError, TypeError, KeyError) as err:
        raise broken(f"its header is not the container's JSON ({err})") from err
    start = _align(12 + length)
    out: dict[str, np.ndarray] = {}
    for entry in entries:
        try:
            out[entry["name"]] = _tensor(raw, start, entry)
        except (ValueError, TypeError, KeyError) as err:
            raise broken(f"tensor {entry.get('name')!r}: {err}") from err
    return out


def _tensor(raw: bytes, start: int, entry: Mapping[str, Any]) -> np.ndarray:
    """One tensor of a container, its offset and size checked against the file and its shape."""
    shape = tuple(int(d) for d in entry["shape"])
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in {list(shape)}")
    if entry["dtype"] == "string":
        return np.array(entry["strings"], dtype=object).reshape(shape)
    if entry["dtype"] not in DTYPES:
        raise ValueError(f"unknown dtype {entry['dtype']!r}")
    dtype = np.dtype(entry["dtype"]).newbyteorder("<")
    offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
    if nbytes != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{nbytes} bytes for {entry['dtype']} {list(shape)}")
    if offset < 0 or start + offset + nbytes > len(raw):
        raise ValueError(f"bytes {offset}..{offset + nbytes} lie outside the data section")
    data = raw[start + offset : start + offset + nbytes]
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(entry["dtype"])
