"""The one reader of the data files users give: ``.npy``, ``.npz``, JSON and TensorProto ``.pb``.

Every function here is total: whatever bytes a file holds, it returns arrays or raises
``DataFileError`` (exit 2) naming the file, and the archive member or JSON key, with what is wrong
and what to do. Never a traceback, never pickle (``allow_pickle=False`` always), and never an
allocation the file's own bytes do not back.

That last rule is why sizes are checked before anything is read. An ``.npy`` header is a Python
literal that declares a shape, and NumPy allocates shape x itemsize before it reads a byte, so a
128-byte file can ask for 4 TiB. Here the header is parsed on its own first, and its declared size
is compared with the bytes that follow it (an ``.npy``) or with the member's uncompressed size in
the zip directory (an ``.npz`` member; ``zipfile`` never inflates a member beyond that size, which
is what defuses zip bombs), and everything one file declares is held to one cap, ``MAX_DATA_BYTES``
(4 GiB; the ``ONNXGATE_MAX_DATA_BYTES`` environment variable sets another). A TensorProto's dims
are compared with the data it holds before ``numpy_helper`` sees it, and data kept in an external
file is refused: a data file holds its values.

The readers return what the file holds; whether it fits a model is ``validate_feeds``' question.
"""

from __future__ import annotations

import json
import lzma
import math
import os
import stat
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format
from onnx import (
    MapProto,
    OptionalProto,
    SequenceProto,
    SparseTensorProto,
    TensorProto,
    helper,
    numpy_helper,
)

from onnxgate._pathtext import shown
from onnxgate.errors import ConfigError, DataFileError, first_line
from onnxgate.model import PROTOBUF_LIMIT, dtype_name, elem_type_name, tensor_nbytes

MAX_DATA_BYTES = 4 << 30
"""The most array data one file may declare (all members of an ``.npz`` together): 4 GiB."""

MAX_DATA_BYTES_ENV = "ONNXGATE_MAX_DATA_BYTES"
"""Environment variable that replaces ``MAX_DATA_BYTES`` (a whole number of bytes)."""

JSON_SHARE = 16
"""JSON text may be at most 1/16 of the cap (256 MiB by default): parsed, each number is a Python
object of ~30 bytes in a list, so a document takes about ten times its text in memory."""

_NPY_MAGIC = b"\x93NUMPY"
_UNREADABLE = (
    ValueError,
    EOFError,
    OSError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    NotImplementedError,  # a compression method zipfile does not know
    RuntimeError,  # an encrypted member
)
"""What reading a damaged file or zip member raises: numpy's EOF, zipfile's and each
decompressor's own errors."""
_MAX_NDIM = 64  # NumPy's own limit (NPY_MAXDIMS)
_MAX_DIM = 2**40  # beyond any real axis; larger ones overflow NumPy's size arithmetic
MAX_MEMBERS = 100_000
"""Members an ``.npz`` may hold: a zip of many empty members costs time, not bytes."""
_CHUNK = 1 << 24  # code points checked at a time


def max_data_bytes() -> int:
    """The cap on the array data one file may declare: ``ONNXGATE_MAX_DATA_BYTES`` or 4 GiB.

    Raises:
        ConfigError: the environment variable is set and is not a positive whole number.
    """
    text = os.environ.get(MAX_DATA_BYTES_ENV, "").strip()
    if not text:
        return MAX_DATA_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(
            f"{MAX_DATA_BYTES_ENV}={text!r} is not a positive whole number of bytes.",
            hint=f"Unset it (the cap is then {MAX_DATA_BYTES:,} bytes, 4 GiB) or give bytes, "
            f"e.g. {MAX_DATA_BYTES_ENV}={8 << 30} for 8 GiB.",
        )
    return value


def size_text(count: int) -> str:
    """``4.0 TiB``, ``12.3 MiB``, ``96 bytes``: a byte count for messages."""
    if count < 1024:
        return f"{count} byte{'s' if count != 1 else ''}"
    value, units = float(count), ["KiB", "MiB", "GiB", "TiB", "PiB"]
    value /= 1024
    while value >= 1024 and len(units) > 1:
        value /= 1024
        units.pop(0)
    return f"{value:.1f} {units[0]}"


