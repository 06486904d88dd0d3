"""The off-path worker: bounded, never blocking the offerer, never raising, lower priority."""

from __future__ import annotations

import os
import threading

import pytest

from onnxgate.serve._offpath import Foreground, OffPath


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


def test_a_request_cancels_the_runs_that_yield_at_its_count_and_no_other() -> None:
    front = Foreground()
    cancelled: list[str] = []
    with (
        front.yielding(1, lambda: cancelled.append("at 1")) as first,
        front.yielding(2, lambda: cancelled.append("at 2")) as second,
    ):
        assert first and second  # nothing in flight: both may start
        front.enter()
        assert cancelled == ["at 1"]
        front.enter()
        front.enter()  # the third request cancels nothing more: each run is cancelled once
        assert cancelled == ["at 1", "at 2"]
    assert front.cancelled == 2
    for _ in range(3):
        front.leave()
    assert front.busy == 0


def test_a_run_waits_while_requests_are_in_flight_and_starts_when_they_are_answered() -> None:
    front = Foreground()
    front.enter()
    with front.yielding(1, lambda: None, timeout=0.01) as quiet:
        assert not quiet  # busy until the timeout: the caller waits again
    started = threading.Event()

    def background() -> None:
        with front.yielding(1, lambda: None, timeout=60) as quiet:
            if quiet:
                started.set()

    worker = threading.Thread(target=background)
    worker.start()
    assert not started.wait(0.05)  # a bound on a wrong answer, not a timing assertion
    front.leave()
    assert started.wait(60)
    worker.join(60)


def test_closing_ends_every_wait_and_no_run_starts_after() -> None:
    front = Foreground()
    front.enter()
    answers: list[bool] = []

    def background() -> None:
        with front.yielding(1, lambda: None, timeout=60) as quiet:
            answers.append(quiet)

    worker = threading.Thread(target=background)
    worker.start()
    front.close()
    worker.join(60)
    front.leave()
    with front.yielding(1, lambda: None, timeout=0) as quiet:
        answers.append(quiet)
    assert answers == [False, False] and front.closed


def test_closing_cancels_the_runs_under_way() -> None:
    front = Foreground()
    cancelled: list[str] = []
    with front.yielding(1, lambda: cancelled.append("run")) as quiet:
        assert quiet
        front.close()
        assert cancelled == ["run"]
    assert not front.wait_quiet(1, timeout=0)


def test_a_failing_cancel_neither_fails_the_request_nor_leaks_its_count() -> None:
    front = Foreground()

    def breaks() -> None:
        raise RuntimeError("planted")

    with front.yielding(1, breaks), front.yielding(1, lambda: None):
        with front.request():
            assert front.busy == 1 and front.cancelled == 2  # the second cancelled all the same
    assert front.busy == 0


def test_a_request_is_counted_once_however_deeply_nested_and_once_per_task() -> None:
    import asyncio

    front = Foreground()
    seen: list[int] = []

    async def one() -> None:
        with front.request():  # a front end
            with front.request():  # the hub, inside it
                seen.append(front.busy)
                await asyncio.sleep(0.01)

    async def both() -> None:
        await asyncio.gather(one(), one())

    asyncio.run(both())
    assert sorted(seen) == [1, 2] and front.busy == 0


def test_an_item_put_back_goes_behind_the_others_and_is_not_offered_again() -> None:
    gate = threading.Event()
    seen: list[str] = []

    def handle(item: str) -> None:
        gate.wait(10)
        seen.append(item)
        if seen.count(item) == 1 and item == "long":
            assert work.requeue(item)

    work: OffPath[str] = OffPath(handle, max_queue=4, label="t")
    for item in ("long", "short"):
        work.offer(item)
    gate.set()
    assert work.wait_idle(30)
    work.close()
    assert seen == ["long", "short", "long"] and work.offered == 2
