"""Triton's ``model_config.proto`` messages, from ``tritonclient`` (the ``deploy`` extra).

``deploy check`` parses repositories written by hand with them. The config ``deploy triton``
writes is built by ``serve._model_config`` (same field numbers and enum values), where
``DATATYPES`` and ``triton_datatype`` live.
"""

from __future__ import annotations

from onnxgate.errors import ExtraMissing, first_line
from onnxgate.serve import TRITON_DATATYPES as DATATYPES
from onnxgate.serve import triton_datatype

try:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2
except ImportError as err:  # pragma: no cover - the extra is installed in the test environment
    raise ExtraMissing(
        "`onnxgate deploy` needs the 'deploy' extra for tritonclient's model_config_pb2 "
        f"({first_line(err)}).",
        extra="deploy",
    ) from err

__all__ = ["DATATYPES", "datatype_name", "model_config_pb2", "text_format", "triton_datatype"]


def datatype_name(value: int) -> str:
    """``TYPE_FP32`` for its enum value."""
    return model_config_pb2.DataType.Name(value)
