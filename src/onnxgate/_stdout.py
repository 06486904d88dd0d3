"""Keeping stdout clean while foreign code runs.

``--format json`` promises one JSON document on stdout, and foreign code prints there: ONNX
Runtime's Python tools (the transformer optimizer, the quantiser) through ``print`` and their
loggers, the TorchScript exporter's C++ code by writing to file descriptor 1 directly.
Redirecting ``sys.stdout`` catches only the Python side; pointing descriptor 1 at stderr for the
duration catches both. Used by export, tune's graph rewrites and quantize.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 points at stderr inside the block, and back afterwards."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
