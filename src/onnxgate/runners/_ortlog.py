"""ONNX Runtime's own log lines, captured while it works, cleaned to what says why.

A provider that fails to start says why only in ONNX Runtime's C++ log, on file descriptor 2
(Python's ``sys.stderr`` never sees it). The settings applier (``_session.py``) and doctor's
provider probe both capture it around session creation. Standard library only: both run inside
environments where onnxgate is not installed and import this file as a sibling (doctor's probe
adds this folder to its path).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\S+ \S+ \[[EWIVF]:onnxruntime:[^\]]*\] ")
"""``2026-11-24 13:51:35.05 [W:onnxruntime:Default, x.cc:1066 Function] ``: says nothing of why."""


def clean(text: str) -> list[str]:
    """Log text as lines without colour codes, ONNX Runtime's prefix, or blank lines.

    A provider's own error line carries the C++ function before ``[ERROR]``; only the words after
    it are kept.
    """
    lines = []
    for line in _ANSI.sub("", text).splitlines():
        line = _PREFIX.sub("", line.strip())
        if "[ERROR]" in line:
            line = line.rsplit("[ERROR]", 1)[1]
        if line.strip():
            lines.append(" ".join(line.split()))
    return lines


def captured(action: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``action`` with file descriptor 2 sent to a file: its result and the cleaned lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            result = action()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
    return result, clean(text)
