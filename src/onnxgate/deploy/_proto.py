"""Triton's ``model_config.proto`` messages, from ``tritonclient`` (the ``deploy`` extra)."""

from __future__ import annotations

from onnxgate.errors import ConfigError, ExtraMissing, first_line
from onnxgate.serve import OIP_OF

try:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2
except ImportError as err:  # pragma: no cover - the extra is installed in the test environment
    raise ExtraMissing(
        "`onnxgate deploy` needs the 'deploy' extra for tritonclient's model_config_pb2 "
        f"({first_line(err)}).",
        extra="deploy",
    ) from err

__all__ = ["DATATYPES", "model_config_pb2", "text_format", "triton_datatype"]

DATATYPES: dict[str, str] = {
    onnx: "TYPE_STRING" if oip == "BYTES" else f"TYPE_{oip}" for onnx, oip in OIP_OF.items()
} | {"bfloat16": "TYPE_BF16"}
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
