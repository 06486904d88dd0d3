"""SIGTERM drains both protocols: every request already accepted is answered, REST included
(bodies still arriving included); requests that arrive after the signal get 503 with Retry-After.
"""

from __future__ import annotations

import socket
import sys

import pytest

from onnxgate.serve._drain import Drain

from ._drain import make_wide_contract, run_drain


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory):
    return make_wide_contract(tmp_path_factory.mktemp("wide") / "wide.onnx")


def test_sigterm_answers_every_request_in_flight_on_both_protocols(start_server, wide_model):
    server = start_server(str(wide_model), "--allow-ungated", "--grace", "60")
    result = run_drain(server, rest=64, grpc=64, held_back=8, late=2)
    summary = (result.rest.as_dict(), result.grpc.as_dict(), result.late.as_dict())
    assert result.written_before_signal == 64, summary
    assert result.rest.counts["answered"] == 64, summary
    assert result.grpc.counts["answered"] == 64, summary
    # after the signal, a new request is refused cleanly, with a hint when to retry
    assert result.late.counts["refused"] == 2, summary
    assert result.late.retry_after == 2, summary
    assert result.exit_code == 0, server.text()


# -- the census, piece by piece ------------------------------------------------------------------


class _Cycle:
    def __init__(self, complete: bool) -> None:
        self.response_complete = complete
        self.keep_alive = True


class _Transport:
    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None


class _Connection:
    def __init__(self, port: int, cycle=None, sock=None) -> None:
        self.client = ("127.0.0.1", port)
        self.cycle = cycle
        self.transport = _Transport(sock)


@pytest.mark.skipif(
    sys.platform != "linux", reason="the accept queue is read from Linux's TCP_INFO"
)
def test_the_accept_queue_is_counted_and_those_connections_admitted():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        waiting = [socket.create_connection(listener.getsockname()) for _ in range(3)]
        try:
            drain = Drain()
            drain.start(listener, [])
            assert not drain.settled(0)  # three connections still to come
            for port in (1, 2, 3, 4):
                drain.connected(_Connection(port))
            assert [drain.admits(("127.0.0.1", p)) for p in (1, 2, 3, 4)] == [
                True,
                True,
                True,
                False,
            ]
            assert drain.settled(0)
        finally:
            for sock in waiting:
                sock.close()


def test_requests_under_way_received_or_unread_are_admitted_the_idle_are_not():
    left, right = socket.socketpair()
    try:
        right.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\n")  # unread by the server
        busy = _Connection(1, _Cycle(complete=False))
        received = _Connection(2, _Cycle(complete=True))
        unread = _Connection(3, sock=left)
        idle = _Connection(4, _Cycle(complete=True))
        drain = Drain()
        assert drain.admits(idle.client)  # not stopping: everything is answered
        drain.received(received)
        drain.start(None, [busy, received, unread, idle])
        assert busy.cycle.keep_alive is False  # answered, then closed
        assert [drain.admits(c.client) for c in (received, unread, idle)] == [True, True, False]
        assert not drain.admits(received.client)  # one request each
        assert not drain.settled(0)  # the busy one has not closed yet
        drain.disconnected(busy)
        assert drain.settled(0)
        assert not drain.settled(1)  # a request still being handled
    finally:
        left.close()
        right.close()
