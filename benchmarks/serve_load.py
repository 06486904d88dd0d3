"""Load generator for an Open Inference Protocol v2 server (Triton, KServe, ``onnxgate serve``).

Run it in a process of its own, beside the server under test::

    python benchmarks/serve_load.py --url 127.0.0.1:8000 --protocol http \\
        --model all-MiniLM-L6-v2 --concurrency 8 --duration 30 --warmup 5 \\
        --batch 1 --seq 128 --rss-pid "$SERVER_PID" --out /tmp/load.json

It talks to the server with ``tritonclient``'s asyncio clients (``tritonclient.http.aio`` or
``tritonclient.grpc.aio``) and binary tensors, the way a Triton user would, so it measures the
protocol as clients really speak it.

Two ways to load the server:

- **closed loop** (default): ``--concurrency N`` workers, each sending its next request as soon
  as the previous one answered. Throughput is what the server gives at that concurrency.
- **open loop** (``--rate R``): requests start at fixed intervals of 1/R s whether or not earlier
  ones answered (a soak at, say, 80% of the closed-loop capacity). At most ``--max-inflight``
  are outstanding; a request that would exceed it is not sent and is counted as ``skipped``.
  Besides the latency from send to answer, the open loop reports the latency from the request's
  *scheduled* start, which includes any delay in sending it (no coordinated omission).

Requests whose answer arrives inside the measurement window (after ``--warmup`` s, for
``--duration`` s) are counted; after the window no new request starts and the ones in flight are
awaited (up to ``--timeout``) but not counted. An answer is an error if the client raises, or if
an output the model's metadata lists is missing or does not have the batch as its first axis. A
closed-loop worker pauses ``--error-pause`` s after an error, so a dead server is not spun on.

Inputs: ``--pool`` distinct feeds of random token ids in [0, ``--vocab``) with attention mask ones
and token type ids zeros (seeded), sent in turn; or, with ``--input NAME:DATATYPE:SHAPE``
(repeatable), random tensors of those shapes (``--input Input3:FP32:1,1,28,28`` for mnist). Their tensors are built once, before the clock
starts, so the client's per-request work is what tritonclient does to send and read a request.

With ``--rss-pid`` the server's resident memory (``VmRSS`` of the process and, summed, of its
descendants) and CPU time are sampled every ``--sample-every`` s for the whole run, warm-up
included. The client's own CPU time is reported too: on a 2-core machine the client competes with
the server for the cores, and a client near one full core is a bottleneck of its own.

Output: one JSON document (stdout, and ``--out``) with throughput (requests/s and samples/s),
latency p50/p90/p99/max in ms, errors with the first distinct messages, a per-second timeline, the
RSS series, client and server CPU time, versions, and the machine (CPU model, ISA flags, usable
cores). A one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

VOCAB_SIZE = 30522  # all-MiniLM-L6-v2's vocabulary (bert-base-uncased)
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


# --- the machine and other processes --------------------------------------------------------


def machine() -> dict:
    """The CPU model, its ISA flags that matter to ONNX Runtime's kernels, and the usable cores."""
    cpu, flags = platform.processor() or platform.machine(), set()
    ids: dict[str, str] = {}  # "AMD EPYC" alone does not say which generation: keep family/model
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and cpu in ("", platform.machine()):
                cpu = " ".join(value.split())
            elif key in ("cpu family", "model", "stepping", "microcode") and key not in ids:
                ids[key] = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0))
    quota = None
    with contextlib.suppress(ImportError):
        from onnxgate._cgroup import cgroup_quota

        quota = cgroup_quota()[0]
    return {
        "cpu": cpu,
        "cpu_id": ids,
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        "isa_absent": [flag for flag in ISA_FLAGS if flag not in flags],
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": usable,
        "cgroup_cpu_quota": quota,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def versions(*names: str) -> dict:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_sample(pid: int) -> dict | None:
    """VmRSS, VmHWM (MB), threads and CPU seconds (user + system) of one process, or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:  # a zombie: the process has exited and not been reaped
        return None

    def kb(key: str) -> float | None:
        value = fields.get(key)
        return round(int(value.split()[0]) / 1024, 2) if value else None

    # /proc/PID/stat: the command may hold spaces, so split after its closing parenthesis.
    after = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(after[11]), int(after[12])
    return {
        "rss_mb": kb("VmRSS"),
        "hwm_mb": kb("VmHWM"),
        "threads": int(fields["Threads"]) if "Threads" in fields else None,
        "cpu_s": (utime + stime) / CLOCK_TICKS,
    }


def machine_cpu() -> dict:
    """Seconds the whole machine spent busy (user, nice, system, irq, softirq) and stolen.

    Busy time minus this process's and the server's is what *other* processes used during a
    run: the figure that says whether a run was disturbed.
    """
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return {"busy_s": 0.0, "steal_s": 0.0}
    ticks = [int(x) for x in fields]
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    steal = ticks[7] if len(ticks) > 7 else 0
    return {
        "busy_s": (user + nice + system + irq + softirq) / CLOCK_TICKS,
        "steal_s": steal / CLOCK_TICKS,
    }


def descendants(pid: int) -> list[int]:
    """Every process whose chain of parents leads to ``pid`` (uvicorn workers, helpers)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children[parent].append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_sample(pid: int, t: float) -> dict | None:
    main = proc_sample(pid)
    if main is None:
        return None
    tree = [s for s in map(proc_sample, descendants(pid)) if s is not None]
    return {
        "t_s": round(t, 3),
        **main,
        "children": len(tree),
        "tree_rss_mb": round(main["rss_mb"] + sum(s["rss_mb"] or 0 for s in tree), 2),
        "tree_cpu_s": main["cpu_s"] + sum(s["cpu_s"] for s in tree),
    }


# --- the client -----------------------------------------------------------------------------


def feeds_pool(batch: int, seq: int, *, size: int, seed: int, vocab: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64),
            "attention_mask": np.ones((batch, seq), np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64),
        }
        for _ in range(size)
    ]


DATATYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32}


def parse_input(text: str) -> tuple[str, str, tuple[int, ...]]:
    """``NAME:DATATYPE:D0,D1,...`` (``Input3:FP32:1,1,28,28``) as (name, datatype, shape)."""
    name, datatype, dims = text.rsplit(":", 2)
    if datatype not in DATATYPES:
        raise ValueError(f"--input {text!r}: datatype must be one of {', '.join(DATATYPES)}")
    return name, datatype, tuple(int(d) for d in dims.split(","))


def spec_pool(specs: list[str], *, size: int, seed: int, batch: int | None = None) -> list[dict]:
    """Random feeds for ``--input`` specs (``batch`` replaces the first dim): floats in [0, 1),
    integers 0 or 1 (valid as ids, masks and indices alike)."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(size):
        feeds = {}
        for name, datatype, shape in map(parse_input, specs):
            shape = shape if batch is None else (batch, *shape[1:])
            dtype = np.dtype(DATATYPES[datatype])
            feeds[name] = (
                rng.random(shape).astype(dtype)
                if dtype.kind == "f"
                else rng.integers(0, 2, shape).astype(dtype)
            )
        pool.append(feeds)
    return pool


def datatype_of(array: np.ndarray) -> str:
    return {np.dtype(v): k for k, v in DATATYPES.items()}[array.dtype]


class Client:
    """tritonclient's asyncio client for one protocol, with inputs built ahead of time."""

    def __init__(self, protocol: str, url: str, *, connections: int, timeout: float) -> None:
        self.protocol = protocol
        self.timeout = timeout
        if protocol == "http":
            import tritonclient.http.aio as module

            self.client = module.InferenceServerClient(
                url, conn_limit=connections, conn_timeout=timeout
            )
        else:
            import tritonclient.grpc.aio as module

            self.client = module.InferenceServerClient(url)
        self.module = module

    def inputs(self, feeds: dict[str, np.ndarray]) -> list:
        built = []
        for name, array in feeds.items():
            tensor = self.module.InferInput(name, list(array.shape), datatype_of(array))
            if self.protocol == "http":
                tensor.set_data_from_numpy(array, binary_data=True)
            else:
                tensor.set_data_from_numpy(array)  # gRPC: raw_input_contents
            built.append(tensor)
        return built

    def outputs(self, names: list[str] | None) -> list | None:
        if not names:
            return None  # every output, binary (binary_data_output on REST, raw contents on gRPC)
        if self.protocol == "http":
            return [self.module.InferRequestedOutput(n, binary_data=True) for n in names]
        return [self.module.InferRequestedOutput(n) for n in names]

    async def wait_ready(self, model: str, limit: float) -> None:
        deadline = time.monotonic() + limit
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if await self.client.is_model_ready(model):
                    return
            except Exception as err:  # connection refused while the server starts
                last = err
            await asyncio.sleep(0.25)
        raise SystemExit(f"model {model!r} not ready after {limit:.0f} s (last error: {last})")

    async def output_names(self, model: str) -> tuple[list[str], str | None]:
        try:
            if self.protocol == "http":
                meta = await self.client.get_model_metadata(model)
                return [o["name"] for o in meta.get("outputs", [])], None
            meta = await self.client.get_model_metadata(model)
            return [o.name for o in meta.outputs], None
        except Exception as err:
            return [], f"{type(err).__name__}: {err}"

    async def infer(self, model: str, inputs: list, outputs: list | None):
        return await asyncio.wait_for(
            self.client.infer(model, inputs, outputs=outputs), timeout=self.timeout
        )

    async def close(self) -> None:
        await self.client.close()


