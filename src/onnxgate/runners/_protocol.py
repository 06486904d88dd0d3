"""The timing workers' protocol: one JSON request a line in, one JSON answer a line out.

Shared by onnxgate's own timing worker (``perf/_worker.py``) and the one that runs inside another
runtime's isolated environment (``_isolated_worker.py``), so it imports only the standard library:
the isolated worker imports it as a sibling module. The answers go to a private copy of file
descriptor 1; fd 1 itself is pointed at stderr, so nothing a library prints can break the protocol.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO


class UnknownRequest(Exception):
    """A request whose ``op`` no handler answers."""


def private_stdout() -> TextIO:
    """A private copy of stdout for answers; fd 1 (and ``sys.stdout``) then point at stderr."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def answer(channel: TextIO, document: Mapping[str, Any]) -> None:
    """Write one answer and flush it."""
    channel.write(json.dumps(document) + "\n")
    channel.flush()


def serve(
    requests: TextIO,
    answers: TextIO,
    handlers: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]],
    failure: Callable[[Exception, object], dict[str, Any]],
) -> None:
    """Answer requests until ``quit`` or the end of input.

    Args:
        requests: one JSON object a line, each with an ``op``.
        answers: where ``{"ok": ...}`` or the failure's answer goes.
        handlers: ``op`` -> the function answering it.
        failure: the answer for an exception raised while reading or answering a request (the
            ``op``, or None when the line was not a request); ``UnknownRequest`` for an unknown op.
    """
    for line in requests:
        if not line.strip():
            continue
        op: object = None
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "quit":
                break
            handler = handlers.get(op) if isinstance(op, str) else None
            if handler is None:
                raise UnknownRequest(f"unknown request {op!r}")
            answer(answers, {"ok": handler(request)})
        except Exception as error:  # every failure is an answer; the caller says of what kind
            answer(answers, failure(error, op))
