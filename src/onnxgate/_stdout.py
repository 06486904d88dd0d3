"""Keeping stdout clean while foreign code runs.

``--format json`` promises one JSON document on stdout, and foreign code prints there: ONNX
Runtime's Python tools (the transformer optimizer, the quantiser) through ``print`` and their
loggers, the TorchScript exporter's C++ code by writing to file descriptor 1 directly.
Redirecting ``sys.stdout`` catches only the Python side; pointing descriptor 1 at stderr for the
duration catches both. Used by export, tune's graph rewrites and quantize; ``quiet_tools`` adds
the tools' loggers and warnings, for tune's two kinds of graph rewrite (ONNX Runtime's
transformer optimizer and onnxscript's fusions).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from collections.abc import Iterator

log = logging.getLogger(__name__)


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


@contextlib.contextmanager
def quiet_tools() -> Iterator[None]:
    """Keep foreign tools off stdout and the terminal (unless -vv): prints, loggers, warnings.

    The transformer optimizer prints through ``print``, its loggers and warnings; stdout must
    stay one JSON document under ``--format json``, so file descriptor 1 points at stderr too.
    """
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    # the optimizer's modules log under bare names (``fusion_skiplayernorm``), so no logger
    # prefix catches them: logging below ERROR is switched off while it runs
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with stdout_to_stderr(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                yield
    finally:
        logging.disable(disabled)
