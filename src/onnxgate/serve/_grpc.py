"""The Open Inference Protocol v2 over gRPC, as ``tritonclient.grpc`` expects it.

Eight RPCs of ``inference.GRPCInferenceService`` are served (ServerLive, ServerReady, ModelReady,
ServerMetadata, ModelMetadata, ModelInfer, and Triton's ModelConfig and ModelStatistics); any
other (streaming, repository, shared memory) is answered ``UNIMPLEMENTED`` by gRPC itself, and
the client's ``infer()`` needs none of them.

``ModelReadyResponse`` has only ``ready``: when it is false, the reason goes with it in the
trailing metadata entry ``onnxgate-reason``, which grpcurl prints and any gRPC client reads
(``with_call(...)[1].trailing_metadata()``; tritonclient's ``is_model_ready`` returns only the
bool). The status message cannot carry it: the call is OK (Triton answers not-ready with OK, and
clients expect False, not an error), and an OK status reaches clients without its message. A
model still loading is ``UNAVAILABLE``, as over REST it is 503.

What the wire requires, and why the code looks the way it does:

- tritonclient sends every input's bytes in ``raw_input_contents``, one entry per input in
  order, and reads outputs *only* from ``raw_output_contents`` (a reply with typed
  ``contents`` alone decodes to empty arrays). So replies always carry raw bytes; requests may
  use either form, but never both for one input.
- Refusals become status codes through the error's ``status`` (``invalid`` ->
  ``INVALID_ARGUMENT``, ``not_found`` -> ``NOT_FOUND``, ``too_large`` -> ``RESOURCE_EXHAUSTED``,
  ``unavailable`` -> ``UNAVAILABLE``); ONNX Runtime failing on valid input is ``INTERNAL``, and
  so is a bug here, with a generic message: the traceback goes to the log, never to the client.
- gRPC's default 4 MB receive limit would refuse ordinary tensors; the server accepts messages
  up to the configured body limit and sends replies of any size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from onnxgate.errors import (
    EnvironmentProblem,
    ExtraMissing,
    GateError,
    InternalError,
    InvalidRequest,
    RequestRefused,
    first_line,
)
from onnxgate.serve import _proto
from onnxgate.serve._hub import Hub
from onnxgate.serve._refuse import (
    clip,
    echo,
    refuse,
    refuse_parameters,
    tensor_name,
    with_rule,
)
from onnxgate.serve._tensors import check_shape, from_bytes, numpy_dtype, output_datatype, to_bytes
from onnxgate.serve._types import InferRequest, InferResponse, RequestTensor

try:
    import grpc
    import grpc.aio
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ExtraMissing(
        f"serving gRPC needs the 'serve' extra ({err.name or 'grpc'} is not installed).",
        extra="serve",
    ) from err

log = logging.getLogger(__name__)

_CODES: dict[str, grpc.StatusCode] = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
}

_CONTENTS: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
"""Which ``InferTensorContents`` field carries each datatype (FP16 has none: raw bytes only)."""

REASON_KEY = "onnxgate-reason"
"""The trailing metadata entry of a ``ModelReady`` that is false: why."""

MAX_CALLS = 1024
"""Calls at once; the queues behind them are bounded too."""

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def make_server(hub: Hub, address: str) -> grpc.aio.Server:
    """A gRPC server for ``hub`` bound to ``address`` (``host:port``), not started yet.

    Call it inside the event loop that serves the hub, then ``await server.start()``; stop it
    with ``await stop_server(server, address, grace)``.

    Raises:
        EnvironmentProblem: the address cannot be bound (in use, or not a ``host:port``).
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", hub.max_body_bytes),
            ("grpc.max_send_message_length", -1),
            # a client's metadata, like a REST head, is bounded; both limits alike, or grpc
            # refuses what lies between them at random
            ("grpc.max_metadata_size", hub.config.max_header_bytes),
            ("grpc.absolute_max_metadata_size", hub.config.max_header_bytes),
            # without this, a second server on a port in use binds it too and shares its traffic
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=MAX_CALLS,  # beyond, RESOURCE_EXHAUSTED at once
    )
    server.add_generic_rpc_handlers((_generic_handler(hub),))
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        port, cause = 0, err
    else:
        cause = None
    if not port:
        raise EnvironmentProblem(
            f"gRPC cannot listen on {address!r}: the port is in use or the address is not "
            "host:port.",
            hint="Choose another --grpc-port.",
        ) from cause
    log.info("gRPC (Open Inference Protocol v2) on %s", address)
    return server


