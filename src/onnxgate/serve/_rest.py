"""The Open Inference Protocol's REST front end, as a bare ASGI application.

No web framework: a request goes through one ``split("/")`` and a handful of comparisons, so
what the server adds to ONNX Runtime's latency is uvicorn's parsing, one ``json.loads``, one
``json.dumps`` and the batcher. Requests are what ``tritonclient.http`` sends, including Triton's
binary tensor extension (a JSON header of ``Inference-Header-Content-Length`` bytes, then raw
tensors) and compressed bodies.

The body is read whatever its Content-Type (the sync client sends none), never beyond
``hub.max_body_bytes``, compressed or not. Everything a client can get wrong is a 400 (or 404,
413, 415) whose ``{"error": ...}`` names the input and the rule; a 500 means onnxgate or ONNX
Runtime failed, and a bug's traceback goes to the log, never to the client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from onnxgate.errors import (
    GateError,
    InvalidRequest,
    PayloadTooLarge,
    RequestRefused,
    RunFailed,
    Unavailable,
)
from onnxgate.serve._drain import RETRY_AFTER, Drain
from onnxgate.serve._hub import Hub
from onnxgate.serve._metrics import CONTENT_TYPE as METRICS_TYPE
from onnxgate.serve._model_config import config_json
from onnxgate.serve._refuse import (
    clip,
    echo,
    refuse,
    refuse_parameters,
    tensor_name,
    with_rule,
)
from onnxgate.serve._tensors import (
    DATATYPES,
    from_bytes,
    from_json,
    output_datatype,
    to_bytes,
    to_json,
)
from onnxgate.serve._types import InferRequest, InferResponse, ModelMetadata, RequestTensor

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

STATUS = {"invalid": 400, "not_found": 404, "too_large": 413, "unavailable": 503}
"""HTTP status of each ``RequestRefused.status``."""
HEADER_LENGTH = b"inference-header-content-length"
JSON_TYPE = b"application/json"
BINARY_TYPE = b"application/octet-stream"
OFF_LOOP_BYTES = 256 << 10
"""Bodies with more JSON than this are decoded in a thread, not on the event loop."""
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode
_CLOSE = ((b"connection", b"close"),)
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP token (RFC 9110 §5.6.2): what a transfer coding's name is."""
_EMPTY = memoryview(b"")


