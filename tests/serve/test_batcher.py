"""The batcher: stacks compatible requests, slices results back, bounds its queue."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from onnxgate.errors import RunFailed, Unavailable
from onnxgate.serve._batcher import Batcher


class Doubler:
    """``y = 2x``, recording every batch it ran; optionally slow, to let a queue build."""

    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[int] = []
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, feeds, outputs=None):
        self.gate.wait(10)
        if self.delay:
            threading.Event().wait(self.delay)
        x = feeds["x"]
        self.batches.append(x.shape[0])
        return {"y": x * 2, "z": x.sum(axis=tuple(range(1, x.ndim)))}


def _batcher(run, **settings) -> Batcher:
    values = {"batched": True, "max_batch": 8, "max_delay": 0.05, "max_queue": 64,
              "instances": 1, "executor": ThreadPoolExecutor(4)} | settings  # fmt: skip
    batcher = Batcher(run, **values)
    batcher.start()
    return batcher


def test_concurrent_requests_share_executions_and_get_their_own_rows() -> None:
    async def main() -> tuple[list, list[int]]:
        run = Doubler()
        batcher = _batcher(run)
        feeds = [{"x": np.full((1, 3), i, np.float32)} for i in range(16)]
        results = await asyncio.gather(*(batcher.submit(f) for f in feeds))
        await batcher.close()
        return results, run.batches

    results, batches = asyncio.run(main())
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["y"], np.full((1, 3), 2 * i, np.float32))
        assert result["z"].shape == (1,)
    assert sum(batches) == 16
    assert max(batches) <= 8
    assert len(batches) < 16


def test_a_client_that_waits_for_each_answer_never_waits_for_a_batch() -> None:
    """Concurrency 1: requests come fast, but each after the last was answered; nobody can join."""

    async def main() -> list[int]:
        run = Doubler()
        batcher = _batcher(run, max_delay=30.0)  # waiting for a batch would hit the timeout
        for i in range(5):
            result = await asyncio.wait_for(batcher.submit({"x": np.full((1, 2), i)}), 10)
            np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * i))
        await batcher.close()
        return run.batches

    assert asyncio.run(main()) == [1] * 5


class Where(Doubler):
    """A Doubler that records which thread ran each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def __call__(self, feeds, outputs=None):
        self.threads.append(threading.current_thread().name)
        return super().__call__(feeds, outputs)


@pytest.mark.parametrize(("inline_below", "instances", "on_loop"), [
    (60.0, 1, [False, True, True, True]),  # runs this short: the first measures, the rest inline
    (0.0, 1, [False] * 4),  # never inline
    (60.0, 2, [False] * 4),  # several instances run at once: only threads can do that
])  # fmt: skip
def test_short_runs_run_on_the_event_loop_once_measured(inline_below, instances, on_loop) -> None:
    async def main() -> list[bool]:
        run = Where()
        batcher = _batcher(run, inline_below=inline_below, instances=instances)
        for i in range(4):
            result = await batcher.submit({"x": np.full((1, 2), i)})
            np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * i))
        await batcher.close()
        loop_thread = threading.current_thread().name
        return [name == loop_thread for name in run.threads]

    assert asyncio.run(main()) == on_loop


def test_requests_of_other_shapes_are_not_stacked_together() -> None:
    async def main() -> list[int]:
        run = Doubler()
        batcher = _batcher(run)
        feeds = [{"x": np.zeros((1, 3 + i % 2), np.float32)} for i in range(8)]
        results = await asyncio.gather(*(batcher.submit(f) for f in feeds))
        for f, r in zip(feeds, results, strict=True):
            assert r["y"].shape == f["x"].shape
        await batcher.close()
        return run.batches

    batches = asyncio.run(main())
    assert sum(batches) == 8 and len(batches) >= 2


def test_a_request_larger_than_max_batch_runs_alone_and_requested_outputs_are_kept() -> None:
    async def main() -> dict:
        batcher = _batcher(Doubler(), max_batch=2)
        result = await batcher.submit({"x": np.ones((5, 2), np.float32)}, ["z"])
        await batcher.close()
        return result

    result = asyncio.run(main())
    assert list(result) == ["z"] and result["z"].shape == (5,)


