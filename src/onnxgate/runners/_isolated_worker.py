"""A timing worker inside another ONNX Runtime's environment, for ``bench --runtime``.

It speaks the protocol of onnxgate's own timing worker (``_protocol.py``: JSON lines, ``load``,
``feeds``, ``run``, ``quit``) for ONNX contenders, so a ``Contest`` drives a contender on another
release or package (``onnxruntime-openvino==1.24.1``) exactly as it drives one here. It imports
only the standard library, NumPy, ONNX Runtime and its siblings ``_protocol.py`` and
``_session.py`` (the one settings applier), because onnxgate is not installed in that
environment.

Errors answer ``{"error": CLASS, "message": ...}`` with the name of the GateError the parent
raises: the applier's refusals by kind, a failed run as ``RunFailed``, anything else as
``InternalError`` (a bug here, not a verdict on the model).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, TextIO

import numpy as np
import onnxruntime as ort  # noqa: TID251  (runs inside the runtime being timed)

if __package__:
    from onnxgate.runners import _protocol, _session
else:  # run as a script: _protocol.py and _session.py sit in this same folder
    import _protocol  # type: ignore[no-redef]
    import _session  # type: ignore[no-redef]

REFUSALS = {
    "unavailable": "ProviderUnavailable",
    "provider": "ProviderFailed",
    "level": "ConfigError",
    "session": "SessionFailed",
}
"""The GateError class the parent raises for each kind of refusal."""


class _Failure(Exception):
    def __init__(self, kind: str, message: str, refused: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.refused = refused
        """The applier's refusal, so the parent words it as every other caller does."""


class _Worker:
    def __init__(self) -> None:
        self.session: Any = None
        self.feeds: dict[str, np.ndarray] = {}
        self.runtime = f"onnxruntime {ort.__version__}"
        """The runtime as the parent names it (``load`` is told the package)."""

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        if not request.get("onnx"):
            raise _Failure("ConfigError", "this worker runs ONNX models only")
        settings = request.get("settings") or {}
        package = request.get("package") or "onnxruntime"
        self.runtime = f"{package} {ort.__version__}"
        try:
            self.session = _session.create(request["onnx"], settings)
        except _session.Refused as refused:
            kind = REFUSALS.get(refused.kind, "RunFailed")
            raise _Failure(kind, refused.message, refused.to_dict()) from None
        applied = _session.applied(self.session, settings)
        return {
            "runtime": f"{package} {ort.__version__}",
            "providers": applied["providers"],
            "settings": applied,
        }

    def set_feeds(self, request: dict[str, Any]) -> dict[str, Any]:
        with np.load(request["path"], allow_pickle=False) as data:
            self.feeds = {name: data[name] for name in data.files}
        return {}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.session is None:
            raise _Failure("ConfigError", "the worker was asked to run before anything was loaded")
        count = max(1, int(request.get("count") or 1))
        seconds = float(request.get("seconds") or 0.0)
        deadline = time.perf_counter() + seconds
        elapsed: list[int] = []
        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        while True:
            start = time.perf_counter_ns()
            try:
                self.session.run(None, self.feeds, run_options)
            except Exception as err:  # ORT raises its own exception types
                raise _Failure("RunFailed", " ".join(str(err).split())) from None
            elapsed.append(time.perf_counter_ns() - start)
            if len(elapsed) >= count or (seconds and time.perf_counter() >= deadline):
                return {"ns": elapsed}

    def failure(self, error: Exception, op: object) -> dict[str, Any]:
        """The answer for a failed request (see ``_protocol.serve``)."""
        if isinstance(error, _Failure):
            answer = {"error": error.kind, "message": error.message, "runtime": self.runtime}
            return answer | ({"refused": error.refused} if error.refused else {})
        if isinstance(error, _protocol.UnknownRequest):
            return {
                "error": "InternalError",
                "message": f"the isolated timing worker got an {error}",
            }
        # a bug in this script: never a verdict on the model
        where = traceback.extract_tb(error.__traceback__)[-1]
        return {
            "error": "InternalError",
            "message": f"the isolated timing worker failed during {op!r}: {type(error).__name__}: "
            f"{error} (at {os.path.basename(where.filename)}:{where.lineno})",
        }


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer requests until ``quit`` or end of input."""
    worker = _Worker()
    handlers = {"load": worker.load, "feeds": worker.set_feeds, "run": worker.run}
    _protocol.serve(requests, answers, handlers, worker.failure)


def main() -> None:
    """Answer on a private copy of stdout, with fd 1 sent to stderr."""
    serve(sys.stdin, _protocol.private_stdout())


if __name__ == "__main__":
    main()