class _Refused(Exception):
    """A protocol-level refusal with its own status (404 path, 405, 415)."""

    def __init__(self, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


class _Disconnected(Exception):
    """The client went away before its body arrived."""


_rule = refuse


# -- the application -----------------------------------------------------------------------------


class RestApp:
    """The ASGI application over one ``Hub`` (see :func:`make_app`)."""

    def __init__(self, hub: Hub, drain: Drain | None = None) -> None:
        self.hub = hub
        self.drain = drain or Drain()
        self.max_headers = hub.config.max_headers
        self.max_header_bytes = hub.config.max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.drain.draining:  # every reply of a stopping server ends its connection
                send = _closing(send)
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        path = scope["path"]
        try:
            _check_head(scope, self.max_headers, self.max_header_bytes)
            if path == "/metrics":
                _allow(method, "GET")
                return await _reply(send, 200, self.hub.metrics.text(), METRICS_TYPE.encode())
            parts = path.rstrip("/").split("/") if path != "/" else ["", ""]
            if len(parts) < 2 or parts[1] != "v2":
                raise _Refused(404, f"no such path {echo(path)}; the API is under /v2.")
            rest = parts[2:]
            if not rest:
                _allow(method, "GET")
                return await _json(send, 200, self.hub.server_metadata())
            if rest[0] == "health" and len(rest) == 2 and rest[1] in ("live", "ready"):
                _allow(method, "GET")
                up = self.hub.live() if rest[1] == "live" else self.hub.ready()
                return await _reply(send, 200 if up else 400, b"", None)
            if rest == ["models", "stats"]:
                _allow(method, "GET")
                return await _json(send, 200, {"model_stats": self.hub.statistics()})
            if rest[0] == "models" and len(rest) >= 2:
                return await self._model(scope, receive, send, method, rest[1], rest[2:])
            raise _Refused(404, f"no such path {echo(path)}.")
        except _Refused as err:
            await _json(send, err.status, {"error": clip(err.message)}, err.headers)
        except RequestRefused as err:
            status = STATUS.get(err.status, 400)
            retry = [(b"retry-after", RETRY_AFTER)] if status == 503 else []
            await _json(send, status, {"error": clip(err.message)}, retry)
        except GateError as err:  # deliberate (a config Triton cannot express), not the client's
            log.error("%s %s failed: %s", method, path, err)
            await _json(send, 500, {"error": str(err)})
        except Exception:
            log.exception("%s %s failed", method, echo(path))
            await _json(send, 500, {"error": "internal server error; see the server's log."})

    async def _model(
        self, scope: Scope, receive: Receive, send: Send, method: str, name: str, rest: list[str]
    ) -> None:
        version = None
        if rest and rest[0] == "versions":
            if len(rest) < 2 or not rest[1]:
                raise _Refused(404, f"no such path {echo(scope['path'])}; name a version.")
            version, rest = rest[1], rest[2:]
        if not rest:
            _allow(method, "GET")
            return await _json(send, 200, _metadata(self.hub.model_metadata(name, version)))
        if rest == ["ready"]:
            _allow(method, "GET")
            ready, reason = self.hub.readiness(name, version)
            if ready:
                return await _reply(send, 200, b"", None)
            return await _json(send, 400, {"error": reason})
        if rest == ["config"]:
            _allow(method, "GET")
            return await _json(send, 200, config_json(self.hub.model_config(name, version)))
        if rest == ["stats"]:
            _allow(method, "GET")
            found = self.hub.statistics(name, version or "")
            return await _json(send, 200, {"model_stats": found})
        if rest == ["shadow"] and version is None:
            _allow(method, "GET")
            self.hub.served(name)  # 404 for a name not served, 503 while it loads
            return await _json(send, 200, self.hub.shadows.summary(name))
        if rest == ["infer"]:
            _allow(method, "POST")
            return await self._infer(scope, receive, send, name, version)
        raise _Refused(404, f"no such path {echo(scope['path'])}.")

    async def _infer(
        self, scope: Scope, receive: Receive, send: Send, name: str, version: str | None
    ) -> None:
        with self.hub.foreground.request():  # in flight from the body's first byte to the reply
            await self._answer(scope, receive, send, name, version)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, name: str, version: str | None
    ) -> None:
        hub = self.hub
        served = version or ""
        try:
            if not self.drain.admits(scope.get("client")):  # arrived after the signal
                await _discard(receive)  # closing on an unread body would reset the connection
                raise Unavailable("the server is shutting down; retry on another replica.")
            served = hub.served(name, version).version  # 404 before the body is read
            body, header_length = await _body(scope, receive, hub.max_body_bytes)
            raw_input = None
            if header_length == 0:
                raw_input = hub.model_metadata(name, version).inputs
            args = (name, version, body, header_length, hub.max_body_bytes, raw_input)
            json_bytes = len(body) if header_length is None else header_length
            if json_bytes > OFF_LOOP_BYTES:
                # a large JSON body takes a while to parse: not on the loop that serves everyone
                request, binary = await asyncio.to_thread(decode, *args)
            else:
                request, binary = decode(*args)
        except _Disconnected:
            return
        except Exception as err:  # refusals (and bugs) before the hub saw the request
            counted = InvalidRequest(err.message) if isinstance(err, _Refused) else err
            hub.count_failure(name, served, counted)
            raise
        try:
            response = await hub.infer(request)
        except RunFailed as err:
            return await _json(send, 500, {"error": err.message})
        except GateError as err:
            if not isinstance(err, RequestRefused):  # deliberate, but not the client's doing
                log.error("%s: inference failed: %s", name, err)
                return await _json(send, 500, {"error": str(err)})
            raise
        try:
            payload, binary_length = encode(response, binary)
        except GateError as err:  # an output with no protocol datatype: the model's fault
            log.error("%s: cannot encode the response: %s", name, err)
            return await _json(send, 500, {"error": str(err)})
        if binary_length is None:
            return await _reply(send, 200, payload, JSON_TYPE)
        await _reply(
            send, 200, payload, BINARY_TYPE, [(HEADER_LENGTH, str(binary_length).encode())]
        )


def make_app(hub: Hub, drain: Drain | None = None) -> RestApp:
    """The Open Inference Protocol REST server over ``hub``, as an ASGI 3 application.

    Args:
        hub: the served models.
        drain: which requests a stopping server still answers (given by ``run_server``).
    """
    return RestApp(hub, drain)