def _too_large(where: str, what: str, declared: int, cap: int) -> DataFileError:
    return DataFileError(
        f"{where}: {what} {size_text(declared)}, more than the {size_text(cap)} one data file may "
        "declare.",
        hint=f"Split the data into several files, or raise the cap with {MAX_DATA_BYTES_ENV} "
        "(bytes) if this machine has the memory.",
    )


def _no_memory(where: str, err: MemoryError) -> DataFileError:
    return DataFileError(
        f"{where}: does not fit in this machine's memory ({first_line(err)}).",
        hint="Split the data into several smaller files.",
    )


def file_size(path: Path) -> int:
    """The size of a regular, non-empty file, or the ``DataFileError`` that says why not."""
    where = shown(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DataFileError(f"{where}: cannot be read: no such file.") from None
    except OSError as err:
        raise DataFileError(f"{where}: cannot be read ({err.strerror or err}).") from err
    if stat.S_ISDIR(info.st_mode):
        raise DataFileError(f"{where}: is a folder, not a data file.")
    if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
        raise DataFileError(f"{where}: is not a regular file.", hint="Pass the data file itself.")
    if info.st_size == 0:
        raise DataFileError(
            f"{where}: is empty (0 bytes).", hint="Write the data again; the copy may have failed."
        )
    return info.st_size


# --- .npy ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpyHeader:
    """What an ``.npy`` header declares, and where its data starts."""

    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of data the header declares (a Python int: it cannot overflow)."""
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        """``float32 [1048576, 1048576]``."""
        return f"{self.dtype} {list(self.shape)}"


def check_dtype(dtype: np.dtype, where: str) -> None:
    """Refuse a dtype no ONNX tensor can hold: objects, records, dates, zero-width strings.

    Raises:
        DataFileError: naming the dtype and what to convert it to.
    """
    if dtype.hasobject:
        raise DataFileError(
            f"{where}: holds an object array, which would need pickle to read; refused.",
            hint="Save numbers as numeric arrays and strings as fixed-width unicode arrays "
            "(np.array([...], dtype=str)).",
        )
    if dtype.kind == "V":
        raise DataFileError(
            f"{where}: holds a structured or raw-bytes array ({dtype}); ONNX tensors hold one "
            "numeric, boolean or string type.",
            hint="Save each field as an array of its own.",
        )
    if dtype.itemsize == 0:
        raise DataFileError(f"{where}: holds zero-width {dtype} values; nothing can be read.")
    if dtype.kind in "SU":
        return
    try:
        helper.np_dtype_to_tensor_dtype(dtype.newbyteorder("="))
    except (ValueError, KeyError, TypeError) as err:
        raise DataFileError(
            f"{where}: holds {dtype} values, which no ONNX tensor type can hold.",
            hint="Convert them, e.g. array.astype(np.float32) or .astype(np.int64).",
        ) from err


def read_npy_header(fp: IO[bytes], where: str) -> NpyHeader:
    """Parse an ``.npy`` header from ``fp`` (at its start) without reading the data.

    Raises:
        DataFileError: no ``.npy`` magic, an unknown format version, a malformed header, or a
            shape or dtype no ONNX tensor can take.
    """
    try:
        version = npy_format.read_magic(fp)
    except _UNREADABLE as err:
        raise DataFileError(
            f"{where}: is not a .npy array ({first_line(err)}).",
            hint="Write it with np.save(path, array).",
        ) from err
    readers: dict[tuple[int, int], Callable[[IO[bytes]], tuple[Any, bool, np.dtype]]] = {
        (1, 0): npy_format.read_array_header_1_0,
        (2, 0): npy_format.read_array_header_2_0,
    }
    reader = readers.get(version)
    if reader is None:
        raise DataFileError(
            f"{where}: is .npy format version {version[0]}.{version[1]}; onnxgate reads 1.0 and "
            "2.0 (3.0 exists only for structured arrays, which ONNX cannot take).",
            hint="Write it with np.save(path, array) from a plain numeric or string array.",
        )
    try:
        shape, _fortran, dtype = reader(fp)
    except Exception as err:  # a foreign Python literal: ValueError, SyntaxError, RecursionError...
        raise DataFileError(
            f"{where}: its .npy header is malformed ({first_line(err)}).",
            hint="Write it again with np.save(path, array).",
        ) from err
    if not (
        isinstance(shape, tuple)
        and len(shape) <= _MAX_NDIM
        and all(type(d) is int and 0 <= d <= _MAX_DIM for d in shape)
    ):
        raise DataFileError(f"{where}: its .npy header declares an impossible shape {shape!r}.")
    check_dtype(dtype, where)
    return NpyHeader(shape, dtype, fp.tell())


def check_declared(header: NpyHeader, available: int, cap: int, where: str) -> None:
    """Refuse a header that declares more bytes than follow it, or more than the cap.

    Raises:
        DataFileError: the file is truncated or its header lies, or the array is too large.
    """
    need = header.nbytes
    if need > available:
        raise DataFileError(
            f"{where}: is truncated or its header lies: it declares {header.describe()} "
            f"({size_text(need)}) and holds {size_text(max(available, 0))} of data.",
            hint="Write it again with np.save / np.savez; if it was copied, check the copy.",
        )
    if need > cap:
        raise _too_large(where, f"declares {header.describe()},", need, cap)


def _native(array: np.ndarray, where: str) -> np.ndarray:
    """The array in this machine's byte order (ONNX Runtime reads native order only).

    Raises:
        DataFileError: a unicode array holds a code point that is no character (a lone
            surrogate), which no runtime can encode as UTF-8.
    """
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype.kind == "U" and array.size:
        # UTF-32 code points, checked in place and in chunks: no Python string is made
        codes = np.ascontiguousarray(array).reshape(-1).view(np.uint32)
        for start in range(0, codes.size, _CHUNK):
            chunk = codes[start : start + _CHUNK]
            bad = (chunk > 0x10FFFF) | ((chunk >= 0xD800) & (chunk <= 0xDFFF))
            if bad.any():
                code = int(chunk[int(np.argmax(bad))])
                raise DataFileError(
                    f"{where}: holds a string with code point {code:#x}, which is not a Unicode "
                    "character (a lone surrogate or beyond U+10FFFF); strings must be valid "
                    "Unicode."
                )
    return array


def _read_checked(fp: IO[bytes], header: NpyHeader, where: str) -> np.ndarray:
    """Read the array whose header was checked, from ``fp`` rewound to the header's start."""
    try:
        array = npy_format.read_array(fp, allow_pickle=False)
    except MemoryError as err:
        raise _no_memory(where, err) from err
    except _UNREADABLE as err:
        raise DataFileError(
            f"{where}: its data cannot be read ({first_line(err)}); the file is truncated or "
            "corrupt.",
            hint="Write it again with np.save / np.savez.",
        ) from err
    if array.shape != header.shape:  # read_array builds from the header: a safety net only
        raise DataFileError(f"{where}: read {list(array.shape)}, not {list(header.shape)}.")
    return _native(array, where)


def read_npy(path: str | Path) -> np.ndarray:
    """The array of an ``.npy`` file, its header checked before any data is allocated.

    Raises:
        DataFileError: missing, empty, not ``.npy``, truncated, too large, or of a dtype ONNX
            cannot take (object arrays are refused: they would need pickle).
    """
    path = Path(path)
    where = shown(path)
    size = file_size(path)
    cap = max_data_bytes()
    try:
        with path.open("rb") as fp:
            header = read_npy_header(fp, where)
            check_declared(header, size - header.offset, cap, where)
            fp.seek(0)
            return _read_checked(fp, header, where)
    except OSError as err:
        raise DataFileError(f"{where}: cannot be read ({err.strerror or err}).") from err


# --- .npz ----------------------------------------------------------------------------------------

_NPZ_HINT = "Write it with np.savez(path, input_name=array, ...)."


def _not_npz(path: Path, reason: str) -> DataFileError:
    return DataFileError(
        f"{shown(path)}: is not a readable .npz archive (a zip of .npy arrays, one per input): "
        f"{reason}.",
        hint=_NPZ_HINT,
    )


def _member_keys(path: Path, infos: list[zipfile.ZipInfo]) -> list[str]:
    """Each member's array name (``x.npy`` → ``x``, as ``np.load`` names them), checked."""
    if len(infos) > MAX_MEMBERS:
        raise DataFileError(
            f"{shown(path)}: holds {len(infos):,} members, more than the {MAX_MEMBERS:,} onnxgate "
            "reads from one archive.",
            hint="Stack samples of one input into one array, or split the data into files.",
        )
    keys: list[str] = []
    seen: set[str] = set()
    for info in infos:
        member = f"{shown(path)} member {shown(info.filename)!r}"
        if not info.filename:
            raise DataFileError(f"{shown(path)}: holds a member with no name; it is corrupt.")
        if info.filename.endswith("/"):  # not ZipInfo.is_dir(), which fails on an empty name
            raise DataFileError(f"{member}: is a folder; an .npz holds .npy arrays only.")
        if info.flag_bits & 0x1:
            raise DataFileError(f"{member}: is encrypted; onnxgate reads plain .npz archives.")
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if key in seen:
            raise DataFileError(
                f"{member}: appears twice in the archive; which one is meant is ambiguous.",
                hint=_NPZ_HINT,
            )
        keys.append(key)
        seen.add(key)
    return keys


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive by name, every member checked before it is read.

    Raises:
        DataFileError: missing, empty, not a zip, an empty archive, members that declare more
            than the cap together (a zip bomb) or more than they hold, or a member that is not a
            plain ``.npy`` array of a dtype ONNX can take.
    """
    path = Path(path)
    where = shown(path)
    file_size(path)
    if not zipfile.is_zipfile(path):
        if _magic(path) == _NPY_MAGIC:
            raise _not_npz(
                path, "it is a single .npy array (np.save); name it .npy if that is meant"
            )
        raise _not_npz(path, "it is not a zip file")
    cap = max_data_bytes()
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if not infos:
                raise DataFileError(f"{where}: holds no arrays (an empty archive).", hint=_NPZ_HINT)
            keys = _member_keys(path, infos)
            declared = sum(info.file_size for info in infos)
            if declared > cap:
                raise _too_large(
                    where, f"its {len(infos)} member(s) declare, uncompressed,", declared, cap
                )
            for info, key in zip(infos, keys, strict=True):
                member = f"{where} member {shown(info.filename)!r}"
                with archive.open(info) as fp:
                    header = read_npy_header(fp, member)
                    check_declared(header, info.file_size - header.offset, cap, member)
                    fp.seek(0)
                    arrays[key] = _read_checked(fp, header, member)
    except DataFileError:
        raise
    except MemoryError as err:
        raise _no_memory(where, err) from err
    except _UNREADABLE as err:
        raise _not_npz(path, first_line(err)) from err
    return arrays


def _magic(path: Path) -> bytes:
    """The first bytes of a file, as many as the ``.npy`` magic has."""
    try:
        with path.open("rb") as fp:
            return fp.read(len(_NPY_MAGIC))
    except OSError as err:
        raise DataFileError(f"{shown(path)}: cannot be read ({err.strerror or err}).") from err


def read_arrays(path: str | Path) -> np.ndarray | dict[str, np.ndarray]:
    """An ``.npy`` array or an ``.npz`` archive's arrays, told apart by content as ``np.load`` does.

    Raises:
        DataFileError: neither, or unreadable as either (see ``read_npy`` and ``read_npz``).
    """
    path = Path(path)
    file_size(path)
    if _magic(path) == _NPY_MAGIC:
        return read_npy(path)
    if zipfile.is_zipfile(path):
        return read_npz(path)
    raise DataFileError(
        f"{shown(path)}: is neither a .npy array nor a .npz archive.",
        hint="Write it with np.save(path, array) or np.savez(path, X=array).",
    )


# --- JSON ----------------------------------------------------------------------------------------


def _read_at_most(path: Path, limit: int, kind: str) -> bytes:
    """The file's bytes, refusing it if it has grown past ``limit`` since its size was checked."""
    with path.open("rb") as fp:
        data = fp.read(limit + 1)
    if len(data) > limit:
        raise DataFileError(
            f"{shown(path)}: grew past {size_text(limit)} while it was read, more than onnxgate "
            f"reads as {kind}.",
            hint="Let whatever writes it finish first.",
        )
    return data


def read_text(path: str | Path, *, kind: str = "text") -> str:
    """A UTF-8 text file (a BOM is dropped), no larger than ``1/JSON_SHARE`` of the cap.

    Args:
        path: the file.
        kind: what the text is, for messages (``JSON``, ``labels``).

    Raises:
        DataFileError: missing, empty, too large, or not UTF-8.
    """
    path = Path(path)
    where = shown(path)
    size = file_size(path)
    limit = max_data_bytes() // JSON_SHARE
    if size > limit:
        raise DataFileError(
            f"{where}: is {size_text(size)} of {kind}, more than the {size_text(limit)} onnxgate "
            "reads as text (parsed, it would take about ten times that in memory).",
            hint=f"Save data this large as .npy or .npz, or raise {MAX_DATA_BYTES_ENV} (text may "
            f"be 1/{JSON_SHARE} of it).",
        )
    try:
        return _read_at_most(path, limit, kind).decode("utf-8-sig")
    except OSError as err:
        raise DataFileError(f"{where}: cannot be read ({err.strerror or err}).") from err
    except UnicodeDecodeError as err:
        byte = err.object[err.start : err.start + 1]
        raise DataFileError(
            f"{where}: is not UTF-8 text (byte {err.start} is {byte!r}).",
            hint=f"Save the {kind} as UTF-8.",
        ) from err


def read_json(path: str | Path) -> Any:
    """A JSON document, refused when empty, not UTF-8, malformed, or larger than its share of the cap.

    Raises:
        DataFileError: naming the file and, for malformed JSON, the line and column.
    """
    path = Path(path)
    where = shown(path)
    text = read_text(path, kind="JSON")
    if not text.strip():
        raise DataFileError(f"{where}: holds no JSON (only whitespace).")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataFileError(
            f"{where}: is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}.",
            hint="Check it with `python -m json.tool FILE`.",
        ) from err
    except RecursionError as err:
        raise DataFileError(f"{where}: nests deeper than a JSON reader can follow.") from err
    except MemoryError as err:
        raise _no_memory(where, err) from err
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise DataFileError(f"{where}: is not readable JSON ({first_line(err)}).") from err


def json_array(values: Any, where: str) -> np.ndarray:
    """A JSON value (nested lists of numbers, booleans or strings) as an array.

    Args:
        values: the parsed JSON value.
        where: the file and key, for messages (``in.json: input 'x'``).

    Raises:
        DataFileError: ragged rows, nesting too deep, or values that are not one numeric, boolean
            or string type (nulls, objects, mixed types, integers beyond 64 bits).
    """
    try:
        array = np.asarray(values)
    except MemoryError as err:
        raise _no_memory(where, err) from err
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        raise DataFileError(
            f"{where} is not a regular nested list: rows of different lengths or nesting too "
            f"deep ({first_line(err, 200)}).",
            hint="Give every row of a dimension the same length.",
        ) from err
    if array.dtype.kind == "O":
        raise DataFileError(
            f"{where}: its values are of mixed types or integers beyond 64 bits (or hold null "
            "or objects); expected nested lists of numbers, booleans or strings.",
        )
    return _native(array, where)


# --- TensorProto .pb -----------------------------------------------------------------------------

_PROTO_KINDS = (TensorProto, SequenceProto, MapProto, OptionalProto)


def _tensor_bytes(tensor: TensorProto, where: str) -> int:
    """The bytes a TensorProto's array will take, once its dims are found to match its data.

    Raises:
        DataFileError: segmented or external data, an unknown element type, negative dims, or
            dims that declare more (or less) data than the message holds.
    """
    name = f"{where} tensor {tensor.name!r}" if tensor.name else where
    if tensor.HasField("segment"):
        raise DataFileError(f"{name}: is a segment of a larger tensor; a data file holds it whole.")
    if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
        location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
        raise DataFileError(
            f"{name}: keeps its data in an external file ({shown(location)!r}); refused in a "
            "data file, which must hold its values.",
            hint="Write it with onnx.numpy_helper.from_array(array, name).SerializeToString().",
        )
    elem = tensor.data_type
    if elem == TensorProto.UNDEFINED or elem not in TensorProto.DataType.values():
        raise DataFileError(
            f"{name}: declares no known element type (data_type {elem}); the file is not a "
            "TensorProto or is corrupt."
        )
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        raise DataFileError(f"{name}: declares negative dims {dims}.")
    count = math.prod(dims)
    type_name = elem_type_name(elem)
    nbytes = tensor_nbytes(elem, dims)
    if elem == TensorProto.STRING:
        held, expected, unit = len(tensor.string_data), count, "strings"
        nbytes = sum(len(s) for s in tensor.string_data)
    elif tensor.HasField("raw_data"):
        held, expected, unit = len(tensor.raw_data), nbytes, "bytes"
    else:
        field = helper.tensor_dtype_to_field(elem)
        held, unit = len(getattr(tensor, field)), f"values in {field}"
        if elem in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
            expected = 2 * count
        elif type_name in ("int4", "uint4", "float4e2m1", "int2", "uint2"):
            expected = nbytes  # packed: one int32_data entry per byte
        else:
            expected = count
    if held != expected:
        if unit == "bytes":
            declared, holds = f"{size_text(expected)} of raw_data", size_text(held)
        else:
            declared, holds = f"{expected:,} {unit}", f"{held:,}"
        raise DataFileError(
            f"{name}: declares {dtype_name(elem)} {dims} ({declared}) and holds {holds}: it is "
            "truncated or its dims lie.",
            hint="Write it again with onnx.numpy_helper.from_array(array, name).",
        )
    return nbytes or 0


def _proto_bytes(proto: Any, where: str) -> int:
    """The bytes of every tensor in a Tensor, Sequence, Map or Optional proto, each checked."""
    if isinstance(proto, TensorProto):
        return _tensor_bytes(proto, where)
    if isinstance(proto, SparseTensorProto):
        raise DataFileError(f"{where}: holds a sparse tensor; onnxgate reads dense data only.")
    if isinstance(proto, SequenceProto):
        if len(proto.sparse_tensor_values):
            raise DataFileError(f"{where}: holds sparse tensors; onnxgate reads dense data only.")
        children = [
            *proto.tensor_values,
            *proto.sequence_values,
            *proto.map_values,
            *proto.optional_values,
        ]
        return sum(_proto_bytes(child, where) for child in children)
    if isinstance(proto, MapProto):
        return _proto_bytes(proto.values, where)
    if isinstance(proto, OptionalProto):
        kind = proto.WhichOneof("value")
        return 0 if kind is None else _proto_bytes(getattr(proto, kind), where)
    return 0


def read_pb(path: str | Path, kind: type = TensorProto) -> tuple[str, Any]:
    """A ``.pb`` file's name and value: a TensorProto as an array, or a sequence, map or optional.

    Args:
        path: the file.
        kind: the message it holds: ``TensorProto`` (the default), ``SequenceProto``,
            ``MapProto`` or ``OptionalProto``.

    Raises:
        DataFileError: empty, larger than protobuf or the cap allow, not parseable as ``kind``,
            a tensor whose dims declare more (or less) data than it holds, external or sparse
            data, or values that cannot be converted.
    """
    if kind not in _PROTO_KINDS:
        raise TypeError(f"read_pb reads {', '.join(k.__name__ for k in _PROTO_KINDS)}")
    path = Path(path)
    where = shown(path)
    size = file_size(path)
    cap = max_data_bytes()
    if size > min(cap, PROTOBUF_LIMIT):
        raise _too_large(where, "is", size, min(cap, PROTOBUF_LIMIT))
    proto = kind()
    try:
        proto.ParseFromString(_read_at_most(path, min(cap, PROTOBUF_LIMIT), kind.__name__))
    except OSError as err:
        raise DataFileError(f"{where}: cannot be read ({err.strerror or err}).") from err
    except Exception as err:  # protobuf raises DecodeError, RuntimeWarning, ValueError...
        raise DataFileError(
            f"{where}: is not a readable {kind.__name__} ({first_line(err)}).",
            hint="Write it with onnx.numpy_helper.from_array(array, name).SerializeToString().",
        ) from err
    declared = _proto_bytes(proto, where)
    if declared > cap:  # typed fields take more memory than the varints in the file
        raise _too_large(where, "its tensors declare", declared, cap)
    try:
        if isinstance(proto, SequenceProto):
            return proto.name, numpy_helper.to_list(proto)
        if isinstance(proto, MapProto):
            return proto.name, numpy_helper.to_dict(proto)
        if isinstance(proto, OptionalProto):
            return proto.name, numpy_helper.to_optional(proto)
        return proto.name, _native(numpy_helper.to_array(proto), where)
    except MemoryError as err:
        raise _no_memory(where, err) from err
    except Exception as err:  # numpy_helper raises TypeError, ValueError, UnicodeDecodeError...
        raise DataFileError(
            f"{where}: is not a readable {kind.__name__} ({first_line(err)})."
        ) from err
