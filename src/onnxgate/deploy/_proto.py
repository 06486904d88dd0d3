"""Triton's ``model_config.proto`` messages, from ``tritonclient`` (the ``deploy`` extra)."""

from __future__ import annotations

from onnxgate.errors import ConfigError, ExtraMissing

try:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2
except ImportError as err:  # pragma: no cover - the extra is installed in the test environment
    raise ExtraMissing(
        f"`onnxgate deploy` needs tritonclient's model_config_pb2 ({err}).",
        hint="pip install 'onnxgate[deploy]'",
    ) from err

__all__ = ["DATATYPES", "model_config_pb2", "text_format", "triton_datatype"]

DATATYPES: dict[str, str] = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
    "string": "TYPE_STRING",
}
"""ONNX element type (as onnxgate's signatures spell it) → Triton's ``DataType``."""


def triton_datatype(dtype: str | None, where: str) -> int:
    """The ``DataType`` enum value of an ONNX element type.

    Raises:
        ConfigError: the type has no Triton datatype (complex, sequences, maps).
    """
    name = DATATYPES.get(dtype or "")
    if name is None:
        raise ConfigError(
            f"{where}: element type {dtype!r} has no Triton datatype.",
            hint="Triton serves tensors of bool, integer, float and string types only.",
        )
    return model_config_pb2.DataType.Value(name)


def datatype_name(value: int) -> str:
    """``TYPE_FP32`` for its enum value."""
    return model_config_pb2.DataType.Name(value)