# -- the request's head ---------------------------------------------------------------------------


def _check_head(scope: Scope, most: int, most_bytes: int) -> None:
    """Refuse a head too large (431) or a transfer coding not implemented (501, RFC 9112 §6.1).

    Checked before anything else is done with the request. uvicorn's parser takes
    ``Transfer-Encoding: gzip, chunked`` as plain chunked; the body would then be read without
    the gzip the client applied, so the request is refused. The
    connection is closed after each of these refusals: the body is not read.
    """
    headers = scope["headers"]
    if len(headers) > most:
        raise _Refused(
            431,
            f"the request has {len(headers)} header fields, above the server's limit of {most} "
            "(--max-headers)",
            _CLOSE,
        )
    coding = None
    # the request line and the head's end, then a line per field: "name: value" and its end
    size = (
        len(scope["method"])
        + len(scope.get("raw_path") or b"")
        + len(scope.get("query_string", b""))
    )
    size += 16
    for key, value in headers:
        size += len(key) + len(value) + 4
        if key == b"transfer-encoding":
            coding = value if coding is None else coding + b"," + value
    if size > most_bytes:
        raise _Refused(
            431,
            f"the request's head takes {size} bytes, above the server's limit of {most_bytes} "
            "(--max-header-bytes)",
            _CLOSE,
        )
    if coding is not None and coding != b"chunked":
        _check_codings(coding)


def _check_codings(value: bytes) -> None:
    """Refuse a ``Transfer-Encoding`` other than plain ``chunked``."""
    codings = [c.strip() for c in value.split(b",") if c.strip()]  # empty elements are allowed
    shown = echo(value.decode("latin-1"))
    if not codings or not all(_TOKEN.fullmatch(c.partition(b";")[0].strip()) for c in codings):
        raise _Refused(400, f"Transfer-Encoding {shown} is not a list of codings", _CLOSE)
    names = [c.partition(b";")[0].strip().lower() for c in codings]
    if names == [b"chunked"] and codings[0].lower() == b"chunked":
        return
    if names.count(b"chunked") > 1 or names[-1] != b"chunked":
        raise _Refused(
            400,
            f"Transfer-Encoding {shown} is not a valid request framing: chunked must come last, "
            "once (RFC 9112)",
            _CLOSE,
        )
    raise _Refused(
        501,
        f"Transfer-Encoding {shown} is not implemented here; send the body chunked or with a "
        "Content-Length, compressed with Content-Encoding (gzip, deflate) if you like",
        _CLOSE,
    )


# -- sending -------------------------------------------------------------------------------------


async def _reply(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes | None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    head = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        head.append((b"content-type", content_type))
    head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def _closing(send: Send) -> Send:
    """``send``, with ``Connection: close`` on the reply."""

    async def closing(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message["headers"], (b"connection", b"close")]}
        await send(message)

    return closing


