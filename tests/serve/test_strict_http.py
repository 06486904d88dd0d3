"""Strict HTTP and OIP: what a careful server refuses that a lenient one would serve.

Transfer codings other than plain ``chunked`` (501, or 400 where the framing is invalid), JSON
bodies that are not UTF-8 or start with a byte order mark, nested ``data`` that is not a regular
array of the declared shape, and heads with too many or too large header fields (431), also as
gRPC metadata. Requests go over raw sockets, so every byte is what the case says, to a real
``onnxgate serve`` with small head limits.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import zlib
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from onnxgate.errors import InvalidRequest
from onnxgate.serve._tensors import from_json

from ._serve_helpers import ServerProcess, token_server

INFER = "/v2/models/tok/infer"
MAX_HEADER_BYTES = 32 << 10
"""Above grpc's own default metadata limits (8 KiB, and 16 KiB at most)."""
MAX_HEADERS = 40
GOOD = {
    "inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]},
        {"name": "mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]},
    ]
}
GOOD_JSON = json.dumps(GOOD).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    limits = ("--max-header-bytes", str(MAX_HEADER_BYTES), "--max-headers", str(MAX_HEADERS))
    with token_server(tmp_path_factory.mktemp("strict"), *limits) as running:
        yield running


def exchange(
    server: ServerProcess, head: list[tuple[str, str]], body: bytes = b"", path: str = INFER
) -> tuple[int, dict[str, str], bytes]:
    """A POST with exactly these header fields and body bytes; the status, headers, body."""
    lines = [f"POST {path} HTTP/1.1", "Host: localhost"] + [f"{k}: {v}" for k, v in head]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.sendall(data)
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def error_of(body: bytes) -> str:
    return json.loads(body)["error"]


# -- transfer codings ----------------------------------------------------------------------------


def test_plain_chunked_is_served(server: ServerProcess) -> None:
    for coding in ("chunked", "Chunked"):
        status, _, body = exchange(server, [("Transfer-Encoding", coding)], chunked(GOOD_JSON))
        assert status == 200, body


@pytest.mark.parametrize(
    ("codings", "body"),
    [
        ("gzip, chunked", GOOD_JSON),  # the probe: not gzipped, served as if plain chunked
        ("gzip, chunked", gzip.compress(GOOD_JSON)),  # gzipped: still a coding we do not do
        ("deflate, chunked", zlib.compress(GOOD_JSON)),
        ("x-unknown, chunked", GOOD_JSON),
        ("compress,chunked", GOOD_JSON),
    ],
)
def test_a_transfer_coding_other_than_chunked_is_not_implemented(
    server: ServerProcess, codings: str, body: bytes
) -> None:
    status, headers, reply = exchange(server, [("Transfer-Encoding", codings)], chunked(body))
    assert status == 501, reply
    assert "Transfer-Encoding" in error_of(reply) and "not implemented" in error_of(reply)
    assert headers.get("connection") == "close"


