"""One process, one event loop: the REST server (uvicorn) and the gRPC server over one ``Hub``.

SIGTERM or SIGINT starts a graceful stop: readiness turns false at once (a load balancer stops
sending), new requests are refused (REST: 503 with ``Retry-After``, see ``serve._drain``; gRPC:
UNAVAILABLE), every request already accepted finishes within the grace period, REST requests
whose body is still arriving included, then both servers close and the models are unloaded. A
second signal stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from onnxgate.errors import EnvironmentProblem, ExtraMissing
from onnxgate.serve._drain import Drain
from onnxgate.serve._hub import Hub, ServeConfig

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1024
"""Connections (REST) and calls (gRPC) at once: bounded, like the queues behind them."""
LINGER_SECONDS = 5.0
"""How long a connection whose head was refused still reads (and drops) what the client sends."""


@dataclass(frozen=True)
class Listen:
    """Where the server listens; a port of 0 turns that protocol off."""

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001


def _refusal(status: bytes, message: str) -> bytes:
    """A whole HTTP response refusing a request, closing its connection."""
    body = json.dumps({"error": message}).encode()
    return b"".join(
        [
            b"HTTP/1.1 ", status, b"\r\ncontent-type: application/json\r\n",
            b"content-length: ", str(len(body)).encode(), b"\r\nconnection: close\r\n\r\n",
            body,
        ]
    )  # fmt: skip


def _uvicorn_server(app: object, listen: Listen, config: ServeConfig, drain: Drain) -> object:
    try:
        import uvicorn
        from uvicorn.protocols.http.auto import AutoHTTPProtocol
    except ImportError as err:
        raise ExtraMissing(
            f"serving REST needs the 'serve' extra ({err.name or 'uvicorn'} is not installed).",
            extra="serve",
        ) from err

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # the app owns SIGTERM, not uvicorn
            yield

    most = config.max_header_bytes
    too_large = _refusal(
        b"431 Request Header Fields Too Large",
        f"the request's head is above the server's limit of {most} bytes (--max-header-bytes)",
    )

    class _Protocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
        """uvicorn's HTTP protocol, telling the drain what it sees, bounding the head it buffers.

        httptools keeps a head until it is whole and has no limit of its own. The bytes of every
        read after the one a request began in, while its head is not whole yet, are counted, and
        of that first read (which may also hold the request before it) the URL and the header
        fields parsed so far; a field still incomplete at its end is not, so the memory a head
        may take is one read (up to 256 KiB) plus the limit. Beyond it the request is refused
        (431), after the response to a pipelined request before it, and the rest of what the
        client sends is read and dropped until it stops, so it reads the refusal instead of a
        reset. The app checks the whole head exactly (``serve._rest``); this only bounds memory.
        (h11, used where httptools is not installed, bounds its own buffer at twice the limit
        and answers 400 beyond; below that the app answers 431.)
        """

        _head: int | None = None
        _began = False
        _refused = False
        _owed = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            drain.connected(self)

        def on_message_begin(self) -> None:
            self._head, self._began = 0, True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._head = None
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            drain.received(self)
            super().data_received(data)
            if self._head is None:
                return
            if self._began:  # the read the head began in may hold the request before it:
                self._began = False  # count what the parser has taken of this head
                self._head = len(self.url) + sum(len(k) + len(v) for k, v in self.headers)
            else:
                self._head += len(data)
            if self._head > most:
                self._refused = True  # what the client sends from now on is dropped
                if self.cycle is not None and not self.cycle.response_complete:
                    self._owed = True  # a pipelined request before it is still being answered
                    self.flow.pause_reading()
                else:
                    self._refuse_head()

        def _refuse_head(self) -> None:
            drain.answered(self)
            self.transport.write(too_large)
            self.transport.write_eof()
            loop = asyncio.get_running_loop()
            loop.call_later(LINGER_SECONDS, self.transport.close)

        def on_response_complete(self) -> None:
            drain.answered(self)
            super().on_response_complete()
            if self._owed:  # the response before the refused head is out: now the refusal
                self._owed = False
                self._refuse_head()

        def connection_lost(self, exc: Exception | None) -> None:
            drain.disconnected(self)
            super().connection_lost(exc)

    grace = config.grace_seconds
    settings = uvicorn.Config(
        app,
        host=listen.host,
        port=listen.http_port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        http=_Protocol,
        timeout_graceful_shutdown=max(1, int(grace)),
        timeout_keep_alive=30,
        limit_concurrency=MAX_CONNECTIONS,  # beyond, uvicorn answers 503 at once
        h11_max_incomplete_event_size=2 * most,  # the app judges exactly; this bounds memory
    )
    return _Server(settings)


async def _stop_http(server: Any, task: asyncio.Task[None], drain: Drain, deadline: float) -> None:
    """Answer every admitted request (until ``deadline``), then close the REST server."""
    loop = asyncio.get_running_loop()
    while not drain.settled(len(server.server_state.tasks)) and not task.done():
        if loop.time() >= deadline:
            log.warning("REST requests still in flight at the end of the grace period")
            break
        await asyncio.sleep(0.05)
    # uvicorn closes the listener and idle connections, waits for what is left, then cancels it
    server.config.timeout_graceful_shutdown = max(deadline - loop.time(), 0.1)
    server.should_exit = True
    with contextlib.suppress(BaseException):
        await task


def _reach(listen: Listen) -> str:
    """Where this process reaches its own gRPC server."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(listen.host, listen.host)
    return f"[{host}]:{listen.grpc_port}" if ":" in host else f"{host}:{listen.grpc_port}"


