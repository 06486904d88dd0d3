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
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.errors import RunFailed

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
    """The tensors of a container, by name, in its order (strings as object arrays)."""
    raw = path.read_bytes()
    if raw[:8] != MAGIC:
        raise ValueError(f"{path} is not an onnxgate tensor container")
    (length,) = struct.unpack_from("<I", raw, 8)
    header = json.loads(raw[12 : 12 + length])
    start = _align(12 + length)
    out: dict[str, np.ndarray] = {}
    for entry in header["tensors"]:
        shape = tuple(entry["shape"])
        if entry["dtype"] == "string":
            out[entry["name"]] = np.array(entry["strings"], dtype=object).reshape(shape)
            continue
        begin = start + entry["offset"]
        data = raw[begin : begin + entry["nbytes"]]
        dtype = np.dtype(entry["dtype"]).newbyteorder("<")
        out[entry["name"]] = np.frombuffer(data, dtype=dtype).reshape(shape).astype(entry["dtype"])
    return out