async def stop_server(server: grpc.aio.Server, address: str, grace: float) -> None:
    """Stop ``server``, answering every call it received before (within ``grace`` seconds).

    ``address`` is where this process reaches the server (``127.0.0.1:PORT``, not ``0.0.0.0``).

    grpc's ``stop`` lets the calls the servicer is running finish, but cancels at once those the
    core has received and not yet handed over (many, when the event loop is busy). So a call of
    our own goes first: the core hands calls over in the order they came, so once it is answered
    every call that came before it is running, and ``stop`` only refuses what came after.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            live = channel.unary_unary(
                f"/{_proto.SERVICE}/ServerLive",
                request_serializer=_proto.ServerLiveRequest.SerializeToString,
                response_deserializer=_proto.ServerLiveResponse.FromString,
            )
            await live(_proto.ServerLiveRequest(), timeout=max(grace, 0.1))
    except Exception as err:  # noqa: BLE001  (whatever failed, the server must still stop)
        log.warning("gRPC: could not wait for the calls already received: %s", err)
    await server.stop(max(deadline - loop.time(), 0.0))


def _generic_handler(hub: Hub) -> grpc.GenericRpcHandler:
    service = _Service(hub)
    handlers: dict[str, Handler] = {
        "ServerLive": service.server_live,
        "ServerReady": service.server_ready,
        "ModelReady": service.model_ready,
        "ServerMetadata": service.server_metadata,
        "ModelMetadata": service.model_metadata,
        "ModelInfer": service.model_infer,
        "ModelConfig": service.model_config,
        "ModelStatistics": service.model_statistics,
    }
    methods = {
        name: grpc.unary_unary_rpc_method_handler(
            _parsing(name, request_cls, handlers[name], hub),
            response_serializer=response_cls.SerializeToString,
        )
        for name, (request_cls, response_cls) in _proto.METHODS.items()
    }
    return grpc.method_handlers_generic_handler(_proto.SERVICE, methods)


def _parsing(rpc: str, request_cls: Any, handler: Handler, hub: Hub) -> Handler:
    """``handler`` on the request's bytes; a message that does not parse is INVALID_ARGUMENT.

    grpcio's own deserializer would answer ``UNKNOWN`` and log a traceback instead. The upb
    protobuf raises DecodeError on every malformed message, the pure-Python one raises
    UnicodeDecodeError on a string field's bad UTF-8: both are the client's.
    """

    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = request_cls.FromString(raw)
        except (DecodeError, UnicodeDecodeError) as err:
            refused = InvalidRequest(
                f"the {rpc} request is not a valid {request_cls.DESCRIPTOR.full_name} message "
                f"({err}) (rule protobuf)"
            )
            if rpc == "ModelInfer":
                hub.count_failure("", "", refused)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(refused))
        return await handler(request, context)

    return handle


def _status(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a failure is answered with."""
    if isinstance(error, RequestRefused):
        return _CODES.get(error.status, grpc.StatusCode.INVALID_ARGUMENT), clip(str(error))
    if isinstance(error, GateError):  # RunFailed and the like: the server's fault, said on purpose
        return grpc.StatusCode.INTERNAL, clip(str(error))
    return grpc.StatusCode.INTERNAL, "internal server error; the server's log has the details."


