"""A timing worker: one contender of a contest, alone in its own process.

PyTorch and ONNX Runtime both keep thread pools that spin after a run; in one process they steal
each other's cores and distort both figures. So every contender of ``bench --vs`` and of ``tune``'s
final contest runs here, in a process of its own, driven by the parent over a JSON-lines protocol
on stdin/stdout (``_contest.py``). The protocol's stdout is a private copy of file descriptor 1;
fd 1 itself is pointed at stderr, so a library that prints cannot break the protocol.

Requests and answers, one JSON object a line:

- ``{"op": "load", "onnx": PATH, "settings": {...}}`` or
  ``{"op": "load", "torch": ENTRY, "signature": PATH, "threads": N}`` → ``{"ok": {"runtime": ...}}``
- ``{"op": "feeds", "path": NPZ}`` → ``{"ok": {}}`` (arrays kept for the runs that follow)
- ``{"op": "run", "count": N, "seconds": S}`` → ``{"ok": {"ns": [...]}}``: at least one run, then
  runs until ``count`` runs or ``S`` seconds, whichever comes first
- ``{"op": "quit"}``

A failure answers ``{"error": CLASS, "message": ..., "hint": ...}`` with a GateError's class name,
so the parent raises the same kind of error.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from onnxgate.errors import ConfigError, GateError, first_line


class _Worker:
    def __init__(self) -> None:
        self.runner: Any = None
        self.feeds: dict[str, np.ndarray] = {}
        self.torch_threads: int | None = None
        """PyTorch's own default, read before the first change (the setting is per process)."""

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        from onnxgate.model import Signature, load_model

        self.close()
        if request.get("onnx"):
            from onnxgate.runners import OrtOptions, OrtRunner
            from onnxgate.runners._ort import runtime_version

            options = OrtOptions.from_settings(request.get("settings") or {})
            runner = OrtRunner(load_model(Path(request["onnx"])), options)
            self.runner = runner.__enter__()
            return {"runtime": f"onnxruntime {runtime_version()}", "providers": runner.providers()}
        if request.get("torch"):
            from onnxgate.runners import TorchRunner

            signature = Signature.from_graph(load_model(Path(request["signature"])).proto.graph)
            runner = TorchRunner(request["torch"], signature)
            self.runner = runner.__enter__()
            torch = runner._torch
            if self.torch_threads is None:
                self.torch_threads = torch.get_num_threads()
            torch.set_num_threads(int(request.get("threads") or 0) or self.torch_threads)
            return {"runtime": f"torch {torch.__version__}", "threads": torch.get_num_threads()}
        raise ConfigError("a worker was asked to load neither an ONNX model nor a torch module.")

    def set_feeds(self, request: dict[str, Any]) -> dict[str, Any]:
        with np.load(request["path"], allow_pickle=False) as data:
            self.feeds = {name: data[name] for name in data.files}
        return {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.runner is None:
            raise ConfigError("a worker was asked to run before anything was loaded.")
        count = max(1, int(request.get("count") or 1))
        seconds = float(request.get("seconds") or 0.0)
        deadline = time.perf_counter() + seconds
        elapsed: list[int] = []
        while True:
            elapsed.append(self.runner.infer(self.feeds).latency_ns)
            if len(elapsed) >= count or (seconds and time.perf_counter() >= deadline):
                return {"ns": elapsed}

    def close(self) -> None:
        if self.runner is not None:
            self.runner.__exit__(None, None, None)
            self.runner = None


def _answer(channel: TextIO, document: dict[str, Any]) -> None:
    channel.write(json.dumps(document) + "\n")
    channel.flush()


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer requests until ``quit`` or end of input."""
    worker = _Worker()
    handlers = {"load": worker.load, "feeds": worker.set_feeds, "run": worker.run}
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op == "quit":
            break
        try:
            handler = handlers.get(op)
            if handler is None:
                raise ConfigError(f"unknown worker request {op!r}.")
            _answer(answers, {"ok": handler(request)})
        except GateError as error:
            _answer(
                answers,
                {"error": type(error).__name__, "message": error.message, "hint": error.hint},
            )
        except Exception as error:  # anything else still goes back as one answer
            _answer(answers, {"error": "RunFailed", "message": first_line(error, with_type=True)})
    worker.close()


def main() -> None:
    """Keep a private copy of stdout for the protocol and send fd 1 to stderr."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
