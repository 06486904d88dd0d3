"""Steps that hand a model nobody vouched for to native code, named for a process that watches.

onnx's checker, shape inference and function builder, and ONNX Runtime's session creation are
C++. On some malformed models they do not raise: a failed assertion calls ``abort()``, a bad
read faults, and the process dies by a signal with no exception, no message and no exit code of
onnxgate's. Nothing inside the process can catch that, so the CLI runs each command in a child
process that its parent outlives (``onnxgate.cli._supervise``). To say *which* step the model
broke, each such call runs inside ``native_step(step, source)``, which writes the step and the
file to a page of memory shared with the parent before the call and takes it off after.

A shared page rather than a pipe: the parent reads it once, after the child died, so the child
never waits on a reader however many steps it runs. The page also holds the command's exit code
once the command has finished, so a crash while the interpreter shuts down (a library's
destructor) does not overturn a result already printed.

Outside the CLI (a program calling onnxgate's functions) no page is attached and ``native_step``
only runs its block: such a caller is as exposed as when it calls onnx or ONNX Runtime itself.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
import signal
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

SIZE = 16384
"""Bytes of the shared page: a length, then a JSON record."""

_HEADER = struct.Struct("<Q")
_LONGEST = 1000
"""Characters of a file name kept in the record; longer ones are cut at the start."""

TEST_CRASH = "ONNXGATE_TEST_CRASH_IN"
"""Test hook: ``STEP`` or ``STEP:SIGNAL`` (``onnx shape inference:SIGSEGV``) makes that step
kill its process with the signal (SIGABRT by default), as native code that aborts does. Read only
inside ``native_step``, so it cannot change anything else."""

_lock = threading.Lock()
_page: mmap.mmap | None = None
_writer: int | None = None
"""The process attached to the page: a process it forks (a worker) does not write to it."""
_active: list[tuple[int, str, str | None]] = []
_tokens = itertools.count()
_exit_code: int | None = None


@dataclass(frozen=True)
class Record:
    """What the page says after the process that wrote it died."""

    steps: tuple[tuple[str, str | None], ...] = ()
    """Native steps that were running, the most recent last, with the file each was reading."""
    exit_code: int | None = None
    """The command's exit code, if it had finished (the crash came while the process exited)."""


def open_page() -> mmap.mmap:
    """A page of memory that a forked child shares with its parent, for ``attach`` and ``read``."""
    page = mmap.mmap(-1, SIZE)  # anonymous and MAP_SHARED: a fork writes where its parent reads
    page[: _HEADER.size] = _HEADER.pack(0)
    return page


def attach(page: mmap.mmap) -> None:
    """Write this process's native steps and exit code to ``page`` from now on."""
    global _page, _writer
    with _lock:
        _page, _writer = page, os.getpid()
        _active.clear()
        _write()


def read(page: mmap.mmap) -> Record:
    """The record a process attached to ``page`` left in it (empty if it held none)."""
    (length,) = _HEADER.unpack(page[: _HEADER.size])
    if not 0 < length <= SIZE - _HEADER.size:
        return Record()
    try:
        data = json.loads(page[_HEADER.size : _HEADER.size + length].decode("utf-8"))
        steps = tuple(
            (str(step), None if file is None else str(file)) for step, file in data["steps"]
        )
        code = data["exit"]
        return Record(steps, None if code is None else int(code))
    except (ValueError, KeyError, TypeError):  # a write cut short by the crash itself
        return Record()


def finished(code: object) -> None:
    """Record that the command ended with ``code`` (a ``SystemExit`` code: None, int or text)."""
    global _exit_code
    with _lock:
        _exit_code = code if isinstance(code, int) else 0 if code is None else 1
        _write()


@contextlib.contextmanager
def native_step(step: str, source: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Run the block as ``step`` (``onnx shape inference``) on the model read from ``source``.

    If the native code inside aborts, the CLI's supervising process names this step and the file
    in its error. Steps may nest and run in several threads; the most recent one is named.
    """
    entry = (next(_tokens), step, None if source is None else os.fspath(source))
    with _lock:
        _active.append(entry)
        _write()
    try:
        _test_crash(step)
        yield
    finally:
        with _lock:
            _active.remove(entry)
            _write()


def _write() -> None:
    """Rewrite the record; the length goes last, so a write cut short reads as no record."""
    if _page is None or os.getpid() != _writer:
        return
    steps = [[step, _short(file)] for _, step, file in _active]
    while True:
        data = json.dumps({"steps": steps, "exit": _exit_code}).encode("utf-8")
        if len(data) <= SIZE - _HEADER.size or not steps:
            break
        steps = steps[1:]  # keep the most recent steps when a deep nesting overflows the page
    if len(data) > SIZE - _HEADER.size:
        return
    _page[: _HEADER.size] = _HEADER.pack(0)
    _page[_HEADER.size : _HEADER.size + len(data)] = data
    _page[: _HEADER.size] = _HEADER.pack(len(data))


def _short(file: str | None) -> str | None:
    if file is None or len(file) <= _LONGEST:
        return file
    return "…" + file[-(_LONGEST - 1) :]


def _test_crash(step: str) -> None:
    wanted = os.environ.get(TEST_CRASH)
    if not wanted:
        return
    name, _, signame = wanted.partition(":")
    if name != step:
        return
    number = signal.Signals[signame or "SIGABRT"]
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a test's deliberate crash leaves no core
    handler = signal.getsignal(number)
    if callable(handler) or handler == signal.SIG_IGN:  # Python's own (SIGINT's, say), not C's
        signal.signal(number, signal.SIG_DFL)
    signal.raise_signal(number)
