"""Work done beside serving, never in its way: a bounded queue drained by low-priority threads.

Shadow runs and traffic summaries must not add latency to the answer a client waits for, must not
fail it, and must not grow without bound. ``OffPath.offer`` is what the request path calls: it
never blocks and never raises; when the queue is full the item is dropped (counted as shed) and
the request goes on. The worker threads lower their own scheduling priority (``nice``; Linux
applies it per thread) so that under CPU contention the threads answering requests run first, and
the queue fills and sheds instead of slowing them.

Priority alone does not keep background work out of the way on a small machine: a worker at
``nice`` 10 still holds a core for its scheduling slice, and an ONNX Runtime run whose operators
are split over every core waits for its slowest part. ``Foreground`` is the stronger rule: it
counts the requests the server is answering, background work waits until fewer than its
threshold are in flight before it starts, and a run under way is cancelled (``cancel``, e.g.
setting ONNX Runtime's ``RunOptions.terminate``) the moment that many arrive, to be retried later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

NICENESS = 10
"""How much lower than the serving threads the workers run (``nice`` steps, 0 to 19)."""


_COUNTED: ContextVar[bool] = ContextVar("onnxgate_foreground_counted", default=False)
"""Whether the current request (its task) is counted in flight already."""


class Foreground:
    """The requests a server is answering now, and the background work that yields to them.

    ``request()`` brackets a request from its first byte to its last (the front ends hold it
    around reading, decoding, running and encoding; ``Hub.infer`` holds it too, for callers
    without a front end, and a request already counted is not counted twice). Background work
    either waits for a quiet moment (``wait_quiet``: fewer than ``below`` requests in flight) or
    runs ``yielding(below, cancel)``: it starts only in such a moment, and ``cancel`` is called
    the instant a request brings the count to ``below`` again; the work learns it was cancelled
    from what it ran (for ONNX Runtime, the run fails with its ``terminate`` flag set).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.busy = 0
        """Requests in flight."""
        self._runs: dict[int, tuple[int, Callable[[], None]]] = {}
        self._closed = False
        self.cancelled = 0
        """Background runs cancelled so far."""

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Count one request in flight while the block runs (once, however deeply nested)."""
        if _COUNTED.get():
            yield
            return
        token = _COUNTED.set(True)
        self.enter()
        try:
            yield
        finally:
            self.leave()
            _COUNTED.reset(token)

    def enter(self) -> None:
        """A request arrived: cancel the background runs that yield at this many."""
        with self._changed:
            self.busy += 1
            due = [key for key, (below, _) in self._runs.items() if self.busy >= below]
            self._cancel(due)

    def leave(self) -> None:
        """A request was answered (or refused)."""
        with self._changed:
            self.busy -= 1
            self._changed.notify_all()

    def _cancel(self, keys: list[int]) -> None:
        for key in keys:
            _, cancel = self._runs.pop(key)
            self.cancelled += 1
            try:
                cancel()
            except Exception:  # a request must not fail, nor its count leak, for background work
                log.exception("cancelling background work failed")

    def wait_quiet(self, below: int, timeout: float = 1.0) -> bool:
        """Wait (up to ``timeout`` s) for fewer than ``below`` requests in flight: whether so.

        False once closed.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self.busy < below, timeout)
            return self.busy < below and not self._closed

    @contextlib.contextmanager
    def yielding(
        self, below: int, cancel: Callable[[], None], timeout: float = 1.0
    ) -> Iterator[bool]:
        """Wait (up to ``timeout`` s) for fewer than ``below`` requests in flight, then hold.

        Yields whether the work may start now; while it holds, a request that brings the count to
        ``below`` calls ``cancel`` (once), and so does ``close``. Without permission to start,
        the caller waits again or gives up.
        """
        key = id(cancel)  # unique while registered: the entry keeps ``cancel`` alive
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self.busy < below, timeout)
            quiet = self.busy < below and not self._closed
            if quiet:
                self._runs[key] = (below, cancel)
        try:
            yield quiet
        finally:
            with self._changed:
                self._runs.pop(key, None)

    @property
    def closed(self) -> bool:
        """The server is stopping: no background run starts any more."""
        return self._closed

    def close(self) -> None:
        """End every wait and cancel every run under way (the server is stopping)."""
        with self._changed:
            self._closed = True
            self._cancel(list(self._runs))
            self._changed.notify_all()


class OffPath(Generic[T]):
    """A bounded queue of items handled by ``workers`` background threads.

    Args:
        handle: called with each item in a worker thread; an exception it raises is logged once
            per kind and counted in ``failed``, never passed on.
        max_queue: items waiting at most; an item offered beyond it is shed.
        workers: threads handling items.
        label: names the threads and the log lines.
        niceness: how far the workers lower their priority (0 keeps the process's).
    """

    def __init__(
        self,
        handle: Callable[[T], None],
        *,
        max_queue: int,
        workers: int = 1,
        label: str = "offpath",
        niceness: int = NICENESS,
    ) -> None:
        self._handle = handle
        self._queue: queue.Queue[T | None] = queue.Queue(maxsize=max_queue)
        self._label = label
        self._niceness = niceness
        self._lock = threading.Lock()
        self._logged: set[type[BaseException]] = set()
        self.offered = self.shed = self.done = self.failed = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"{label}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pending(self) -> int:
        """Items queued or being handled now."""
        return self._queue.unfinished_tasks  # put and not yet done: queued or in hand

    def offer(self, item: T) -> bool:
        """Queue ``item`` unless the queue is full; never blocks, never raises.

        Returns:
            Whether the item was queued (False: shed).
        """
        with self._lock:
            self.offered += 1
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self.shed += 1
            return False
        return True

    def requeue(self, item: T) -> bool:
        """Put an item a worker took back at the end of the queue (not counted as offered).

        Returns:
            Whether it was queued (False: the queue is full; the caller sheds it).
        """
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def _work(self) -> None:
        if self._niceness:
            with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed
                me = threading.get_native_id()
                # relative to the server's own: `nice -n 5 onnxgate serve` gives workers 15, not 10
                lower = min(os.getpriority(os.PRIO_PROCESS, me) + self._niceness, 19)
                os.setpriority(os.PRIO_PROCESS, me, lower)
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            try:
                self._handle(item)
            except Exception as err:  # background work must never stop, nor reach a client
                with self._lock:
                    self.failed += 1
                    first = type(err) not in self._logged
                    self._logged.add(type(err))
                if first:
                    log.exception("%s: an item failed (further failures of this kind are "
                                  "counted, not logged)", self._label)  # fmt: skip
            else:
                with self._lock:
                    self.done += 1
            finally:
                self._queue.task_done()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or being handled (up to ``timeout`` s); whether it is."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self.pending

    def close(self, timeout: float = 5.0) -> None:
        """Drop what is queued, let the items being handled finish (up to ``timeout``), stop."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
                self._queue.task_done()
        for _ in self._threads:
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=timeout)
        for thread in self._threads:
            thread.join(timeout)
