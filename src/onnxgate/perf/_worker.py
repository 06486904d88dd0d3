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
- ``{"op": "memory"}`` → ``{"ok": {"peak_rss_kb": ...}}``: this process's peak resident memory
  so far (the load answers the peak before its session too, ``peak_rss_kb_before``)

An ``onnx`` path ending in ``.ort`` is ONNX Runtime's own ORT format, opened as such.
- ``{"op": "quit"}``

A failure answers ``{"error": CLASS, "message": ..., "hint": ...}`` with a GateError's class name,
so the parent raises the same kind of error. The runners turn everything ONNX Runtime or a torch
module raises into a GateError (``SessionFailed``, ``RunFailed``, ``ConfigError``), so any other
exception here is a bug in onnxgate: it answers ``InternalError`` (exit 4) with the exception and
where it was raised, never ``RunFailed``, so a crash of the tool cannot read as a verdict on the
model. A request that is not JSON is the parent's bug and is answered the same way.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from onnxgate.errors import GateError, InternalError, first_line
from onnxgate.runners import UnknownRequest, private_stdout, serve_requests

_PACKAGE = str(Path(__file__).resolve().parents[1])
"""The onnxgate package folder: frames inside it are where an internal error happened."""


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
            from onnxgate.runners import check_session, open_runner, runtime_version
            from onnxgate.settings import SessionSettings

            options = SessionSettings.from_wire(request.get("settings") or {})
            check_session(options)
            from onnxgate.contract_store import contract_extras

            before = peak_rss_kb()  # the interpreter, onnxgate and ONNX Runtime imported
            path = Path(request["onnx"])
            if path.suffix == ".ort":
                from onnxgate.runners import OrtFormatRunner

                runner = OrtFormatRunner(path, options)
            else:
                runner = open_runner(load_model(path), options, extras=contract_extras())
            self.runner = runner.__enter__()
            return {
                "peak_rss_kb_before": before,
                "runtime": f"onnxruntime {runtime_version()}",
                "providers": runner.providers(),
                "settings": runner.info().settings,
            }
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
        raise InternalError(
            "a timing worker was asked to load neither an ONNX model nor a torch module."
        )

    def set_feeds(self, request: dict[str, Any]) -> dict[str, Any]:
        with np.load(request["path"], allow_pickle=False) as data:
            self.feeds = {name: data[name] for name in data.files}
        return {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.runner is None:
            raise InternalError("a timing worker was asked to run before anything was loaded.")
        count = max(1, int(request.get("count") or 1))
        seconds = float(request.get("seconds") or 0.0)
        deadline = time.perf_counter() + seconds
        elapsed: list[int] = []
        while True:
            elapsed.append(self.runner.infer(self.feeds).latency_ns)
            if len(elapsed) >= count or (seconds and time.perf_counter() >= deadline):
                return {"ns": elapsed}

    def memory(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"peak_rss_kb": peak_rss_kb()}

    def close(self) -> None:
        if self.runner is not None:
            self.runner.__exit__(None, None, None)
            self.runner = None


def peak_rss_kb() -> int:
    """This process's peak resident memory in KiB: ``VmHWM``, else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB on Linux


def _place(frame: traceback.FrameSummary) -> str:
    """``onnxgate/perf/_worker.py:80 in set_feeds``: the path from the package or site-packages."""
    parts = Path(frame.filename).parts
    anchors = [i for i, part in enumerate(parts) if part in {"onnxgate", "site-packages"}]
    start = anchors[-1] + (parts[anchors[-1]] == "site-packages") if anchors else len(parts) - 1
    return f"{'/'.join(parts[start:])}:{frame.lineno} in {frame.name}"


def where(error: BaseException) -> str:
    """Where an exception was raised: the innermost frame in onnxgate, and the innermost of all.

    ``onnxgate/perf/_worker.py:80 in set_feeds, inside numpy/lib/_npyio_impl.py:462 in load``
    names onnxgate's line to look at even when a library it called raised.
    """
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "an unknown place"
    ours = [frame for frame in frames if frame.filename.startswith(_PACKAGE)]
    if not ours:
        return _place(frames[-1])
    if ours[-1] is frames[-1]:
        return _place(ours[-1])
    return f"{_place(ours[-1])}, inside {_place(frames[-1])}"


def internal_error(error: BaseException, op: object) -> InternalError:
    """A non-GateError raised while answering ``op``: a bug in onnxgate, with where it happened."""
    during = f"during {op!r}" if isinstance(op, str) else "while reading a request"
    return InternalError(
        f"the timing worker failed {during}: {first_line(error, with_type=True)} "
        f"(at {where(error)}).",
        hint="This is a bug in onnxgate, not a verdict on the model; please report it with this message.",
    )


def _error_answer(error: GateError) -> dict[str, Any]:
    return {"error": type(error).__name__, "message": error.message, "hint": error.hint}


def _failure(error: Exception, op: object) -> dict[str, Any]:
    if isinstance(error, GateError):
        return _error_answer(error)
    if isinstance(error, UnknownRequest):
        return _error_answer(InternalError(f"a timing worker was sent an {error}."))
    # the runners wrap foreign errors: anything else is ours
    return _error_answer(internal_error(error, op))


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer requests until ``quit`` or end of input."""
    worker = _Worker()
    handlers = {
        "load": worker.load,
        "feeds": worker.set_feeds,
        "run": worker.run,
        "memory": worker.memory,
    }
    try:
        serve_requests(requests, answers, handlers, _failure)
    finally:
        worker.close()


def main() -> None:
    """Answer on a private copy of stdout, with fd 1 sent to stderr."""
    serve(sys.stdin, private_stdout())


if __name__ == "__main__":
    main()