def check(result, names: list[str], batch: int) -> str | None:
    """Why a response is wrong, or None: every listed output present, batch-first."""
    for name in names:
        array = result.as_numpy(name)
        if array is None:
            return f"output {name!r} missing from the response"
        if array.ndim == 0 or array.shape[0] != batch:
            return f"output {name!r} has shape {list(array.shape)}, expected batch {batch} first"
    return None


# --- the run --------------------------------------------------------------------------------


class Recorder:
    """Each request's scheduled start, send, end and error, on one perf_counter clock."""

    def __init__(self) -> None:
        self.scheduled: list[float] = []
        self.sent: list[float] = []
        self.ended: list[float] = []
        self.errors: list[str | None] = []

    def add(self, scheduled: float, sent: float, ended: float, error: str | None) -> None:
        self.scheduled.append(scheduled)
        self.sent.append(sent)
        self.ended.append(ended)
        self.errors.append(error)


async def one_request(client, args, inputs, outputs, names, recorder, scheduled) -> str | None:
    sent = time.perf_counter()
    error = None
    try:
        result = await client.infer(args.model, inputs, outputs)
        if args.check:
            error = check(result, names, args.batch)
    except TimeoutError:
        error = f"timeout after {args.timeout} s"
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    recorder.add(scheduled, sent, time.perf_counter(), error)
    return error


async def closed_loop(client, args, prepared, outputs, names, recorder, stop_at) -> None:
    counter = itertools.count()

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            inputs = prepared[next(counter) % len(prepared)]
            now = time.perf_counter()
            error = await one_request(client, args, inputs, outputs, names, recorder, now)
            if error is not None and args.error_pause:
                # A dead server refuses at once: do not spin on it (nor count 10^4 errors a second).
                await asyncio.sleep(args.error_pause)

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))


async def open_loop(client, args, prepared, outputs, names, recorder, t0, stop_at) -> int:
    """Start a request every 1/rate s; returns how many were skipped at --max-inflight."""
    inflight: set[asyncio.Task] = set()
    skipped, k = 0, 0
    while True:
        scheduled = t0 + k / args.rate
        if scheduled >= stop_at:
            break
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(inflight) >= args.max_inflight:
            skipped += scheduled >= t0 + args.warmup  # only skips inside the window count
        else:
            inputs = prepared[k % len(prepared)]
            task = asyncio.create_task(
                one_request(client, args, inputs, outputs, names, recorder, scheduled)
            )
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        k += 1
    if inflight:
        await asyncio.wait(inflight, timeout=args.timeout)
    return skipped


async def sampler(pid: int, t0: float, every: float, samples: list, done: asyncio.Event) -> None:
    while True:
        sample = rss_sample(pid, time.perf_counter() - t0)
        if sample is not None:
            samples.append(sample)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=every)
        if done.is_set():
            return


def percentiles(values_s: np.ndarray) -> dict:
    if values_s.size == 0:
        return {"p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    ms = values_s * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "p50_ms": round(float(p50), 3),
        "p90_ms": round(float(p90), 3),
        "p99_ms": round(float(p99), 3),
        "max_ms": round(float(ms.max()), 3),
        "mean_ms": round(float(ms.mean()), 3),
    }


