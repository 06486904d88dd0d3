"""What the server tests share: a small real token model with its contract, registry versions of
it, and ``onnxgate serve`` run as a real process on free ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.settings import FeedSettings

VOCAB = 50


def make_token_model(path: Path, seed: int = 0) -> Path:
    """ids, mask int64 [batch, seq] → logits float32 [batch, 4]: a Gather into a VOCAB-row
    table (so the contract bounds ids below VOCAB), a masked mean over seq, a MatMul."""
    rng = np.random.default_rng(seed)
    table = numpy_helper.from_array(rng.standard_normal((VOCAB, 8)).astype(np.float32), "emb")
    weight = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    last = numpy_helper.from_array(np.array([-1], np.int64), "last")
    seq_axis = numpy_helper.from_array(np.array([1], np.int64), "seq_axis")
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["g"]),
        helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mf", "last"], ["mu"]),
        helper.make_node("Mul", ["g", "mu"], ["gm"]),
        helper.make_node("ReduceMean", ["gm", "seq_axis"], ["r"], keepdims=0),
        helper.make_node("MatMul", ["r", "w"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tok",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        [table, weight, last, seq_axis],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def copy_model(model: Path, folder: Path) -> Path:
    """The model with its contract and golden file, copied into ``folder`` (to modify freely)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = model.name.removesuffix(".onnx")
    for path in model.parent.glob(f"{stem}.*"):
        shutil.copy2(path, folder / path.name)
    return folder / model.name


def make_token_contract(path: Path, seed: int = 0) -> Path:
    """The token model with its contract: golden samples at batch 1 and 8, seq 1 and 16."""
    make_token_model(path, seed)
    init_contract(
        path,
        ContractConfig(feeds=FeedSettings(dims={"batch": [1, 8], "seq": [1, 16]})),
    )
    return path


def reference_logits(path: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The model run by ONNX Runtime directly: what the server must answer."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"ids": ids, "mask": mask})[0]


def gate_report(path: Path, passed: bool = True) -> dict:
    """The least a registered version needs: a verdict and the bytes it judged."""
    from onnxgate.contract import sha256_file

    return {
        "passed": passed,
        "steps": [],
        "artefacts": [{"role": "model", "sha256": sha256_file(path)}],
        "config": {"targets": {"providers": []}, "steps": {"placement": {"require": "cpu"}}},
    }


def register(registry_url: str, path: Path, *, passed: bool = True, alias: str | None = None):
    """Register the model, its contract and golden file as a version of ``tok``."""
    from onnxgate.contract import contract_paths
    from onnxgate.registry import open_registry

    contract, golden = contract_paths(path)
    with open_registry(registry_url) as reg:
        return reg.register(
            "tok",
            {"model": path, "contract": contract, "golden": golden},
            gate_report(path, passed),
            alias=alias,
        )


def _absolute(path: str | None) -> str:
    """``PYTHONPATH`` with its folders absolute: the server runs in another folder, and a
    relative ``src`` would make it import some other installed onnxgate."""
    return os.pathsep.join(str(Path(p).resolve()) for p in (path or "").split(os.pathsep) if p)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``onnxgate serve`` in a child process, on free ports, with its log kept."""

    def __init__(
        self,
        args: list[str],
        cwd: Path,
        env: dict[str, str] | None = None,
        http_port: int | None = None,
    ) -> None:
        self.http_port = http_port or free_port()
        self.grpc_port = free_port()
        self.log = cwd / f"serve-{self.http_port}.log"
        self._log = self.log.open("wb")
        command = [
            sys.executable, "-m", "onnxgate", "serve", *args,
            "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": _absolute(os.environ.get("PYTHONPATH")),
                **(env or {}),
            },
        )

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=5) as reply:
                return reply.status
        except urllib.error.HTTPError as error:
            return error.code

    def wait_live(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited {self.process.returncode}:\n{self.text()}")
            try:  # live comes first; "serving" is logged once every model is loaded and proven
                if self.status("/v2/health/live") == 200 and "_app: serving " in self.text():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not come up in {timeout} s:\n{self.text()}")

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@contextlib.contextmanager
def token_server(folder: Path, *args: str) -> Iterator[ServerProcess]:
    """``onnxgate serve`` of a token model made in ``folder`` (ungated, with ``args``), live;
    stopped by SIGTERM after, which must be exit 0 with no traceback in its log."""
    model = make_token_contract(folder / "tok.onnx")
    server = ServerProcess([str(model), "--allow-ungated", *args], folder)
    try:
        server.wait_live()
        yield server
    finally:
        code = server.stop()
    assert code == 0 and "Traceback" not in server.text(), server.text()[-4000:]