def _bind(listen: Listen) -> socket.socket:
    """A listening socket for the REST server.

    Raises:
        EnvironmentProblem: the address cannot be bound (the port is taken, the host unknown).
    """
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.http_port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise EnvironmentProblem(
            f"cannot listen for HTTP on {listen.host}:{listen.http_port}: {err.strerror or err}.",
            hint="Is another server on that port? Pick another --http-port.",
        ) from None
    sock.set_inheritable(True)
    return sock


async def run_server(
    items: Sequence[str],
    config: ServeConfig,
    listen: Listen,
    *,
    on_ready: Callable[[Hub], None] | None = None,
    stop: asyncio.Event | None = None,
) -> Hub:
    """Load and prove every model, serve both protocols until a signal (or ``stop``), stop.

    Raises:
        GateError: a model cannot be opened (not gated, not found, no session).
        EnvironmentProblem: a port cannot be bound.
    """
    from onnxgate.serve._grpc import make_server, stop_server
    from onnxgate.serve._rest import make_app

    hub = Hub(config)  # live at once, ready once every model is loaded and proven
    hub.expect(items)  # before listening: a request in the meantime is 503, never 404
    drain = Drain()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0
    sock = None
    grpc_server = None
    http_server = None
    http_task = None

    def begin_drain() -> None:
        hub.draining = True
        connections = http_server.server_state.connections if http_server else ()  # type: ignore[attr-defined]
        drain.start(sock, list(connections))

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.warning(
                "stopping: finishing requests in flight (up to %.0f s)", config.grace_seconds
            )
            begin_drain()  # at once, on the loop: the census must not miss a request
            stop.set()
        else:
            log.warning("stopping now")
            raise SystemExit(1)

    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        if listen.grpc_port:
            grpc_server = make_server(hub, f"{listen.host}:{listen.grpc_port}")
            await grpc_server.start()
        if listen.http_port:
            sock = _bind(listen)  # ours, so a taken port is an error here, not uvicorn's exit
            http_server = _uvicorn_server(make_app(hub, drain), listen, config, drain)
            http_task = loop.create_task(http_server.serve(sockets=[sock]))  # type: ignore[attr-defined]
            while not http_server.started and not http_task.done():  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
            if http_task.done():
                http_task.result()
                raise EnvironmentProblem(
                    f"the HTTP server on {listen.host}:{listen.http_port} stopped."
                )
        log.info(
            "listening on http://%s:%s and grpc %s:%s (live; ready once the models are proven)",
            listen.host,
            listen.http_port or "-",
            listen.host,
            listen.grpc_port or "-",
        )
        await hub.load(items)
        log.info("serving %s", ", ".join(sorted(hub.entries)))
        if on_ready:
            on_ready(hub)
        waiters = [loop.create_task(stop.wait())]
        if http_task is not None:
            waiters.append(http_task)
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        begin_drain()
        deadline = loop.time() + config.grace_seconds  # one grace period for everything
        fronts = []
        if grpc_server is not None:  # refuses new calls, lets the received ones finish
            fronts.append(stop_server(grpc_server, _reach(listen), config.grace_seconds))
        if http_server is not None and http_task is not None:
            fronts.append(_stop_http(http_server, http_task, drain, deadline))
        await asyncio.gather(*fronts)
        await hub.stop(deadline - loop.time())
        for sig in installed:
            loop.remove_signal_handler(sig)
    log.info("stopped")
    return hub
