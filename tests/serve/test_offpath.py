"""The off-path worker: bounded, never blocking the offerer, never raising, lower priority."""

from __future__ import annotations

import os
import threading

import pytest

from onnxgate.serve._offpath import OffPath


def test_a_full_queue_sheds_instead_of_blocking() -> None:
    gate = threading.Event()
    seen: list[int] = []

    def handle(item: int) -> None:
        gate.wait(10)
        seen.append(item)

    work: OffPath[int] = OffPath(handle, max_queue=2, label="t")
    accepted = [work.offer(i) for i in range(10)]  # one taken by the worker, two queued
    assert accepted.count(True) in (2, 3)
    assert work.shed == 10 - accepted.count(True)
    gate.set()
    assert work.wait_idle(30)
    work.close()
    assert work.done == accepted.count(True)
    assert sorted(seen) == [i for i, ok in enumerate(accepted) if ok]


def test_a_failing_item_is_counted_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    done = threading.Event()

    def handle(item: int) -> None:
        if item < 3:
            raise ValueError("bad item")
        done.set()

    work: OffPath[int] = OffPath(handle, max_queue=8, label="t")
    for i in range(4):
        work.offer(i)
    assert done.wait(10)
    assert work.wait_idle(30)
    work.close()
    assert (work.failed, work.done) == (3, 1)
    assert sum("an item failed" in r.getMessage() for r in caplog.records) == 1  # once per kind


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="thread priorities are Linux's")
def test_workers_run_at_a_lower_priority() -> None:
    seen: list[int] = []

    def handle(item: int) -> None:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    work: OffPath[int] = OffPath(handle, max_queue=1, label="t", niceness=7)
    work.offer(1)
    assert work.wait_idle(30)
    work.close()
    assert seen == [os.getpriority(os.PRIO_PROCESS, 0) + 7] or seen == [19]
