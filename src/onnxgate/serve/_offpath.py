"""Work done beside serving, never in its way: a bounded queue drained by low-priority threads.

Shadow runs and traffic summaries must not add latency to the answer a client waits for, must not
fail it, and must not grow without bound. ``OffPath.offer`` is what the request path calls: it
never blocks and never raises; when the queue is full the item is dropped (counted as shed) and
the request goes on. The worker threads lower their own scheduling priority (``nice``; Linux
applies it per thread) so that under CPU contention the threads answering requests run first, and
the queue fills and sheds instead of slowing them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

NICENESS = 10
"""How much lower than the serving threads the workers run (``nice`` steps, 0 to 19)."""


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

    def _work(self) -> None:
        if self._niceness:
            with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._niceness)
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
