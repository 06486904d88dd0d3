"""Dynamic batching along the batch axis the contract proves, with a bounded queue.

Requests wait in one queue per model version. A batch starts when an execution slot is free
(``instances`` run at once): it takes the oldest request, then every queued request whose inputs
agree with it on all but the batch axis, up to ``max_batch`` samples. It waits for more, at most
``max_delay`` after the oldest request arrived, only while someone may join: another execution is
running, or requests are arriving closer together than ``max_delay`` while others are still
pending. A lone request at low load starts at once, and so does every request of a client that
waits for each answer before it sends again (concurrency 1), however fast the model: Triton waits
out the delay regardless, which adds it to every request. The batch is concatenated, run once in
a worker thread (ONNX Runtime releases the GIL; with one instance, a model whose runs take less
than ``INLINE_BELOW`` runs on the event loop, which is cheaper than the trip to a thread and
back), and each request gets its own rows back. While
every slot is busy, requests pile up and the next batch forms at once from them: under load
batches grow, at low load a request does not wait.

A request beyond ``max_queue`` pending ones is refused at once (``Unavailable``), so overload
shows as fast 503s rather than as a queue that grows until memory runs out. A request whose
client gave up (a gRPC deadline, a closed connection) is skipped, not run. When a batch fails,
its requests run again one by one, so one bad input fails only its own request. Without a batch
axis, or with batching off, every request runs alone through the same queue and slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxgate.errors import Unavailable

log = logging.getLogger(__name__)

Run = Callable[[Mapping[str, np.ndarray], Sequence[str] | None], dict[str, np.ndarray]]

INLINE_BELOW = 0.0002
"""Runs shorter than this (seconds) run on the event loop: a thread hop costs about 0.05 ms."""


@dataclass
class _Job:
    feeds: Mapping[str, np.ndarray]
    rows: int
    key: tuple[Any, ...]
    outputs: tuple[str, ...] | None
    future: asyncio.Future[dict[str, np.ndarray]]
    enqueued: float = field(default_factory=time.perf_counter)


class Observer:
    """Receives what a batcher measured (the server's metrics); does nothing by default."""

    def queued(self, seconds: float) -> None:
        """A request waited ``seconds`` before its batch started."""

    def executed(self, seconds: float, rows: int, requests: int) -> None:
        """One batch of ``rows`` samples from ``requests`` requests ran in ``seconds``."""

    def pending(self, count: int) -> None:
        """Requests queued or running now."""


class Batcher:
    """One model version's queue, batch former and execution slots.

    Args:
        run: runs feeds once (``Predictor.run``); called in ``executor``'s threads.
        batched: whether requests may be stacked along axis 0 (the model has a batch axis
            and batching is on).
        max_batch: samples per execution at most (a larger single request runs alone).
        max_delay: seconds the oldest request may wait for others to join its batch.
        max_queue: requests pending (queued or running) at most; beyond, ``Unavailable``.
        instances: executions at once.
        executor: the thread pool executions run in.
        observer: told of queue times, executions and pending counts.
        inline_below: seconds: with one instance, once runs take less than this, they run on
            the event loop itself: handing such a run to a thread and back costs more than the
            run (0: always in ``executor``).
    """

    def __init__(
        self,
        run: Run,
        *,
        batched: bool,
        max_batch: int,
        max_delay: float,
        max_queue: int,
        instances: int,
        executor: Executor,
        observer: Observer | None = None,
        label: str = "",
        inline_below: float = INLINE_BELOW,
    ) -> None:
        self._run = run
        self.batched = batched
        self.max_batch = max_batch if batched else 1
        self.max_delay = max_delay
        self.max_queue = max_queue
        self.instances = instances
        self.inline_below = inline_below if instances == 1 else 0.0
        self._run_seconds: float | None = None
        """How long runs take (a moving average, measured around ``run``), once known."""
        self._executor = executor
        self._observer = observer or Observer()
        self._label = label
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._held: deque[_Job] = deque()
        self._slots = asyncio.Semaphore(instances)
        self._busy = 0
        """Executions running now."""
        self._last_arrival = float("-inf")
        self._flowing = False
        """The latest request came within ``max_delay`` of the one before, which was still
        pending: several clients are sending, more may follow. A client that sends its next
        request once the last one is answered (concurrency 1) is never flowing: nobody could
        join its request, and waiting would add ``max_delay`` to every other one."""
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._running: set[asyncio.Task[None]] = set()
        self._former: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Requests queued or running."""
        return self._pending

    def start(self) -> None:
        """Start forming batches (inside the running event loop)."""
        if self._former is None:
            self._former = asyncio.get_running_loop().create_task(
                self._form(), name=f"batcher {self._label}"
            )

    async def submit(
        self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Queue validated feeds; their outputs once their batch ran.

        Raises:
            Unavailable: the queue is full, or the batcher is closed.
            RunFailed: ONNX Runtime failed on the batch.
        """
        if self._closed:
            raise Unavailable(f"{self._label} is shutting down; retry on another replica.")
        if self._pending >= self.max_queue:
            raise Unavailable(
                f"{self._label}: {self._pending} requests are pending, the queue holds "
                f"{self.max_queue}; retry later."
            )
        first = next(iter(feeds.values()), None)
        rows = int(first.shape[0]) if self.batched and first is not None and first.ndim else 1
        key = tuple((n, a.shape[1:], a.dtype.str) for n, a in sorted(feeds.items()))
        future: asyncio.Future[dict[str, np.ndarray]] = asyncio.get_running_loop().create_future()
        job = _Job(feeds, rows, key, tuple(outputs) if outputs else None, future)
        self._flowing = self._pending > 0 and job.enqueued - self._last_arrival < self.max_delay
        self._last_arrival = job.enqueued
        self._pending += 1
        self._idle.clear()
        self._observer.pending(self._pending)
        self._queue.put_nowait(job)
        try:
            return await future
        finally:
            self._pending -= 1
            self._observer.pending(self._pending)
            if self._pending == 0:
                self._idle.set()

    async def _next(self, timeout: float | None) -> _Job | None:
        if timeout is None:
            return await self._queue.get()
        if timeout <= 0:
            try:
                return self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return None
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None

    async def _take(self, timeout: float | None) -> _Job | None:
        """The next request still waited for (a client that gave up is skipped)."""
        while True:
            job = await self._next(timeout)
            if job is None or not job.future.done():
                return job

    async def _form(self) -> None:
        batch: list[_Job] = []
        try:
            while True:
                batch = []
                while self._held and self._held[0].future.done():
                    self._held.popleft()
                first = self._held.popleft() if self._held else await self._take(None)
                assert first is not None
                batch = [first]
                await self._slots.acquire()
                if first.future.done():  # its client gave up while it waited for the slot
                    self._slots.release()
                    continue
                rows = first.rows
                if self.batched and rows < self.max_batch:
                    rows = self._gather(batch, rows)
                    deadline = first.enqueued + self.max_delay
                    # wait for more only while someone may join: another execution is running
                    # or requests are arriving closer together than max_delay; a lone request
                    # at low load does not wait
                    while rows < self.max_batch and (
                        self._busy or self._flowing or not self._queue.empty()
                    ):
                        job = await self._take(deadline - time.perf_counter())
                        if job is None:
                            break
                        if job.key == first.key and rows + job.rows <= self.max_batch:
                            batch.append(job)
                            rows += job.rows
                        else:
                            self._held.append(job)
                self._busy += 1
                task = asyncio.get_running_loop().create_task(self._execute(batch, rows))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
                batch = []
        except asyncio.CancelledError:
            for job in batch:  # taken from the queue but not started: they must not hang
                if not job.future.done():
                    job.future.set_exception(Unavailable(f"{self._label} was unloaded."))
            raise

    def _gather(self, batch: list[_Job], rows: int) -> int:
        """Compatible requests held back earlier join first, in arrival order."""
        first = batch[0]
        for job in list(self._held):
            if job.future.done():
                self._held.remove(job)
            elif job.key == first.key and rows + job.rows <= self.max_batch:
                self._held.remove(job)
                batch.append(job)
                rows += job.rows
        return rows

    async def _execute(self, batch: list[_Job], rows: int) -> None:
        try:
            start = time.perf_counter()
            for job in batch:
                self._observer.queued(start - job.enqueued)
            if len(batch) == 1:
                feeds, outputs = batch[0].feeds, batch[0].outputs
            else:
                names = batch[0].feeds.keys()
                feeds = {n: np.concatenate([j.feeds[n] for j in batch], axis=0) for n in names}
                outputs = None
            loop = asyncio.get_running_loop()
            try:
                if self._run_seconds is not None and self._run_seconds < self.inline_below:
                    result = self._timed(feeds, outputs)  # on the loop: cheaper than a thread
                else:
                    result = await loop.run_in_executor(self._executor, self._timed, feeds, outputs)
            except Exception as err:  # RunFailed, or a bug
                if len(batch) == 1:
                    if not batch[0].future.done():
                        batch[0].future.set_exception(err)
                    return
                # one request's input may be what failed: each runs alone, so only it fails
                log.warning("%s: a batch of %d failed (%s); running its requests one by one",
                            self._label, len(batch), err)  # fmt: skip
                for job in batch:
                    await self._alone(job)
                return
            self._observer.executed(time.perf_counter() - start, rows, len(batch))
            offset = 0
            for job in batch:
                names = job.outputs or tuple(result)
                part = (
                    {n: result[n] for n in names}
                    if len(batch) == 1
                    else {n: result[n][offset : offset + job.rows] for n in names}
                )
                offset += job.rows
                if not job.future.done():
                    job.future.set_result(part)
        finally:
            self._busy -= 1
            self._slots.release()

    def _timed(
        self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None
    ) -> dict[str, np.ndarray]:
        start = time.perf_counter()
        result = self._run(feeds, outputs)
        took = time.perf_counter() - start
        last = self._run_seconds
        self._run_seconds = took if last is None else 0.8 * last + 0.2 * took
        return result

    async def _alone(self, job: _Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, self._run, job.feeds, job.outputs)
        except Exception as err:
            if not job.future.done():
                job.future.set_exception(err)
        else:
            self._observer.executed(0.0, job.rows, 1)
            if not job.future.done():
                job.future.set_result(result)

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is pending (at most ``timeout`` seconds); True when drained."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Refuse new requests, fail the queued ones, stop forming batches."""
        self._closed = True
        if self._former is not None:
            self._former.cancel()
            await asyncio.gather(self._former, return_exceptions=True)
        stranded = list(self._held)
        while not self._queue.empty():
            stranded.append(self._queue.get_nowait())
        for job in stranded:
            if not job.future.done():
                job.future.set_exception(Unavailable(f"{self._label} was unloaded."))
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