async def _json(
    send: Send, status: int, value: object, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await _reply(send, status, _DUMPS(value).encode(), JSON_TYPE, headers)


def _allow(method: str, allowed: str) -> None:
    if method == allowed or (method == "HEAD" and allowed == "GET"):
        return
    raise _Refused(
        405,
        f"method {method} is not allowed here; use {allowed}.",
        [(b"allow", allowed.encode() + (b", HEAD" if allowed == "GET" else b""))],
    )


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif kind == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _metadata(meta: ModelMetadata) -> dict[str, object]:
    def tensors(specs: Sequence[Any]) -> list[dict[str, object]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in specs]

    return {
        "name": meta.name,
        "versions": list(meta.versions),
        "platform": meta.platform,
        "inputs": tensors(meta.inputs),
        "outputs": tensors(meta.outputs),
        "onnxgate": {"ready": meta.ready, "reason": meta.reason, "source": meta.source}
        | ({"labels": meta.labels} if meta.labels else {}),
    }


# -- reading the body ----------------------------------------------------------------------------


async def _body(scope: Scope, receive: Receive, limit: int) -> tuple[bytes, int | None]:
    """The (inflated) body and the ``Inference-Header-Content-Length``, both bounded by ``limit``.

    Raises:
        PayloadTooLarge: the body, declared, read or inflated, is above ``limit``.
        InvalidRequest: a malformed header or compressed stream.
    """
    declared = encoding = header_length = None
    for key, value in scope["headers"]:
        key = key.lower()
        if key == b"content-length":
            declared = value
        elif key == b"content-encoding":
            encoding = value.decode("latin-1").strip().lower()
        elif key == HEADER_LENGTH:
            if header_length is not None and header_length != value:
                raise _rule(
                    "binary.header", "Inference-Header-Content-Length is given twice, differently"
                )
            header_length = value
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"the body is {int(declared)} bytes, above the server's limit of {limit} (rule size)"
        )
    if encoding in (None, "", "identity"):
        inflate = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        inflate = encoding
    else:
        raise _Refused(
            415,
            f"Content-Encoding {echo(encoding)} is not supported; send gzip, deflate or none.",
        )
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(
                    f"the body is above the server's limit of {limit} bytes (rule size)"
                )
            chunks.append(chunk)
        more = message.get("more_body", False)
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if inflate is not None:  # in a thread: a small body may inflate to the limit
        body = await asyncio.to_thread(_inflate, body, inflate, limit)
    length = None
    if header_length is not None:
        text = header_length.strip()
        if not text.isdigit():
            raise _rule(
                "binary.header",
                f"Inference-Header-Content-Length {echo(header_length.decode('latin-1'))} is not a "
                "non-negative integer",
            )
        length = int(text)
        if length > len(body):
            raise _rule(
                "binary.header",
                f"Inference-Header-Content-Length is {length}, but the body has only "
                f"{len(body)} bytes{' after inflating' if inflate else ''}",
            )
    return body, length


