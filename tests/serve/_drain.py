"""The drain scenario: requests in flight over REST and gRPC, then SIGTERM, then count answers.

Shared by ``tests/serve/test_drain.py`` and ``benchmarks/drain.py``. REST requests are written
on raw sockets, so the scenario knows when each one is fully written and tells a 200, a 503 and a
reset apart. Some REST requests hold back the end of their body until after the signal: a request
whose body is still arriving when the server is told to stop was accepted, and must be answered.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.settings import FeedSettings

WIDTH = 240 * 320 * 3
"""Floats per sample: 921,600 bytes, the size of an ultraface image (the probe's request)."""
TAIL = 1024
"""Bytes a held-back request sends only after the signal."""


def make_wide_contract(path: Path) -> Path:
    """x float32 [batch, WIDTH] → y float32 [batch, 4] (a MatMul), with its contract."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((WIDTH, 4)).astype(np.float32) / WIDTH
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 4]})))
    return path


@dataclass(frozen=True)
class Target:
    """The served model a scenario sends to: its name and its one FP32 input."""

    model: str = "wide"
    input: str = "x"
    shape: tuple[int, ...] = (1, WIDTH)

    def sample(self, seed: int = 0) -> np.ndarray:
        return np.random.default_rng(seed).standard_normal(self.shape, np.float32)


def rest_request(host: str, target: Target = Target()) -> bytes:
    """A binary-extension infer request (headers and body) for one sample of ``target``."""
    data = target.sample().tobytes()
    header = json.dumps({
        "inputs": [{"name": target.input, "shape": list(target.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)}}],
    }).encode()  # fmt: skip
    head = (
        f"POST /v2/models/{target.model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(header) + len(data)}\r\n\r\n"
    ).encode()
    return head + header + data


def read_reply(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """The status and headers of one HTTP reply (its body read and dropped).

    Raises:
        ConnectionError: the server closed or reset the connection before a whole reply.
    """
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a reply")
        buffer += chunk
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of a reply")
        body += chunk
    return int(lines[0].split()[1]), headers


@dataclass
class Outcome:
    """What the clients of one protocol got."""

    counts: Counter[str] = field(default_factory=Counter)
    """``answered`` (200), ``refused`` (503), ``reset`` (no reply), or another status."""
    retry_after: int = 0
    """503s that carried a ``Retry-After`` header."""
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, error: str = "") -> None:
        self.counts[kind] += 1
        if error and len(self.errors) < 5:
            self.errors.append(error)

    def as_dict(self) -> dict[str, object]:
        return {
            "answered": self.counts["answered"],
            "refused_503": self.counts["refused"],
            "reset": self.counts["reset"],
            "other": {
                k: v for k, v in self.counts.items() if k not in ("answered", "refused", "reset")
            },  # fmt: skip
            "retry_after_on_503": self.retry_after,
            "first_errors": self.errors,
        }


@dataclass
class DrainResult:
    rest: Outcome
    grpc: Outcome
    late: Outcome
    """Requests on new connections after the signal (expected: 503 with Retry-After)."""
    written_before_signal: int
    exit_code: int | None


def run_drain(
    server: object,
    target: Target = Target(),
    *,
    rest: int = 64,
    grpc: int = 64,
    held_back: int = 8,
    late: int = 4,
    timeout: float = 120.0,
) -> DrainResult:
    """Put ``rest`` + ``grpc`` requests in flight, SIGTERM the server, count the answers.

    ``held_back`` of the REST requests send the last ``TAIL`` bytes of their body only after the
    signal, and after the ``late`` REST requests, sent on new connections while the server
    drains. ``server`` is a ``ServerProcess`` (``grpc``, ``http_port`` and ``process``).
    """
    host, port = "127.0.0.1", server.http_port  # type: ignore[attr-defined]
    payload = rest_request(f"{host}:{port}", target)
    outcome, grpc_outcome, late_outcome = Outcome(), Outcome(), Outcome()
    lock = threading.Lock()
    written = threading.Semaphore(0)
    released = threading.Event()

    def one_rest(index: int) -> None:
        hold = TAIL if index < held_back else 0
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                sock.sendall(payload[: len(payload) - hold])
                written.release()
                if hold:
                    released.wait(timeout)
                    sock.sendall(payload[-hold:])
                status, headers = read_reply(sock)
        except OSError as err:
            written.release()
            with lock:
                outcome.add("reset", f"{type(err).__name__}: {err}")
            return
        with lock:
            _count(outcome, status, headers)

    clients = [grpcclient.InferenceServerClient(server.grpc) for _ in range(grpc)]  # type: ignore[attr-defined]
    for client in clients:
        client.is_server_live()  # connected before the clock starts
    feed = grpcclient.InferInput(target.input, list(target.shape), "FP32")
    feed.set_data_from_numpy(target.sample(1))
    grpc_done = threading.Semaphore(0)

    def on_grpc(result: object, error: Exception | None) -> None:
        if error is None:
            kind, text = "answered", ""
        else:  # tritonclient raises its own exception with grpc's status in the text
            text = str(error)
            kind = "refused" if "UNAVAILABLE" in text else "reset"
        with lock:
            grpc_outcome.add(kind, text[:200])
        grpc_done.release()

    threads = [threading.Thread(target=one_rest, args=(i,)) for i in range(rest)]
    for thread in threads:
        thread.start()
    for client in clients:  # sent by grpc's own threads once started
        client.async_infer(target.model, [feed], on_grpc, client_timeout=timeout)
    count = 0
    deadline = time.monotonic() + timeout / 4
    while count < rest and written.acquire(timeout=max(deadline - time.monotonic(), 0.01)):
        count += 1
    time.sleep(0.5)  # the gRPC calls are sent too
    server.process.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
    time.sleep(0.3)
    # the held-back requests keep the server draining: new requests meet a stopping server
    for _ in range(late):
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                sock.sendall(payload)
                status, headers = read_reply(sock)
        except OSError as err:
            late_outcome.add("reset", f"{type(err).__name__}: {err}")
            continue
        _count(late_outcome, status, headers)
    released.set()  # the rest of the held-back bodies arrive
    for thread in threads:
        thread.join(timeout)
    for _ in clients:
        grpc_done.acquire(timeout=timeout)
    for client in clients:
        client.close()
    try:
        code = server.process.wait(timeout)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        code = None
    return DrainResult(outcome, grpc_outcome, late_outcome, count, code)


def _count(outcome: Outcome, status: int, headers: dict[str, str]) -> None:
    if status == 200:
        outcome.add("answered")
    elif status == 503:
        outcome.add("refused")
        outcome.retry_after += "retry-after" in headers
    else:
        outcome.add(str(status))
