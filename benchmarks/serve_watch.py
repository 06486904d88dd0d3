"""What watching costs a request: ``Hub.infer`` with drift summaries on and off, and the hook.

``PYTHONPATH=src python benchmarks/serve_watch.py`` (about a minute) writes
``results/serve_watch.json`` and ``.md``. In one process, on the image-like classifier of
``tests/serve/_watch_helpers.py`` (x [8, 3, 8, 8] → probs [8, 4]) and the token model of
``tests/serve/_serve_helpers.py`` ([1, 16] ids and mask → [1, 4] logits):

- ``Watch.offer`` alone (the one line the request path runs): median and p99 ns per call, when
  queued and when shed (queue full);
- ``Hub.infer`` end to end, blocks of requests with watching on and off interleaved (the order
  flipping each round): median µs per request and the difference;
- the worker's time to summarise one request (off the request path, at nice 10).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from onnxgate.serve._hub import Hub  # noqa: E402
from onnxgate.serve._types import InferRequest, RequestTensor  # noqa: E402
from onnxgate.serve._watch import VersionWatch, Watch, WatchSettings  # noqa: E402
from serve._serve_helpers import make_token_contract  # noqa: E402
from serve._watch_helpers import config, images, make_image_contract  # noqa: E402

ROUNDS, BLOCK = 10, 200


def _isa() -> str:
    flags = set(re.findall(r"avx512\w*|avx2|amx\w*", Path("/proc/cpuinfo").read_text()))
    return " ".join(sorted(flags))


def _requests(name: str) -> list[InferRequest]:
    rng = np.random.default_rng(0)
    if name == "img":
        return [InferRequest("img", None, [RequestTensor("x", "FP32", images(rng, 8))])] * 4
    ids = rng.integers(0, 50, (1, 16)).astype(np.int64)
    mask = np.ones_like(ids)
    tensors = [RequestTensor("ids", "INT64", ids), RequestTensor("mask", "INT64", mask)]
    return [InferRequest("tok", None, tensors)] * 4


async def _infer_block(hub: Hub, requests: list[InferRequest]) -> list[float]:
    times = []
    for i in range(BLOCK):
        start = time.perf_counter_ns()
        await hub.infer(requests[i % len(requests)])
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


async def _end_to_end(model: Path, name: str) -> dict:
    hubs = {}
    for on in (True, False):
        hubs[on] = Hub(config(drift=on, placement_seconds=0))
        await hubs[on].load([str(model)])
    requests = _requests(name)
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(ROUNDS):
        for on in (True, False) if r % 2 else (False, True):
            times[on] += await _infer_block(hubs[on], requests)
            hubs[True].watch.wait_idle(30)  # the worker's backlog is not the next block's cost
    watched = hubs[True]
    observe = _observe_cost(watched, name, requests[0])
    for hub in hubs.values():
        await hub.stop()
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {
        "model": name,
        "requests_each": len(times[True]),
        "median_us_on": round(on, 1),
        "median_us_off": round(off, 1),
        "difference_us": round(on - off, 1),
        "p99_us_on": round(float(np.percentile(times[True], 99)), 1),
        "p99_us_off": round(float(np.percentile(times[False], 99)), 1),
        "worker_us_per_request": observe,
    }


def _observe_cost(hub: Hub, name: str, request: InferRequest) -> float:
    served = hub.served(name)
    watch = VersionWatch(served.predictor, hub.config.watch, hub.metrics.watch)
    feeds = {t.name: t.array for t in request.inputs}
    outputs = served.predictor.serve(feeds)
    runs = []
    for _ in range(500):
        start = time.perf_counter_ns()
        watch.observe(feeds, outputs)
        runs.append((time.perf_counter_ns() - start) / 1000)
    return round(statistics.median(runs), 1)


def _offer_cost() -> dict:
    from onnxgate.serve._metrics import Metrics

    class _P:
        name, version = "m", "1"

    feeds = {"x": np.zeros((8, 3, 8, 8), np.float32)}
    found = {}
    for label, queue in (("queued", 1 << 20), ("shed", 1)):
        watch = Watch(WatchSettings(max_queue=queue), Metrics().watch)
        watch._offpath._handle = lambda item: time.sleep(1)  # type: ignore[union-attr]
        calls = []
        for _ in range(20000):
            start = time.perf_counter_ns()
            watch.offer(_P, feeds, feeds)  # type: ignore[arg-type]
            calls.append(time.perf_counter_ns() - start)
        found[f"offer_ns_{label}_median"] = int(statistics.median(calls[100:]))
        found[f"offer_ns_{label}_p99"] = int(np.percentile(calls[100:], 99))
        watch._offpath._queue.queue.clear()  # type: ignore[union-attr]
    return found


def main() -> None:
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        img = make_image_contract(Path(folder) / "img" / "img.onnx")
        tok = make_token_contract(Path(folder) / "tok" / "tok.onnx")
        offer = _offer_cost()
        rows = [asyncio.run(_end_to_end(img, "img")), asyncio.run(_end_to_end(tok, "tok"))]
    result = {
        "cpu": platform.processor() or platform.machine(),
        "isa": _isa(),
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        **offer,
        "end_to_end": rows,
    }
    out = HERE / "results"
    (out / "serve_watch.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# What watching costs a request (`benchmarks/serve_watch.py`)",
        "",
        f"{result['cores']} cores ({result['isa']}), load average {result['load_before'][0]} "
        f"before and {result['load_after'][0]} after. `Watch.offer` (the request path's one "
        f"call): median {offer['offer_ns_queued_median']} ns queued "
        f"(p99 {offer['offer_ns_queued_p99']} ns), {offer['offer_ns_shed_median']} ns shed "
        f"(p99 {offer['offer_ns_shed_p99']} ns).",
        "",
        "| model | requests each | median on / off (µs) | difference | p99 on / off (µs) | "
        "worker per request (µs, off the path) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['requests_each']} | {r['median_us_on']} / {r['median_us_off']}"
            f" | {r['difference_us']} | {r['p99_us_on']} / {r['p99_us_off']} | "
            f"{r['worker_us_per_request']} |"
        )
    (out / "serve_watch.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