def test_two_transfer_encoding_fields_are_read_as_one_list(server: ServerProcess) -> None:
    head = [("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]
    status, _, reply = exchange(server, head, chunked(GOOD_JSON))
    assert status == 501, reply


@pytest.mark.parametrize(
    "codings",
    [
        "chunked, chunked",
        "chunked, gzip",
        "gzip",
        "chunked, @",
        "gzip, chunked, x y",
        "chunked;ext=1",
    ],
)
def test_an_invalid_transfer_encoding_is_a_bad_request(server: ServerProcess, codings: str) -> None:
    """Chunked must come last, once; the HTTP parser refuses some of these before onnxgate."""
    status, _, reply = exchange(server, [("Transfer-Encoding", codings)], chunked(GOOD_JSON))
    assert status == 400, reply


def test_a_body_claimed_gzip_that_is_not_is_refused(server: ServerProcess) -> None:
    head = [("Content-Encoding", "gzip"), ("Content-Length", str(len(GOOD_JSON)))]
    status, _, reply = exchange(server, head, GOOD_JSON)
    assert status == 400 and "rule encoding" in error_of(reply)
    gzipped = gzip.compress(GOOD_JSON)
    head = [("Content-Encoding", "gzip"), ("Content-Length", str(len(gzipped)))]
    assert exchange(server, head, gzipped)[0] == 200


# -- JSON text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "body"),
    [
        ("utf-16", GOOD_JSON.decode().encode("utf-16")),  # with its BOM, as Python writes it
        ("utf-16-le", GOOD_JSON.decode().encode("utf-16-le")),
        ("utf-16-be", GOOD_JSON.decode().encode("utf-16-be")),
        ("utf-32", GOOD_JSON.decode().encode("utf-32")),
        ("latin-1", json.dumps({**GOOD, "id": "é"}, ensure_ascii=False).encode("latin-1")),
        ("surrogate-as-utf-8", GOOD_JSON[:-1] + b', "id": "\xed\xa0\x80"}'),
    ],
)
def test_json_that_is_not_utf8_is_refused(server: ServerProcess, label: str, body: bytes) -> None:
    status, _, reply = exchange(server, [("Content-Length", str(len(body)))], body)
    assert status == 400, reply
    assert "not UTF-8" in error_of(reply) and "rule json" in error_of(reply)


def test_a_binary_requests_json_header_must_be_utf8_too(server: ServerProcess) -> None:
    header = GOOD_JSON.decode().encode("utf-16")
    head = [("Content-Length", str(len(header))), ("Inference-Header-Content-Length", str(len(header)))]  # fmt: skip
    status, _, reply = exchange(server, head, header)
    assert status == 400 and "not UTF-8" in error_of(reply), reply


def test_a_utf8_byte_order_mark_is_refused(server: ServerProcess) -> None:
    body = b"\xef\xbb\xbf" + GOOD_JSON
    status, _, reply = exchange(server, [("Content-Length", str(len(body)))], body)
    assert status == 400 and "byte order mark" in error_of(reply), reply


def test_utf8_text_is_served(server: ServerProcess) -> None:
    body = json.dumps({**GOOD, "id": "héllo ✓"}, ensure_ascii=False).encode()
    status, _, reply = exchange(server, [("Content-Length", str(len(body)))], body)
    assert status == 200 and json.loads(reply)["id"] == "héllo ✓"


def test_a_lone_surrogate_in_bytes_data_is_a_bad_request(server: ServerProcess) -> None:
    inputs = [{"name": "ids", "datatype": "BYTES", "shape": [1], "data": ["\ud800"]}]
    body = json.dumps({"inputs": inputs}).encode()  # "\\ud800": valid JSON, not text
    status, _, reply = exchange(server, [("Content-Length", str(len(body)))], body)
    assert status == 400 and "'ids'" in error_of(reply), reply


# -- nested data ---------------------------------------------------------------------------------


def infer_ids(server: ServerProcess, shape: list[int], data: object) -> tuple[int, str]:
    document = {
        "inputs": [
            {"name": "ids", "datatype": "INT64", "shape": shape, "data": data},
            {
                "name": "mask",
                "datatype": "INT64",
                "shape": shape,
                "data": [1] * int(np.prod(shape)),
            },
        ]
    }
    body = json.dumps(document).encode()
    status, _, reply = exchange(server, [("Content-Length", str(len(body)))], body)
    return status, reply.decode()


@pytest.mark.parametrize(
    "data", [[1, 2, 3, 4, 5, 6], [[1, 2, 3], [4, 5, 6]]], ids=["flat", "nested"]
)
def test_flat_and_regular_nested_data_are_served(server: ServerProcess, data: list) -> None:
    assert infer_ids(server, [2, 3], data)[0] == 200


@pytest.mark.parametrize(
    "data",
    [
        [[1, 2], [3, 4, 5, 6]],  # the count is right, the rows are not
        [[1, 2, 3, 4], [5, 6]],
        [[1, 2, 3], [4, 5], 6],
        [[[1, 2, 3]], [[4, 5, 6]]],  # deeper than the shape
        [[1, 2, 3], 4, 5, 6],
        [[1, [2, 3]], [4, 5, 6]],
    ],
)
def test_ragged_nested_data_is_refused(server: ServerProcess, data: list) -> None:
    status, reply = infer_ids(server, [2, 3], data)
    assert status == 400, reply
    assert "'ids'" in error_of(reply.encode()) and "rule input.data" in reply


def test_the_probes_ragged_image_is_refused() -> None:
    """``[[0.0]*10, [[0.0]]*774]`` holds 784 values for ``[1, 1, 28, 28]``, in no regular array."""
    with pytest.raises(
        InvalidRequest, match=r"'image'.*nested.*data has 2 values where dim 0 is 1"
    ):
        from_json("image", "FP32", [1, 1, 28, 28], [[0.0] * 10, [[0.0]] * 774], 1 << 20)
    regular = np.arange(784, dtype=np.float32).reshape(1, 1, 28, 28)
    for data in (regular.tolist(), regular.reshape(-1).tolist()):
        np.testing.assert_array_equal(
            from_json("image", "FP32", [1, 1, 28, 28], data, 1 << 20), regular
        )


# -- the head ------------------------------------------------------------------------------------


def test_too_many_header_fields_are_431(server: ServerProcess) -> None:
    fields = [(f"X-Field-{i}", "v") for i in range(MAX_HEADERS)]  # with Host, one too many
    status, headers, reply = exchange(
        server, fields + [("Content-Length", str(len(GOOD_JSON)))], GOOD_JSON
    )
    assert status == 431, reply
    assert "--max-headers" in error_of(reply) and headers.get("connection") == "close"
    fewer = fields[: MAX_HEADERS - 3] + [("Content-Length", str(len(GOOD_JSON)))]
    assert exchange(server, fewer, GOOD_JSON)[0] == 200
    many = [(f"X-Field-{i}", "v") for i in range(5000)]  # the probe's 5,000
    many.append(("Content-Length", str(len(GOOD_JSON))))
    assert exchange(server, many, GOOD_JSON)[0] == 431


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES, 200_000, 4 << 20])
def test_a_head_above_the_limit_is_431(server: ServerProcess, size: int) -> None:
    """Whether the app or the protocol (which stops buffering it) refuses it: 431, read whole."""
    head = [("X-Big", "b" * size), ("Content-Length", str(len(GOOD_JSON)))]
    status, headers, reply = exchange(server, head, GOOD_JSON)
    assert status == 431, reply[:300]
    assert "--max-header-bytes" in error_of(reply) and headers.get("connection") == "close"
    assert len(reply) < 1024