def summarise(args, recorder: Recorder, window: tuple[float, float], t0: float) -> dict:
    start, end = window
    ended = np.asarray(recorder.ended)
    sent = np.asarray(recorder.sent)
    scheduled = np.asarray(recorder.scheduled)
    failed = np.asarray([e is not None for e in recorder.errors], dtype=bool)
    inside = (ended >= start) & (ended < end)
    ok = inside & ~failed
    duration = end - start
    messages = collections.Counter(
        e for e, i in zip(recorder.errors, inside, strict=True) if e and i
    )
    latency = percentiles(ended[ok] - sent[ok])
    summary = {
        "window_s": round(duration, 3),
        "completed": int(ok.sum()),
        "errors": int((inside & failed).sum()),
        "error_messages": [
            {"count": n, "message": m[:300]} for m, n in messages.most_common(args.keep_errors)
        ],
        "requests_per_s": round(float(ok.sum()) / duration, 3),
        "samples_per_s": round(float(ok.sum()) * args.batch / duration, 3),
        "latency": latency,
        "not_counted": {
            "warmup": int((ended < start).sum()),
            "after_window": int((ended >= end).sum()),
        },
    }
    if args.rate:
        summary["latency_from_schedule"] = percentiles(ended[ok] - scheduled[ok])
        summary["offered_per_s"] = args.rate
    # Per-second buckets over the window: completions, errors, p50 and p99.
    timeline = []
    edges = np.arange(start, end + 1e-9, 1.0)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        bucket = (ended >= lo) & (ended < hi)
        good = bucket & ~failed
        lat = (ended[good] - sent[good]) * 1e3
        timeline.append(
            {
                "t_s": round(lo - t0, 1),
                "completed": int(good.sum()),
                "errors": int((bucket & failed).sum()),
                "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat.size else None,
                "p99_ms": round(float(np.percentile(lat, 99)), 2) if lat.size else None,
            }
        )
    summary["timeline"] = timeline
    return summary


