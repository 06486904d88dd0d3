"""Feeds from files, and the one place where feeds are checked against a model's signature.

A feed is a mapping from input name to value; a :class:`Sample` is one feed with a label that says
where it came from (``inputs.npz``, ``test_data_set_0``, ``batch=3,seq=17``). Files are read as
data, never as code, by the one reader in ``_files`` (``.npz`` without pickle and with every
declared size checked first, ``.pb`` as TensorProto, JSON as JSON); this module decides which
files make a sample and what the values are called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import MapProto, OptionalProto, SequenceProto, TensorProto
from onnx.helper import tensor_dtype_to_np_dtype

from onnxgate._pathtext import shown
from onnxgate.data._files import json_array, read_json, read_npz, read_pb
from onnxgate.errors import FeedError
from onnxgate.model import Dim, Signature, TensorSpec

Feeds = dict[str, Any]
"""Input name → value (a NumPy array for tensor inputs)."""


@dataclass(frozen=True)
class Sample:
    """One set of inputs, with a label that says where it came from."""

    label: str
    feeds: Feeds
    dims: dict[str, int] = field(default_factory=dict)
    """The value chosen for each symbolic dimension, when the sample was generated."""

    def shapes(self) -> dict[str, list[int]]:
        """Shape of every array input."""
        return {k: list(np.shape(v)) for k, v in self.feeds.items() if isinstance(v, np.ndarray)}

    def sized(self, signature: Signature) -> Sample:
        """This sample with ``dims`` read from its arrays where it has none (loaded data).

        Each symbolic dimension of the signature gets the size it has in the first input that
        uses it, so reports can name the shapes real data was run at.
        """
        if self.dims:
            return self
        return dataclasses.replace(self, dims=feed_dims(signature, self.feeds))


def feed_dims(signature: Signature, feeds: Feeds) -> dict[str, int]:
    """The size each symbolic dimension of ``signature`` takes in ``feeds`` (first use wins)."""
    dims: dict[str, int] = {}
    for spec in signature.inputs:
        value = feeds.get(spec.name)
        if spec.shape is None or not isinstance(value, np.ndarray):
            continue
        for dim, size in zip(spec.shape, value.shape, strict=False):
            if isinstance(dim, str) and dim:
                dims.setdefault(dim, int(size))
    return dims


_ONNX_ELEM = {name.lower(): value for name, value in TensorProto.DataType.items() if value != 0} | {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
}


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type name (``float32``, ``int64``, ``string``...).

    Raises:
        FeedError: the name is not an ONNX tensor element type.
    """
    elem = _ONNX_ELEM.get(dtype)
    if elem is None:
        raise FeedError(f"{dtype!r} is not an ONNX tensor element type.")
    return np.dtype(tensor_dtype_to_np_dtype(elem))


def _dims_text(shape: tuple[Dim, ...] | None) -> str:
    if shape is None:
        return "of any rank"
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"


def describe_spec(spec: TensorSpec) -> str:
    """``int64 [batch, seq]``: how an input is described in error messages."""
    if spec.shape is None and spec.type and not spec.type.startswith("tensor("):
        return spec.type
    return f"{spec.dtype} {_dims_text(spec.shape)}"


