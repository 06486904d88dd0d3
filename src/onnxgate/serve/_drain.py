"""Which REST requests a stopping server still answers.

A stop must not drop what was already sent. When the signal comes, some requests are being
answered, some are having their body read, some sit unread in a socket, and some connections
wait in the kernel's accept queue, fully written by their client but not yet seen by uvicorn.
All of those were accepted: closing the listener or the idle-looking connections would reset
them. So the stop does not close anything at first; it takes a census instead:

- a connection with a request under way, with bytes of one received, or with bytes unread in
  its socket, may finish that request;
- the connections waiting in the accept queue (Linux reports how many) may each send one;
- anything else, a new connection or the next request on a kept-alive one, is new: 503 with
  ``Retry-After``, so the client goes to another replica.

Every reply during the drain closes its connection. The server stops once every admitted
request is answered (or the grace period is over).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import socket
import struct
import termios
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

RETRY_AFTER = b"1"
"""Seconds a refused client should wait before retrying (on another replica)."""

_TCPI_UNACKED = 24
"""Offset of ``tcpi_unacked`` in Linux's ``struct tcp_info``: a listener's accept queue length."""


class Drain:
    """The admission census of a stopping REST server (see the module docstring).

    uvicorn's protocol calls ``connected``, ``received``, ``answered`` and ``disconnected``;
    the application asks ``admits`` before it reads an infer request's body.
    """

    def __init__(self) -> None:
        self.draining = False
        self._admitted: set[object] = set()
        """Client addresses whose next request is answered."""
        self._queued = 0
        """Connections that were in the accept queue at the signal and are not yet seen."""
        self._unanswered: set[object] = set()
        """Connections (protocols) with bytes of a request received and no reply yet."""

    def start(self, listener: socket.socket | None, connections: Iterable[Any]) -> None:
        """Take the census: from now on only admitted requests are answered."""
        if self.draining:
            return
        self.draining = True
        self._queued = _accept_queue(listener) if listener is not None else 0
        for connection in connections:
            cycle = getattr(connection, "cycle", None)
            busy = cycle is not None and not cycle.response_complete
            if busy:
                cycle.keep_alive = False  # answered, then closed
            if busy or connection in self._unanswered or _unread(connection.transport):
                self._admitted.add(connection.client)
        log.info(
            "REST: %d request(s) under way or arriving, %d connection(s) waiting to be accepted; "
            "new requests get 503",
            len(self._admitted),
            self._queued,
        )

    def connected(self, connection: Any) -> None:
        if self.draining and self._queued > 0:  # accepted by the kernel before the signal
            self._queued -= 1
            self._admitted.add(connection.client)

    def received(self, connection: Any) -> None:
        self._unanswered.add(connection)

    def answered(self, connection: Any) -> None:
        self._unanswered.discard(connection)

    def disconnected(self, connection: Any) -> None:
        self._unanswered.discard(connection)
        self._admitted.discard(connection.client)

    def admits(self, client: object) -> bool:
        """Whether a request from ``client`` (the ASGI scope's ``client``) is answered."""
        if not self.draining:
            return True
        if client in self._admitted:
            self._admitted.discard(client)
            return True
        return False

    def settled(self, running: int) -> bool:
        """Every admitted request is answered, given ``running`` requests still being handled."""
        return self.draining and not running and not self._admitted and self._queued == 0


def _accept_queue(listener: socket.socket) -> int:
    """Connections the kernel accepted on ``listener`` that nobody has taken yet (Linux; else 0)."""
    with contextlib.suppress(OSError, AttributeError):
        info = listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return struct.unpack_from("I", info, _TCPI_UNACKED)[0]
    return 0


def _unread(transport: Any) -> bool:
    """Whether bytes wait in the transport's socket that the server has not read yet."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    count = array.array("i", [0])
    try:
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    except OSError:
        return False
    return count[0] > 0