async def run(args: argparse.Namespace) -> dict:
    connections = max(args.concurrency, args.max_inflight if args.rate else 0) + 4
    client = Client(args.protocol, args.url, connections=connections, timeout=args.timeout)
    try:
        await client.wait_ready(args.model, args.ready_timeout)
        names, meta_error = await client.output_names(args.model)
        pool = (
            spec_pool(args.input, size=args.pool, seed=args.seed)
            if args.input
            else feeds_pool(args.batch, args.seq, size=args.pool, seed=args.seed, vocab=args.vocab)
        )
        prepared = [client.inputs(feeds) for feeds in pool]
        outputs = client.outputs(args.outputs)
        checked = args.outputs or names
        recorder = Recorder()
        samples: list[dict] = []
        done = asyncio.Event()

        t0 = time.perf_counter()
        window = (t0 + args.warmup, t0 + args.warmup + args.duration)
        sampling = (
            asyncio.create_task(sampler(args.rss_pid, t0, args.sample_every, samples, done))
            if args.rss_pid
            else None
        )
        cpu_marks: dict[str, tuple[float, dict | None, dict]] = {}

        async def mark(name: str, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            server = rss_sample(args.rss_pid, 0.0) if args.rss_pid else None
            cpu_marks[name] = (time.process_time(), server, machine_cpu())

        marks = [
            asyncio.create_task(mark("start", window[0])),
            asyncio.create_task(mark("end", window[1])),
        ]
        skipped = 0
        if args.rate:
            skipped = await open_loop(
                client, args, prepared, outputs, checked, recorder, t0, window[1]
            )
        else:
            await closed_loop(client, args, prepared, outputs, checked, recorder, window[1])
        await asyncio.gather(*marks)
        done.set()
        if sampling:
            await sampling
    finally:
        await client.close()

    result = summarise(args, recorder, window, t0)
    if args.rate:
        result["skipped_at_max_inflight"] = skipped
    (cpu0, server0, box0), (cpu1, server1, box1) = cpu_marks["start"], cpu_marks["end"]
    duration = window[1] - window[0]
    client_cpu = cpu1 - cpu0
    result["client_cpu_s"] = round(client_cpu, 3)
    result["client_cpu_cores"] = round(client_cpu / duration, 3)
    server_cpu = 0.0
    if server0 and server1:
        server_cpu = server1["tree_cpu_s"] - server0["tree_cpu_s"]
        result["server_cpu_s"] = round(server_cpu, 3)
        result["server_cpu_cores"] = round(server_cpu / duration, 3)
    busy = box1["busy_s"] - box0["busy_s"]
    result["machine_busy_cores"] = round(busy / duration, 3)
    # Without --rss-pid the server's share is unknown and counts as "other".
    result["other_busy_cores"] = round((busy - client_cpu - server_cpu) / duration, 3)
    result["steal_cores"] = round((box1["steal_s"] - box0["steal_s"]) / duration, 3)
    if args.rss_pid:
        # The server died (or its PID was wrong) if it was not there at the window's end.
        result["server_alive_at_end"] = server1 is not None
    if samples:
        rss = [s["rss_mb"] for s in samples]
        result["server_rss_mb"] = {
            "first": rss[0],
            "last": rss[-1],
            "max": max(rss),
            "hwm": samples[-1]["hwm_mb"],
            "growth_in_window": _growth(samples, window[0] - t0),
        }
    result["rss_series"] = samples
    result["metadata_outputs"] = names
    result["metadata_error"] = meta_error
    return result


def _growth(samples: list[dict], window_start: float) -> float | None:
    """RSS at the last sample minus the first sample inside the window, MB."""
    inside = [s for s in samples if s["t_s"] >= window_start]
    return round(inside[-1]["rss_mb"] - inside[0]["rss_mb"], 2) if len(inside) >= 2 else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--url", required=True, help="host:port, no scheme (tritonclient's form)")
    parser.add_argument("--protocol", choices=("http", "grpc"), required=True)
    parser.add_argument("--model", required=True, help="the model's name on the server")
    parser.add_argument("--concurrency", type=int, default=1, help="closed-loop workers")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load not counted")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument(
        "--input",
        action="append",
        help="NAME:DATATYPE:SHAPE (repeatable), e.g. Input3:FP32:1,1,28,28; random values. "
        "Without it: token inputs of --batch x --seq (input_ids, attention_mask, token_type_ids)",
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rate", type=float, help="open loop: requests per second")
    parser.add_argument(
        "--max-inflight", type=int, default=256, help="open loop: most outstanding requests"
    )
    parser.add_argument("--outputs", nargs="*", help="outputs to request (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per-request limit, s")
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="wait for ready, s")
    parser.add_argument("--pool", type=int, default=16, help="distinct feeds sent in turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=VOCAB_SIZE, help="token ids lie below it")
    parser.add_argument(
        "--no-check", dest="check", action="store_false", help="do not decode the outputs"
    )
    parser.add_argument("--rss-pid", type=int, help="the server's PID, to sample RSS and CPU")
    parser.add_argument("--sample-every", type=float, default=1.0, help="RSS sampling period, s")
    parser.add_argument(
        "--error-pause",
        type=float,
        default=0.01,
        help="closed loop: a worker's pause after an error, s",
    )
    parser.add_argument("--keep-errors", type=int, default=5, help="distinct messages kept")
    parser.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    parser.add_argument("--label", help="free text stored with the result")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.concurrency < 1 or args.duration <= 0 or args.warmup < 0 or args.batch < 1:
        parser.error("--concurrency and --batch must be >= 1, --duration > 0, --warmup >= 0")
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be > 0")
    if args.input:
        try:
            args.batch = parse_input(args.input[0])[2][0]  # what check() expects first
        except (ValueError, IndexError) as err:
            parser.error(f"--input: {err}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    loop = args.loop
    if loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
            loop = "asyncio"
        else:
            loop = "uvloop"
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if loop == "uvloop":
        result = uvloop.run(run(args))
    else:
        result = asyncio.run(run(args))
    document = {
        "tool": "serve_load",
        "label": args.label,
        "started": started,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "mode": "open" if args.rate else "closed",
        "event_loop": loop,
        "client_pid": os.getpid(),
        "versions": versions("tritonclient", "numpy", "aiohttp", "grpcio", "uvloop"),
        "machine": machine(),
        **result,
    }
    text = json.dumps(document, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    lat = document["latency"]
    print(
        f"{args.protocol} {f'open rate={args.rate}/s' if args.rate else f'c={args.concurrency}'} "
        f"b{args.batch}xs{args.seq}: {document['requests_per_s']} req/s, "
        f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, errors {document['errors']}, "
        f"client CPU {document['client_cpu_cores']} cores"
        + (
            f", server CPU {document.get('server_cpu_cores')} cores, "
            f"RSS {document['server_rss_mb']['last']} MB"
            if "server_rss_mb" in document
            else ""
        ),
        file=sys.stderr,
    )
    print(text)
    return document


if __name__ == "__main__":
    main()
