"""ONNX Runtime's own log lines, captured while it works, cleaned to what says why.

A provider that fails to start says why only in ONNX Runtime's C++ log, on file descriptor 2
(Python's ``sys.stderr`` never sees it), and releases whose Python API retries on CPU print their
"EP Error" on file descriptor 1. The settings applier (``_session.py``) and doctor's provider probe
capture both around session creation. Standard library only: both run inside environments where
onnxgate is not installed and import this file as a sibling (doctor's probe adds this folder to
its path).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIX = re.compile(r"^\S+ \S+ \[[EWIVF]:onnxruntime:[^\]]*\] ")
"""``2026-11-24 13:51:35.05 [W:onnxruntime:Default, x.cc:1066 Function] ``: says nothing of why."""
_RETRY = "EP Error "
"""How ONNX Runtime's Python API announces a provider error before retrying on CPU."""
_LOCK = threading.Lock()
"""File descriptors are per process: one capture at a time, or one would keep the other's sink."""


def clean(text: str, *, ort_only: bool = False) -> list[str]:
    """Log text as lines without colour codes, ONNX Runtime's prefix, or blank lines.

    A provider's own error line carries the C++ function before ``[ERROR]``; only the words after
    it are kept. With ``ort_only``, lines that are not ONNX Runtime's (a progress display of the
    calling process, say) are dropped.
    """
    lines = []
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.strip()
        ours = bool(_PREFIX.match(line)) or "[ERROR]" in line or line.startswith(_RETRY)
        if ort_only and not ours:
            continue
        line = _PREFIX.sub("", line)
        if "[ERROR]" in line:
            line = line.rsplit("[ERROR]", 1)[1]
        if line.strip():
            lines.append(" ".join(line.split()))
    return lines


def captured(action: Callable[[], Any], *, ort_only: bool = False) -> tuple[Any, list[str]]:
    """Run ``action`` with file descriptors 1 and 2 sent to a file: its result and the lines.

    Args:
        action: what to run while the output is captured.
        ort_only: keep only ONNX Runtime's own lines (see ``clean``).
    """
    with _LOCK, tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        try:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            result = action()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
    return result, clean(text, ort_only=ort_only)