class _Service:
    """The RPC handlers; every failure ends in ``context.abort`` with a mapped status."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def _fail(
        self, context: grpc.aio.ServicerContext, rpc: str, error: BaseException
    ) -> NoReturn:
        """Answer ``error``'s status; raises (``context.abort`` always does)."""
        code, message = _status(error)
        if not isinstance(error, GateError):
            log.error("gRPC %s failed", rpc, exc_info=error)
        elif not isinstance(error, RequestRefused):
            log.warning("gRPC %s failed: %s", rpc, error)
        await context.abort(code, message)
        raise AssertionError("context.abort returned")  # never: it raises

    async def server_live(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return _proto.ServerLiveResponse(live=self.hub.live())

    async def server_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return _proto.ServerReadyResponse(ready=self.hub.ready())

    async def model_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            ready, reason = self.hub.readiness(request.name, request.version or None)
        except Exception as err:
            await self._fail(context, "ModelReady", err)
        if not ready:
            # metadata values are printable ASCII without control characters (a newline breaks
            # the call); the status message may hold any UTF-8
            printable = clip(reason).encode("unicode_escape").decode("ascii")
            context.set_trailing_metadata(((REASON_KEY, printable),))
        return _proto.ModelReadyResponse(ready=ready)

    async def model_config(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            config = self.hub.model_config(request.name, request.version or None)
        except Exception as err:
            await self._fail(context, "ModelConfig", err)
        return _proto.ModelConfigResponse(config=config)

    async def model_statistics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            found = self.hub.statistics(request.name, request.version)
        except Exception as err:
            await self._fail(context, "ModelStatistics", err)
        reply = _proto.ModelStatisticsResponse()
        for stats in found:
            json_format.ParseDict(stats, reply.model_stats.add())
        return reply

    async def server_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        meta = self.hub.server_metadata()
        extensions = meta["extensions"]
        assert isinstance(extensions, list)
        return _proto.ServerMetadataResponse(
            name=str(meta["name"]), version=str(meta["version"]), extensions=extensions
        )

    async def model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            meta = self.hub.model_metadata(request.name, request.version or None)
        except Exception as err:
            await self._fail(context, "ModelMetadata", err)
        reply = _proto.ModelMetadataResponse(
            name=meta.name, versions=meta.versions, platform=meta.platform
        )
        for tensors, into in ((meta.inputs, reply.inputs), (meta.outputs, reply.outputs)):
            for tensor in tensors:
                into.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        return reply

    async def model_infer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        with self.hub.foreground.request():  # in flight from decoding to the encoded reply
            return await self._infer(request, context)

    async def _infer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        hub = self.hub
        name, version = request.model_name, request.model_version or None
        try:
            served = hub.served(name, version)  # an unknown model is NOT_FOUND before anything
            decoded = decode_request(request, hub.max_body_bytes)
        except Exception as err:
            known = hub.entries.get(name)
            hub.count_failure(name, version or (known.current if known else ""), err)
            await self._fail(context, "ModelInfer", err)
        try:
            response = await hub.infer(decoded)  # counts its own failures
        except Exception as err:
            await self._fail(context, "ModelInfer", err)
        try:
            return encode_response(response, served.version)
        except Exception as err:  # an output the protocol cannot carry: the model's fault
            failed = InternalError(f"{name}: an output cannot be sent: {first_line(err)}")
            failed.__cause__ = err
            await self._fail(context, "ModelInfer", failed)


def encode_response(response: InferResponse, version: str) -> Any:
    """The hub's answer as a ``ModelInferResponse``, outputs always in ``raw_output_contents``."""
    reply = _proto.ModelInferResponse(
        model_name=response.model,
        model_version=response.version or version,
        id=response.id or "",
    )
    for output, array in response.outputs:
        reply.outputs.add(name=output, datatype=output_datatype(array), shape=array.shape)
        reply.raw_output_contents.append(to_bytes(array))
    return reply


def decode_request(request: Any, limit: int) -> InferRequest:
    """A ``ModelInferRequest`` as the hub's ``InferRequest``.

    What REST can say too is refused by the same functions (``serve._refuse``), so both
    protocols give one verdict; only ``contents`` and ``raw_input_contents`` are gRPC's own.

    Args:
        request: the message (ours or tritonclient's ``service_pb2`` one).
        limit: the largest tensor a declared shape may describe, in bytes.

    Raises:
        InvalidRequest: the request is malformed (raw contents count, data length, both forms).
        PayloadTooLarge: a declared shape is above ``limit``.
    """
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise refuse(
            "raw_input_contents",
            f"the request has {len(request.inputs)} input(s) and {len(raw)} raw_input_contents; "
            "send one raw_input_contents per input, in the order of the inputs",
        )
    tensors = []
    for index, tensor in enumerate(request.inputs):
        name = tensor_name("inputs", index, tensor.name)
        refuse_parameters(f"input {echo(name)}", tensor.parameters)
        shape = list(tensor.shape)
        try:
            if raw:
                if _has_contents(tensor):
                    raise refuse(
                        "input.data",
                        f"input {echo(name)} has both contents and raw_input_contents; "
                        "send one of them",
                    )
                array = from_bytes(name, tensor.datatype, shape, raw[index], limit)
            else:
                array = _from_contents(tensor, shape, limit)
        except InvalidRequest as err:
            raise with_rule(err, "input.data") from None
        tensors.append(RequestTensor(name, tensor.datatype, array))
    outputs = []
    for index, output in enumerate(request.outputs):
        name = tensor_name("outputs", index, output.name)
        refuse_parameters(f"output {echo(name)}", output.parameters)
        outputs.append(name)
    return InferRequest(
        model=request.model_name,
        version=request.model_version or None,
        inputs=tensors,
        outputs=outputs or None,
        id=request.id or None,
        parameters={key: _parameter(value) for key, value in request.parameters.items()},
    )


def _parameter(value: Any) -> Any:
    choice = value.WhichOneof("parameter_choice")
    return getattr(value, choice) if choice else None


def _has_contents(tensor: Any) -> bool:
    return tensor.HasField("contents") and any(
        len(getattr(tensor.contents, field)) for field in set(_CONTENTS.values())
    )


def _from_contents(tensor: Any, shape: list[int], limit: int) -> np.ndarray:
    """An input's typed ``contents`` as an array of ``shape``, checked like raw bytes."""
    name, datatype = tensor.name, tensor.datatype
    count = check_shape(name, shape, datatype, limit)
    shown = echo(name)
    dtype = numpy_dtype(datatype)
    field = _CONTENTS.get(datatype)
    given = [f for f in sorted(set(_CONTENTS.values())) if len(getattr(tensor.contents, f))]
    if field is None:
        if count == 0 and not given:
            return np.zeros(shape, dtype=dtype)
        raise InvalidRequest(
            f"input {shown}: {datatype} has no typed contents field; send it in raw_input_contents."
        )
    wrong = [f for f in given if f != field]
    if wrong:
        raise InvalidRequest(
            f"input {shown} is declared {datatype}, whose values go in contents.{field}; the "
            f"request fills contents.{wrong[0]}."
        )
    values = getattr(tensor.contents, field)
    if len(values) != count:
        what = "no data" if not given else f"{len(values)} values in contents.{field}"
        raise InvalidRequest(
            f"input {shown}: shape {shape} holds {count} values, the request has {what}."
        )
    if datatype == "BYTES":
        return np.array(list(values), dtype=object).reshape(shape)
    if field in ("int_contents", "uint_contents") and dtype.itemsize < 4 and count:
        wide = np.fromiter(values, dtype=np.int64, count=count)
        info = np.iinfo(dtype)
        if int(wide.min()) < info.min or int(wide.max()) > info.max:
            raise InvalidRequest(f"input {shown}: a value does not fit {datatype}.")
        return wide.astype(dtype).reshape(shape)
    return np.fromiter(values, dtype=dtype, count=count).reshape(shape)