def test_without_batching_every_request_runs_alone() -> None:
    async def main() -> list[int]:
        run = Doubler()
        batcher = _batcher(run, batched=False)
        await asyncio.gather(*(batcher.submit({"x": np.ones((2, 2))}) for _ in range(6)))
        await batcher.close()
        return run.batches

    assert asyncio.run(main()) == [2] * 6


def test_a_full_queue_refuses_at_once_instead_of_growing() -> None:
    async def main() -> tuple[int, int]:
        run = Doubler()
        run.gate.clear()  # the first batch blocks: everything else queues
        batcher = _batcher(run, max_queue=4, max_batch=1)
        tasks = [asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))})) for _ in range(10)]
        await asyncio.sleep(0.2)
        run.gate.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        await batcher.close()
        refused = sum(isinstance(d, Unavailable) for d in done)
        return refused, sum(isinstance(d, dict) for d in done)

    refused, answered = asyncio.run(main())
    assert refused == 6 and answered == 4


def test_a_failed_batch_runs_again_request_by_request_so_only_the_bad_one_fails() -> None:
    calls: list[int] = []

    def picky(feeds, outputs=None):
        calls.append(feeds["x"].shape[0])
        if (feeds["x"] < 0).any():
            raise RunFailed("a negative value")
        return {"y": feeds["x"]}

    async def main() -> list:
        run_gate = threading.Event()
        batcher = _batcher(lambda f, o=None: (run_gate.wait(5), picky(f, o))[1])
        # the first request runs alone while the next three queue and form one batch
        first = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))}))
        await asyncio.sleep(0.05)
        rest = [
            asyncio.ensure_future(batcher.submit({"x": np.full((1, 1), v)})) for v in (1, -1, 2)
        ]
        await asyncio.sleep(0.05)
        run_gate.set()
        done = await asyncio.gather(first, *rest, return_exceptions=True)
        await batcher.close()
        return done

    done = asyncio.run(main())
    assert isinstance(done[2], RunFailed)
    assert [d["y"].item() for d in (done[0], done[1], done[3])] == [1, 1, 2]
    assert calls == [1, 3, 1, 1, 1]  # alone, the batch of three, then each of them alone


def test_a_request_whose_client_gave_up_is_not_run() -> None:
    async def main() -> list[int]:
        run = Doubler()
        run.gate.clear()
        batcher = _batcher(run, max_batch=1)
        busy = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))}))
        await asyncio.sleep(0.05)
        abandoned = asyncio.ensure_future(batcher.submit({"x": np.full((1, 1), 7.0)}))
        await asyncio.sleep(0.05)
        abandoned.cancel()
        run.gate.set()
        await busy
        await asyncio.sleep(0.1)
        await batcher.close()
        return run.batches

    assert asyncio.run(main()) == [1]


def test_close_fails_requests_taken_but_not_started_instead_of_leaving_them_hanging() -> None:
    async def main() -> list:
        run = Doubler()
        run.gate.clear()
        batcher = _batcher(run, max_batch=4, max_delay=5.0)
        running = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))}))
        await asyncio.sleep(0.05)
        waiting = [asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))})) for _ in range(2)]
        await asyncio.sleep(0.05)  # the former holds them, waiting for the slot
        closing = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0.05)
        run.gate.set()
        await closing
        return await asyncio.wait_for(asyncio.gather(running, *waiting, return_exceptions=True), 5)

    done = asyncio.run(main())
    assert isinstance(done[0], dict)
    assert all(isinstance(d, Unavailable) for d in done[1:])


def test_drain_waits_for_pending_and_close_refuses_new_requests() -> None:
    async def main() -> None:
        batcher = _batcher(Doubler(delay=0.1))
        task = asyncio.ensure_future(batcher.submit({"x": np.ones((1, 1))}))
        await asyncio.sleep(0.01)
        assert batcher.pending == 1
        assert await batcher.drain(5)
        assert task.done() and batcher.pending == 0
        await batcher.close()
        with pytest.raises(Unavailable):
            await batcher.submit({"x": np.ones((1, 1))})

    asyncio.run(main())