def test_a_head_below_the_limit_is_served(server: ServerProcess) -> None:
    head = [("X-Big", "b" * (MAX_HEADER_BYTES - 200)), ("Content-Length", str(len(GOOD_JSON)))]
    assert exchange(server, head, GOOD_JSON)[0] == 200


def test_a_head_sent_in_pieces_is_bounded(server: ServerProcess) -> None:
    """A head that never ends, sent a line at a time: refused once above the limit, and the
    client still reads the refusal (what it sends after is read and dropped, not reset)."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.sendall(f"POST {INFER} HTTP/1.1\r\nHost: x\r\n".encode())
        for _ in range(64 * MAX_HEADER_BYTES // 1000):
            sock.sendall(b"X-Piece: " + b"p" * 1000 + b"\r\n")
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        assert reply.status == 431
        assert "--max-header-bytes" in error_of(reply.read())


def test_a_pipelined_head_above_the_limit_is_refused_after_the_answer_before_it(
    server: ServerProcess,
) -> None:
    """A request still being answered (a slow gzip body to decode) keeps its 200 when the head
    pipelined behind it goes over the limit: the 431 follows it, and the log stays clean."""
    pad = {**GOOD, "parameters": {"pad": [0] * 2_000_000}}
    body = gzip.compress(json.dumps(pad).encode())
    first = (
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.sendall(first)
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        sock.sendall(b"X-Pad: " + b"a" * (512 << 10) + b"\r\n")  # beyond any one read
        received = b""
        while chunk := sock.recv(1 << 16):  # the server closes after the refusal
            received += chunk
    replies = [part.split(b"\r\n", 1)[0] for part in received.split(b"HTTP/1.1 ")[1:]]
    assert replies == [b"200 OK", b"431 Request Header Fields Too Large"], received[:500]
    assert b"--max-header-bytes" in received
    assert "Traceback" not in server.text() and "Exception in ASGI" not in server.text()


def test_grpc_metadata_is_bounded_alike(server: ServerProcess) -> None:
    """The same bound: what REST takes gRPC takes (above grpc's default), and no more."""
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ServerLiveRequest()
        within = [("x-within", "w" * (MAX_HEADER_BYTES - 4096))]
        assert stub.ServerLive(request, metadata=within, timeout=30).live
        for size in (MAX_HEADER_BYTES, 4 * MAX_HEADER_BYTES):
            with pytest.raises(grpc.RpcError) as caught:
                stub.ServerLive(request, metadata=[("x-big", "b" * size)], timeout=30)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value
            assert "metadata size exceeds" in (caught.value.details() or "")
        assert stub.ServerLive(request, timeout=30).live  # and the server goes on


def test_the_head_check_takes_a_scope_without_a_query_string() -> None:
    """ASGI servers give ``query_string``; a scope built by hand (a benchmark's) may not."""
    from onnxgate.serve._rest import _check_head

    scope = {"type": "http", "method": "POST", "path": INFER, "headers": [(b"host", b"x")]}
    _check_head(scope, MAX_HEADERS, MAX_HEADER_BYTES)  # no KeyError, nothing to refuse
