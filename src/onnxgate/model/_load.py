"""Loading model files that nobody vouched for.

A model file is untrusted input. Before a single weight byte is read, every external-data entry is
checked: its location must stay inside the model's folder (no ``..``, no absolute path, no symlink
out), its file must exist and be a regular file, and its offset and length must lie inside that
file and agree with the tensor's shape. Loading for inspection reads only the ``.onnx`` file, so
describing a model whose side files total several GB costs about the same as a small one.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import ModelProto, TensorProto

from onnxgate.errors import ModelLoadError, UnsafeModelError
from onnxgate.model._types import tensor_nbytes
from onnxgate.model._walk import iter_model_tensors

log = logging.getLogger(__name__)

PROTOBUF_LIMIT = 2**31 - 1
"""Protobuf cannot serialise or parse a message of 2 GiB or more."""

ORT_MEMORY_MARKER = "_ORT_MEM_ADDR_"
"""Location ONNX Runtime reserves for tensors whose offset is an address in its own memory."""

# Leading bytes of files people mistake for ONNX models, with what to tell them.
_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0, b"PK\x03\x04", "a zip archive (a PyTorch .pt/.pth checkpoint or a TorchScript file?)"),
    (0, b"\x80", "a Python pickle (a joblib/pickle estimator or a PyTorch checkpoint?)"),
    (0, b"\x89HDF", "an HDF5 file (a Keras model?)"),
    (4, b"TFL3", "a TensorFlow Lite flatbuffer"),
    (4, b"ORTM", "an ONNX Runtime .ort flatbuffer (load it with ONNX Runtime directly)"),
    (0, b"{", "a JSON document"),
    (0, b"<", "an XML or HTML document"),
    (0, b"\x7fELF", "a compiled program or shared library"),
    (0, b"\x00\x00\x00\x00", "a file starting with zero bytes (truncated or overwritten?)"),
)


@dataclass(frozen=True)
class ExternalDataRef:
    """One tensor whose bytes live in a side file, checked to be safe to read."""

    tensor: str
    location: str
    path: Path
    offset: int
    length: int


@dataclass(frozen=True)
class LoadedModel:
    """A parsed model and what is known about its files.

    ``proto`` holds the graph; when the model keeps weights in external data and the model was
    loaded without them, those tensors are still marked external and carry no bytes.
    """

    path: Path
    proto: ModelProto
    size_bytes: int
    external_data: tuple[ExternalDataRef, ...] = field(default=())
    weights_loaded: bool = True

    @property
    def external_bytes(self) -> int:
        """Bytes of tensor data kept in side files."""
        return sum(ref.length for ref in self.external_data)

    @property
    def external_files(self) -> dict[str, int]:
        """Each side file (as the model names it) with its size on disk."""
        files: dict[str, int] = {}
        for ref in self.external_data:
            if ref.location not in files:
                files[ref.location] = ref.path.stat().st_size
        return files


def _describe_foreign(head: bytes) -> str | None:
    for offset, magic, what in _SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return what
    return None


def _read_model_bytes(path: Path) -> bytes:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ModelLoadError(
            f"{path}: no such file.", hint="Check the path; models are passed as .onnx files."
        ) from None
    except OSError as err:
        raise ModelLoadError(f"{path}: cannot be read ({err.strerror}).") from err
    if stat.S_ISDIR(info.st_mode):
        raise ModelLoadError(f"{path}: is a folder, not a model file.", hint="Pass the .onnx file.")
    if not stat.S_ISREG(info.st_mode):
        raise ModelLoadError(f"{path}: is not a regular file.", hint="Pass the .onnx file itself.")
    if info.st_size == 0:
        raise ModelLoadError(f"{path}: is empty (0 bytes).", hint="Re-export or re-copy the model.")
    if info.st_size > PROTOBUF_LIMIT:
        raise ModelLoadError(
            f"{path}: is {info.st_size / 2**30:.1f} GiB, above protobuf's 2 GiB limit, so no ONNX "
            "reader can parse it.",
            hint="Re-save the model with its weights in external data "
            "(onnx.save_model(..., save_as_external_data=True)).",
        )
    try:
        return path.read_bytes()
    except OSError as err:
        raise ModelLoadError(f"{path}: cannot be read ({err.strerror}).") from err


def _parse(path: Path, data: bytes) -> ModelProto:
    foreign = _describe_foreign(data[:8])
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as err:
        what = f"it looks like {foreign}" if foreign else "the file is truncated or not ONNX"
        raise ModelLoadError(
            f"{path}: is not a valid ONNX model: {what} (protobuf: {err}).",
            hint="Pass an .onnx file; if it was copied, check that the copy is complete.",
        ) from err
    if not proto.HasField("graph") or proto.ir_version <= 0:
        what = f"it looks like {foreign}" if foreign else "it parses as protobuf but has no graph"
        missing = "graph" if not proto.HasField("graph") else "ir_version"
        raise ModelLoadError(
            f"{path}: is not an ONNX model: {what} (no {missing}).",
            hint="Pass an .onnx file written by an ONNX exporter.",
        )
    corrupt = _undecodable_field(proto)
    if corrupt:
        raise ModelLoadError(
            f"{path}: is corrupted: the text field {corrupt} is not valid UTF-8.",
            hint="Re-export the model or copy it again; the file was damaged.",
        )
    return proto


def _undecodable_field(message: Message, trail: str = "") -> str | None:
    """Where a string field holds bytes that are not UTF-8 (upb hands those back as bytes)."""
    for descriptor, value in message.ListFields():
        repeated = _is_repeated(descriptor)
        name = f"{trail}.{descriptor.name}" if trail else descriptor.name
        if descriptor.type == FieldDescriptor.TYPE_STRING:
            if any(isinstance(v, bytes) for v in (value if repeated else [value])):
                return name
        elif descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            for index, child in enumerate(value if repeated else [value]):
                found = _undecodable_field(child, f"{name}[{index}]" if repeated else name)
                if found:
                    return found
    return None


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _entries(tensor: TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _int_entry(path: Path, tensor: TensorProto, entries: dict[str, str], key: str) -> int | None:
    raw = entries.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ModelLoadError(
            f"{path}: tensor '{tensor.name}' has external-data {key} {raw!r}, not a byte count."
        )
    return value


def _check_external(path: Path, tensor: TensorProto, base: Path) -> ExternalDataRef:
    entries = _entries(tensor)
    location = entries.get("location", "")
    where = f"{path}: tensor '{tensor.name}'"
    if not location:
        raise ModelLoadError(f"{where} is marked external but names no location.")
    if ORT_MEMORY_MARKER in location:
        raise UnsafeModelError(
            f"{where} uses ONNX Runtime's in-memory marker {location!r} as its location; some "
            "releases then read the offset as a raw memory address and crash.",
            hint="Re-save the model with its external data in a file next to the .onnx file.",
        )
    if tensor.data_type == TensorProto.STRING:
        raise ModelLoadError(
            f"{where} is a string tensor kept in external data, which ONNX does not allow.",
            hint="Re-save the model with string tensors stored inline.",
        )
    pure = Path(location)
    if (
        pure.is_absolute()
        or location.startswith(("/", "\\"))
        or (len(location) > 1 and location[1] == ":")
    ):
        raise UnsafeModelError(
            f"{where} points its external data at the absolute path {location!r}; "
            "external data must stay inside the model's folder.",
            hint="Re-save the model with a relative location next to the .onnx file.",
        )
    target = base / location
    try:
        real = Path(os.path.realpath(target))
    except (OSError, ValueError) as err:
        raise ModelLoadError(
            f"{where} has an unusable external-data location {location!r} ({err})."
        ) from err
    if not real.is_relative_to(base):
        how = "through a symlink" if ".." not in pure.parts else "with '..'"
        raise UnsafeModelError(
            f"{where} points its external data {how} outside the model's folder "
            f"({location!r} resolves to {real}).",
            hint="Copy the data file into the model's folder and re-save with a relative location.",
        )
    try:
        info = real.stat()
    except FileNotFoundError:
        raise ModelLoadError(
            f"{where} keeps its data in {location!r}, which does not exist next to the model.",
            hint="External-data files must travel with the .onnx file; copy them alongside.",
        ) from None
    except (OSError, ValueError) as err:
        raise ModelLoadError(
            f"{where} keeps its data in {location!r}, which cannot be read ({err})."
        ) from err
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeModelError(
            f"{where} keeps its data in {location!r}, which is not a regular file."
        )
    offset = _int_entry(path, tensor, entries, "offset") or 0
    length = _int_entry(path, tensor, entries, "length")
    expected = tensor_nbytes(tensor.data_type, list(tensor.dims))
    if any(d < 0 for d in tensor.dims):
        raise ModelLoadError(f"{where} has a negative dimension {list(tensor.dims)}.")
    if offset > info.st_size:
        raise ModelLoadError(
            f"{where} starts at byte {offset} of {location!r}, which has only {info.st_size}.",
            hint="The data file is truncated or belongs to another model; copy it again.",
        )
    if length is None:
        length = expected if expected is not None else info.st_size - offset
    elif expected is not None and length != expected:
        raise ModelLoadError(
            f"{where} says its external data is {length} bytes, but its shape "
            f"{list(tensor.dims)} needs {expected}.",
            hint="The model and its data file do not belong together; re-export them.",
        )
    if offset + length > info.st_size:
        raise ModelLoadError(
            f"{where} reads bytes {offset}..{offset + length} of {location!r}, "
            f"which has only {info.st_size}.",
            hint="The data file is truncated or belongs to another model; copy it again.",
        )
    return ExternalDataRef(tensor.name, location, real, offset, length)


def _read_external(path: Path, tensor: TensorProto, ref: ExternalDataRef) -> None:
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        data = handle.read(ref.length)
    if len(data) != ref.length:
        raise ModelLoadError(f"{path}: external data of '{ref.tensor}' ended early.")
    tensor.raw_data = data
    del tensor.external_data[:]
    tensor.data_location = TensorProto.DEFAULT


def inline_external(model_path: Path, tensor: TensorProto) -> TensorProto:
    """A copy of a tensor of ``model_path`` with its external data read in.

    The same checks as ``load_model`` (no path outside the model's folder, no short file).

    Raises:
        ModelLoadError: the data file is missing or does not match. UnsafeModelError: it lies
            outside the model's folder.
    """
    copy = TensorProto()
    copy.CopyFrom(tensor)
    if copy.data_location == TensorProto.EXTERNAL:
        base = Path(os.path.realpath(model_path.parent))
        _read_external(model_path, copy, _check_external(model_path, copy, base))
    return copy


def load_model(path: str | os.PathLike[str], *, load_weights: bool = False) -> LoadedModel:
    """Read and validate a model file without trusting it.

    Args:
        path: the ``.onnx`` file.
        load_weights: also read tensors kept in external data into the proto. Refused when the
            result would pass protobuf's 2 GiB limit; runtimes should then be given the path.

    Returns:
        The parsed model with its external-data references checked.

    Raises:
        ModelLoadError: the file is missing, empty, not ONNX, truncated or inconsistent.
        UnsafeModelError: external data would be read from outside the model's folder.
    """
    model_path = Path(path)
    data = _read_model_bytes(model_path)
    proto = _parse(model_path, data)
    base = Path(os.path.realpath(model_path.parent))
    external = [
        (tensor, _check_external(model_path, tensor, base))
        for tensor in iter_model_tensors(proto)
        if tensor.data_location == TensorProto.EXTERNAL
    ]
    refs = tuple(ref for _, ref in external)
    if load_weights and external:
        total = len(data) + sum(ref.length for ref in refs)
        if total > PROTOBUF_LIMIT:
            raise ModelLoadError(
                f"{model_path}: its weights total {total / 2**30:.1f} GiB, above protobuf's 2 GiB "
                "limit, so they cannot be held in one in-memory model.",
                hint="Work from the file path; ONNX Runtime reads external data itself.",
            )
        for tensor, ref in external:
            _read_external(model_path, tensor, ref)
    log.debug("loaded %s (%d bytes, %d external tensors)", model_path, len(data), len(refs))
    return LoadedModel(
        path=model_path,
        proto=proto,
        size_bytes=len(data),
        external_data=refs,
        weights_loaded=load_weights or not external,
    )