async def _discard(receive: Receive) -> None:
    """Read a body to its end, keeping none of it."""
    more = True
    while more:
        message = await receive()
        more = message["type"] == "http.request" and message.get("more_body", False)


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body inflated, never to more than ``limit`` bytes (zip bombs: 413)."""
    if encoding != "deflate":
        wbits = 16 + zlib.MAX_WBITS
    elif len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0:
        wbits = zlib.MAX_WBITS  # HTTP's deflate is the zlib format (RFC 9110)
    else:
        wbits = -zlib.MAX_WBITS  # raw deflate, as some clients send it, without the zlib header
    parts: list[bytes] = []
    size = 0
    rest = body
    try:
        while True:  # gzip allows several members one after another
            inflater = zlib.decompressobj(wbits)
            part = inflater.decompress(rest, limit - size + 1)
            size += len(part)
            if size > limit:
                raise PayloadTooLarge(
                    f"the body inflates to more than the server's limit of {limit} bytes "
                    "(rule size)"
                )
            parts.append(part)
            if not inflater.eof:
                raise _rule("encoding", f"the {encoding} body is truncated")
            rest = inflater.unused_data
            if not rest or wbits != 16 + zlib.MAX_WBITS:
                break
    except zlib.error as err:
        raise _rule("encoding", f"the body is not valid {encoding}: {err}") from None
    if rest:
        raise _rule("encoding", f"{len(rest)} bytes follow the end of the {encoding} stream")
    return parts[0] if len(parts) == 1 else b"".join(parts)


# -- decoding a request --------------------------------------------------------------------------


def decode(
    model: str,
    version: str | None,
    body: bytes,
    header_length: int | None,
    limit: int,
    raw_input: Sequence[Any] | None = None,
) -> tuple[InferRequest, dict[str, bool] | bool]:
    """An infer request's body as an ``InferRequest``, and which outputs to send binary.

    Args:
        model: the model named in the URL.
        version: the version named in the URL, if any.
        body: the whole (inflated) body.
        header_length: ``Inference-Header-Content-Length``; None when the body is only JSON.
        limit: the largest tensor, in bytes.
        raw_input: the model's inputs (metadata), for a raw binary request (header length 0).

    Returns:
        The request, and either a bool for every output or one per output name requested.

    Raises:
        InvalidRequest: the body breaks the protocol; the message names the input and the rule.
        PayloadTooLarge: a declared shape is above ``limit``.
    """
    if header_length == 0:
        return _raw(model, version, body, limit, raw_input or ()), True
    view = memoryview(body)
    if header_length is None:
        header, rest = body, _EMPTY
    else:
        header, rest = bytes(view[:header_length]), view[header_length:]
    where = (
        f" (its first {header_length} bytes, per Inference-Header-Content-Length)"
        if header_length is not None
        else ""
    )
    try:
        document = json.loads(_text(header, where))
    except RecursionError:
        raise _rule("json", "the JSON header is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError
        if b"\x00" in header[:4]:  # JSON has no NUL: UTF-16 or UTF-32 without a BOM
            raise _rule(
                "json",
                f"the body{where} is not UTF-8 (it looks like UTF-16 or UTF-32); send the JSON "
                "encoded as UTF-8",
            ) from None
        raise _rule("json", f"the body{where} is not JSON: {err}") from None
    if not isinstance(document, dict):
        raise _rule("json", f"the JSON header is a {_kind(document)}, not an object")
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise _rule("id", f"id is a {_kind(request_id)}, not a string")
    parameters = _parameters(document.get("parameters"), "the request's parameters")
    default_binary = bool(_flag(parameters, "binary_data_output", "the request's parameters"))
    inputs = document.get("inputs")
    if not isinstance(inputs, list):  # an empty list is the contract's to refuse, as over gRPC
        why = "is missing" if inputs is None else "is not a list"
        raise _rule("inputs", f"inputs {why}; send a list of tensors")
    tensors: list[RequestTensor] = []
    offset = 0
    for index, item in enumerate(inputs):
        tensor, used = _input(index, item, rest, offset, header_length, limit)
        tensors.append(tensor)
        offset += used
    if offset != len(rest):
        raise _rule(
            "binary.size",
            f"{len(rest)} bytes follow the JSON header, but the inputs' binary_data_size add up "
            f"to {offset}",
        )
    names, binary = _outputs(document.get("outputs"), default_binary)
    request = InferRequest(model, version, tensors, names, request_id, parameters)
    return request, binary


def _text(header: bytes, where: str) -> str:
    """The JSON text of a body: UTF-8 only (RFC 8259 §8.1), without a byte order mark.

    ``json.loads`` on bytes would also take UTF-16 and UTF-32 (it guesses from the first bytes)
    and skip a BOM; a careful server takes what the protocol says, so both are refused.
    """
    if header[:3] == b"\xef\xbb\xbf":
        raise _rule(
            "json",
            f"the body{where} starts with a UTF-8 byte order mark; JSON sent over a network has "
            "none (RFC 8259): remove it",
        )
    try:
        return header.decode()
    except UnicodeDecodeError as err:
        raise _rule(
            "json",
            f"the body{where} is not UTF-8 (byte {err.start} is not valid); send the JSON "
            "encoded as UTF-8",
        ) from None


def _input(
    index: int,
    item: object,
    rest: memoryview,
    offset: int,
    header_length: int | None,
    limit: int,
) -> tuple[RequestTensor, int]:
    """One input and how many binary bytes it took."""
    if not isinstance(item, dict):
        raise _rule("input", f"inputs[{index}] is a {_kind(item)}, not an object")
    name = tensor_name("inputs", index, item.get("name"))
    shown = echo(name)
    datatype = item.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise _rule(
            "input.datatype",
            f"input {shown}: datatype {echo(datatype)} is not an Open Inference Protocol "
            f"datatype ({', '.join(DATATYPES)})"
            if datatype is not None
            else f"input {shown} has no datatype",
        )
    shape = item.get("shape")
    if not isinstance(shape, list):
        raise _rule(
            "input.shape",
            f"input {shown} has no shape"
            if shape is None
            else f"input {shown}: shape is a {_kind(shape)}, not a list of integers",
        )
    parameters = _parameters(item.get("parameters"), f"input {shown}'s parameters")
    refuse_parameters(f"input {shown}", parameters)
    size = parameters.get("binary_data_size")
    has_data = "data" in item
    if size is not None and has_data:
        raise _rule("input.data", f"input {shown} has both data and binary_data_size")
    if size is None:
        if not has_data:
            raise _rule("input.data", f"input {shown} has neither data nor binary_data_size")
        try:
            array = from_json(name, datatype, shape, item["data"], limit)
        except InvalidRequest as err:
            raise with_rule(err, "input.data") from None
        return RequestTensor(name, datatype, array), 0
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise _rule(
            "binary.size",
            f"input {shown}: binary_data_size {echo(size)} is not a non-negative integer",
        )
    if header_length is None:
        raise _rule(
            "binary.header",
            f"input {shown} has binary_data_size, but the request has no "
            "Inference-Header-Content-Length header",
        )
    if offset + size > len(rest):
        raise _rule(
            "binary.size",
            f"input {shown}: binary_data_size is {size} at offset {offset}, but only "
            f"{len(rest)} bytes follow the JSON header",
        )
    try:
        array = from_bytes(name, datatype, shape, rest[offset : offset + size], limit)
    except InvalidRequest as err:
        raise with_rule(err, "input.data") from None
    return RequestTensor(name, datatype, array), size


def _outputs(outputs: object, default: bool) -> tuple[list[str] | None, dict[str, bool] | bool]:
    """The outputs asked for (None: all) and whether each goes binary.

    An output asked for twice is answered once (``serve._refuse.unique``), unless the two ask
    for it in different forms (binary and JSON).
    """
    if outputs is None:
        return None, default
    if not isinstance(outputs, list):
        raise _rule("outputs", f"outputs is a {_kind(outputs)}, not a list")
    if not outputs:
        return None, default
    names: list[str] = []
    binary: dict[str, bool] = {}
    for index, item in enumerate(outputs):
        if not isinstance(item, dict):
            raise _rule("outputs", f"outputs[{index}] is a {_kind(item)}, not an object")
        name = tensor_name("outputs", index, item.get("name"))
        shown = echo(name)
        parameters = _parameters(item.get("parameters"), f"output {shown}'s parameters")
        refuse_parameters(f"output {shown}", parameters)
        flag = _flag(parameters, "binary_data", f"output {shown}'s parameters")
        flag = default if flag is None else flag
        if binary.get(name, flag) != flag:
            raise _rule(
                "outputs", f"output {shown} is asked for twice, once binary and once as JSON"
            )
        names.append(name)
        binary[name] = flag
    return names, binary


def _parameters(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _rule("parameters", f"{where} is a {_kind(value)}, not an object")
    return value


def _flag(parameters: dict[str, Any], key: str, where: str) -> bool | None:
    value = parameters.get(key)
    if value is not None and not isinstance(value, bool):
        raise _rule("parameters", f"{key} in {where} is {echo(value)}, not true or false")
    return value


def _raw(
    model: str, version: str | None, body: bytes, limit: int, inputs: Sequence[Any]
) -> InferRequest:
    """A raw binary request (header length 0): the body is the model's only input."""
    if len(inputs) != 1:
        raise _rule(
            "binary.header",
            f"Inference-Header-Content-Length 0 sends one raw tensor, but {model} takes "
            f"{len(inputs)} inputs; send a JSON header",
        )
    (spec,) = inputs
    shape = list(spec.shape)
    unknown = [axis for axis, dim in enumerate(shape) if dim < 0]
    if unknown:
        known = int(np.prod([d for d in shape if d >= 0]))
        width = 0 if spec.datatype == "BYTES" else np.dtype(DATATYPES[spec.datatype]).itemsize
        if len(unknown) > 1 or not width or not known or len(body) % (known * width):
            raise _rule(
                "binary.header",
                f"input {spec.name!r} has shape {shape}: a raw binary request needs every dim "
                "but one known, and a body of whole rows; send a JSON header",
            )
        shape[unknown[0]] = len(body) // (known * width)
    try:
        array = from_bytes(spec.name, spec.datatype, shape, body, limit)
    except InvalidRequest as err:
        raise with_rule(err, "input.data") from None
    return InferRequest(model, version, [RequestTensor(spec.name, spec.datatype, array)])


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


# -- encoding a response -------------------------------------------------------------------------


def encode(response: InferResponse, binary: dict[str, bool] | bool) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when any output is binary (else None)."""
    outputs: list[dict[str, object]] = []
    raw: list[bytes] = []
    for name, array in response.outputs:
        entry: dict[str, object] = {
            "name": name,
            "datatype": output_datatype(array),
            "shape": list(array.shape),
        }
        if binary if isinstance(binary, bool) else binary.get(name, False):
            data = to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(data)}
            raw.append(data)
        else:
            entry["data"] = to_json(array)
        outputs.append(entry)
    document: dict[str, object] = {
        "model_name": response.model,
        "model_version": response.version,
    }
    if response.id is not None:
        document["id"] = response.id
    document["outputs"] = outputs
    header = _DUMPS(document).encode()
    if not raw:
        return header, None
    return b"".join([header, *raw]), len(header)
