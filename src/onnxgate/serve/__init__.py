"""Serving gated models: a thread-safe predictor, and an Open Inference Protocol server.

``Predictor`` is the library's production wrapper (open, prove, validate, run, count);
``serve`` runs the REST and gRPC server on top of it. The server's parts need the ``serve``
extra (uvicorn, grpcio, prometheus-client); the predictor needs only onnxgate itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from onnxgate.serve._maps import map_labels
from onnxgate.serve._model_config import DATATYPES as TRITON_DATATYPES
from onnxgate.serve._model_config import (
    GRAPH_LEVEL,
    OPENVINO,
    TritonOptions,
    batching,
    build_config,
    config_json,
    session_parameters,
    triton_datatype,
)
from onnxgate.serve._predictor import Counts, Predictor, PredictorConfig, Proof, batch_axis
from onnxgate.serve._source import Source, resolve
from onnxgate.serve._tensors import OIP_OF
from onnxgate.serve._types import InferRequest, InferResponse, RequestTensor
from onnxgate.serve._watch import WatchSettings

if TYPE_CHECKING:
    from onnxgate.serve._hub import Hub, ModelSettings, ServeConfig
    from onnxgate.serve._shadow import ShadowSettings

__all__ = [
    "GRAPH_LEVEL",
    "OIP_OF",
    "OPENVINO",
    "TRITON_DATATYPES",
    "Counts",
    "Hub",
    "InferRequest",
    "InferResponse",
    "ModelSettings",
    "Predictor",
    "PredictorConfig",
    "Proof",
    "RequestTensor",
    "ServeConfig",
    "ShadowSettings",
    "Source",
    "TritonOptions",
    "WatchSettings",
    "batch_axis",
    "batching",
    "build_config",
    "config_json",
    "map_labels",
    "resolve",
    "serve",
    "session_parameters",
    "triton_datatype",
]


def __getattr__(name: str) -> object:
    if name in ("Hub", "ModelSettings", "ServeConfig"):
        from onnxgate.serve import _hub

        return getattr(_hub, name)
    if name == "ShadowSettings":
        from onnxgate.serve._shadow import ShadowSettings

        return ShadowSettings
    raise AttributeError(f"module 'onnxgate.serve' has no attribute {name!r}")


def serve(
    refs: Sequence[str],
    config: ServeConfig | None = None,
    *,
    host: str = "127.0.0.1",
    http_port: int = 8000,
    grpc_port: int = 8001,
) -> None:
    """Serve ``refs`` over REST and gRPC until SIGTERM or SIGINT; the library side of ``serve``.

    Raises:
        NotGated: a version's gate did not pass and ``allow_ungated`` is off.
        GateError: a reference cannot be opened, or a port cannot be bound.
    """
    from onnxgate.serve._app import Listen, run_server
    from onnxgate.serve._hub import ServeConfig

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop is optional: asyncio's own loop works, a little slower
        runner = asyncio.run
    runner(run_server(list(refs), config or ServeConfig(), Listen(host, http_port, grpc_port)))