def _describe_value(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


def validate_feeds(signature: Signature, feeds: Mapping[str, Any], *, where: str = "") -> Feeds:
    """Check feeds against a signature and return them as a plain dict.

    Every input must be present and nothing else may be; each array must have the input's dtype and
    rank, its fixed dimensions, and one size per symbolic dimension across all inputs. Initializer
    overrides (graph inputs with a default) may be fed or left out.

    Args:
        signature: what the model expects.
        feeds: input name → value.
        where: where the feeds came from, for messages (a file, a sample label).

    Raises:
        FeedError: naming the input, what was expected and what was given.
    """
    at = f" in {where}" if where else ""
    expected = {spec.name: spec for spec in signature.inputs}
    optional = set(signature.initializer_inputs)
    extra = [name for name in feeds if name not in expected and name not in optional]
    if extra:
        raise FeedError(
            f"input {extra[0]!r}{at} is not an input of the model; it expects "
            + ", ".join(f"'{s.name}' ({describe_spec(s)})" for s in signature.inputs)
            + ".",
            hint="Rename the array to the model's input name (see `onnxgate inspect MODEL`).",
        )
    missing = [name for name in expected if name not in feeds]
    if missing:
        spec = expected[missing[0]]
        raise FeedError(
            f"input {spec.name!r} ({describe_spec(spec)}) is missing{at}; given: "
            + (", ".join(repr(k) for k in feeds) or "nothing")
            + ".",
            hint="Add it to the data, or generate all inputs with synthetic feeds.",
        )
    sizes: dict[str, tuple[int, str]] = {}
    checked: Feeds = {}
    for name, value in feeds.items():
        spec = expected.get(name)
        checked[name] = value if spec is None else _check_one(spec, value, sizes, at)
    return checked


def _check_one(spec: TensorSpec, value: Any, sizes: dict[str, tuple[int, str]], at: str) -> Any:
    if spec.type is not None and not spec.type.startswith("tensor("):
        if isinstance(value, np.ndarray):
            raise FeedError(
                f"input {spec.name!r}{at} is {spec.type}, which an array cannot express.",
                hint="Pass a test_data_set_* folder whose input_N.pb is a SequenceProto, MapProto "
                "or OptionalProto (onnx.numpy_helper.from_list / from_dict / from_optional).",
            )
        return value
    if spec.type is None:
        return value  # untyped inputs are left to the runtime
    if not isinstance(value, np.ndarray):
        raise FeedError(
            f"input {spec.name!r}{at} expects a {describe_spec(spec)} array; got {_describe_value(value)}."
        )
    want = numpy_dtype(spec.dtype or "")
    got = value.dtype
    same = got == want or (want == np.dtype(object) and got.kind in "OUS")
    if not same:
        raise FeedError(
            f"input {spec.name!r}{at} expects {describe_spec(spec)}; got {got} {list(value.shape)}.",
            hint=f"Cast it to {spec.dtype} (e.g. array.astype(np.{want.name})) before saving.",
        )
    if want == np.dtype(object) and got.kind == "S":
        try:  # byte strings from np.savez: text, not "b'...'"
            value = np.char.decode(value, "utf-8").astype(object)
        except UnicodeDecodeError as err:
            raise FeedError(
                f"input {spec.name!r}{at} holds bytes that are not UTF-8 text."
            ) from err
    elif want == np.dtype(object) and got.kind == "U":
        value = value.astype(object)
    if value.size == 0:
        raise FeedError(
            f"input {spec.name!r}{at} is empty ({list(value.shape)}): nothing would be computed "
            "or compared.",
            hint="Give every dimension a size of 1 or more.",
        )
    if spec.shape is None:
        return value
    if value.ndim != len(spec.shape):
        raise FeedError(
            f"input {spec.name!r}{at} expects {describe_spec(spec)} ({len(spec.shape)} "
            f"dimension(s)); got {got} {list(value.shape)} ({value.ndim}).",
            hint=f"Reshape it to {len(spec.shape)} dimension(s).",
        )
    for axis, (dim, size) in enumerate(zip(spec.shape, value.shape, strict=True)):
        if isinstance(dim, int) and dim > 0 and size != dim:
            raise FeedError(
                f"input {spec.name!r}{at} expects {describe_spec(spec)}; got {list(value.shape)}: "
                f"axis {axis} must be {dim}, not {size}."
            )
        if isinstance(dim, str) and dim:
            seen = sizes.setdefault(dim, (size, spec.name))
            if seen[0] != size:
                raise FeedError(
                    f"input {spec.name!r}{at} has {dim}={size} on axis {axis}, but input "
                    f"{seen[1]!r} has {dim}={seen[0]}; a symbolic dimension has one size per run."
                )
    return value


def _from_npz(path: Path) -> Sample:
    return Sample(shown(path.name), read_npz(path))


def _from_json(path: Path, signature: Signature | None) -> list[Sample]:
    document = read_json(path)
    records = document if isinstance(document, list) else [document]
    if not records:
        raise FeedError(f"{shown(path)}: holds no sample (an empty list).")
    dtypes = {s.name: s.dtype for s in signature.inputs} if signature else {}
    samples = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise FeedError(
                f"{shown(path)}: entry {index} is a {type(record).__name__}; expected an object "
                '{"input_name": nested list, ...} or a list of such objects.'
            )
        where = shown(path) if len(records) == 1 else f"{shown(path)}[{index}]"
        feeds = {
            name: _json_array(where, name, values, dtypes.get(name))
            for name, values in record.items()
        }
        label = shown(path.name) if len(records) == 1 else f"{shown(path.name)}[{index}]"
        samples.append(Sample(label, feeds))
    return samples


def _json_array(where: str, name: str, values: Any, dtype: str | None) -> np.ndarray:
    """JSON values as the input's dtype, refusing conversions that would change a value."""
    natural = json_array(values, f"{where}: input {name!r}")
    if dtype is None:
        return natural
    want = numpy_dtype(dtype)
    if want == np.dtype(object):
        if natural.size and natural.dtype.kind != "U":
            raise FeedError(f"{where}: input {name!r} expects strings; got {natural.dtype} values.")
        return natural.astype(object)
    if natural.size and (
        natural.dtype.kind in "US" or (natural.dtype.kind == "b") != (want.kind == "b")
    ):
        raise FeedError(f"{where}: input {name!r} expects {dtype}; got {natural.dtype} values.")
    try:
        with np.errstate(over="raise", invalid="raise"):
            cast = natural.astype(want)
    except (OverflowError, FloatingPointError, ValueError) as err:
        raise FeedError(f"{where}: input {name!r}: values do not fit {dtype} ({err}).") from err
    if want.kind in "iub" and not np.array_equal(cast.astype(natural.dtype), natural):
        raise FeedError(
            f"{where}: input {name!r} expects {dtype}, and some values are not exactly {dtype} "
            "(fractions, or out of range); fix the data rather than have them rounded."
        )
    return cast


def _read_pb(path: Path, type_string: str | None = None) -> tuple[str, Any]:
    """A TensorProto, or a SequenceProto/MapProto/OptionalProto when the input is of that type."""
    kinds = {"seq(": SequenceProto, "map(": MapProto, "optional(": OptionalProto}
    proto_class = next(
        (cls for prefix, cls in kinds.items() if (type_string or "").startswith(prefix)),
        TensorProto,
    )
    return read_pb(path, proto_class)


def _index(path: Path) -> int:
    found = re.search(r"(\d+)", path.stem)
    return int(found.group(1)) if found else 0


def _from_pb_folder(folder: Path, signature: Signature | None) -> Sample:
    files = sorted(folder.glob("input_*.pb"), key=_index)
    if not files:
        raise FeedError(f"{shown(folder)}: has no input_*.pb files.")
    names = [s.name for s in signature.inputs] if signature else []
    types = [s.type for s in signature.inputs] if signature else []
    feeds = {}
    for position, file in enumerate(files):
        # the ONNX test-data convention is positional: input_N.pb is the model's N-th input
        name, array = _read_pb(file, types[position] if position < len(types) else None)
        if not name:  # ONNX test data often leaves names out: inputs are then positional
            if position >= len(names):
                raise FeedError(
                    f"{shown(file)}: the tensor has no name and the model has only {len(names)} input(s)."
                )
            name = names[position]
        feeds[name] = array
    return Sample(shown(folder.name), feeds)


def load_feeds(path: str | Path, *, signature: Signature | None = None) -> list[Sample]:
    """Read samples from a file or folder.

    Accepted: an ``.npz`` archive (one sample), a JSON document (an object of input name → nested
    list, or a list of them), a ``test_data_set_*`` folder of ``input_*.pb`` TensorProtos, a
    folder holding several ``test_data_set_*`` folders, or a folder of ``.npz`` files.

    Args:
        path: the file or folder.
        signature: the model's signature; it gives JSON values their dtype and unnamed ``.pb``
            tensors their input name.

    Raises:
        FeedError: the path is missing, of an unknown kind, or not readable as data.
    """
    path = Path(path)
    if path.is_dir():
        sets = sorted(p for p in path.glob("test_data_set_*") if p.is_dir())
        if sets:
            return [_from_pb_folder(p, signature) for p in sets]
        if any(path.glob("input_*.pb")):
            return [_from_pb_folder(path, signature)]
        archives = sorted(path.glob("*.npz"))
        if archives:
            return [_from_npz(p) for p in archives]
        raise FeedError(
            f"{shown(path)}: holds no test_data_set_* folders, input_*.pb files or .npz archives."
        )
    if not path.exists():
        raise FeedError(f"{shown(path)}: no such file.")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return [_from_npz(path)]
    if suffix == ".json":
        return _from_json(path, signature)
    if suffix == ".pb":
        name, array = _read_pb(path)
        if not name:
            if not signature or len(signature.inputs) != 1:
                raise FeedError(f"{shown(path)}: the tensor has no name; name it, or use a folder.")
            name = signature.inputs[0].name
        return [Sample(shown(path.name), {name: array})]
    raise FeedError(
        f"{shown(path)}: unknown kind of input data ({suffix or 'no suffix'}).",
        hint="Use .npz, .json, an input_*.pb file, or a test_data_set_* folder.",
    )


def feeds_digest(feeds: Mapping[str, Any]) -> str:
    """A key for a set of feeds: the same arrays give the same key.

    Strings are keyed by their text, whether held as objects (as sessions take them) or as
    fixed-width unicode (as a golden file keeps them).
    """
    h = hashlib.sha256()
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        if value.dtype.kind == "U":
            value = value.astype(object)
        h.update(name.encode())
        h.update(str(value.dtype).encode() + str(value.shape).encode())
        h.update(value.tobytes() if value.dtype != object else json.dumps(value.tolist()).encode())
    return h.hexdigest()


def unicode_array(value: Any) -> np.ndarray | None:
    """A string tensor as a fixed-width unicode array, which an .npz holds without pickle.

    ONNX Runtime and the reference evaluator hand strings out as object arrays; NumPy can only
    store those with pickle, which no reader of onnxgate's files allows.

    Returns:
        ``value`` itself when it is not an object array; its unicode copy when every element is a
        ``str`` that survives the copy (NumPy drops trailing NUL characters); None otherwise.
    """
    if not isinstance(value, np.ndarray) or value.dtype != object:
        return value
    items = value.ravel().tolist()
    if not all(isinstance(item, str) for item in items):
        return None
    text = np.array(items, dtype=str).reshape(value.shape)
    return text if text.ravel().tolist() == items else None


def storable_feed(name: str, value: Any) -> np.ndarray:
    """A feed as an .npz holds it without pickle, for a worker: strings as fixed-width unicode.

    Raises:
        FeedError: a string feed whose elements would not cross unchanged (``bytes``, or text
            ending in NUL characters, which a unicode array drops).
    """
    array = np.asarray(value)
    text = unicode_array(array)
    if text is None:
        raise FeedError(
            f"input {name!r}: a string feed holds an element that is not text a unicode array "
            "keeps unchanged (bytes, or text ending in NUL characters); a worker process gets "
            "its feeds without pickle.",
            hint="Give str elements without trailing NUL characters (decode bytes as UTF-8).",
        )
    return text
