"""onnxgate serve under load, beside KServe's model server and ONNX Runtime in-process.

All-MiniLM-L6-v2 at batch 1 x seq 128 per request (or any model: ``--name``, ``--input``,
``--outputs``), binary tensors, REST and gRPC, concurrency 1, 8 and 32. Contenders, each a server in its own process (the load generator is a third process,
``serve_load.py``, with tritonclient's asyncio clients):

- ``onnxgate``: ``onnxgate serve`` with dynamic batching (the default);
- ``onnxgate-nobatch``: the same with ``--no-batching``;
- ``kserve``: KServe's Python model server with an ONNX Runtime model (``serve_peer_kserve.py``,
  run from its own venv, ``--peer-python``).

The servers stay up side by side while the load runs against one of them at a time, in rounds
whose order rotates (interleaved), so a slow minute of the machine does not land on one
contender. Then the ceiling: ONNX Runtime in-process with the same settings at the batch sizes
the batcher formed (read off the server's ``/metrics``). Then, optionally, the soak (a fixed
request rate at a fraction of the measured capacity, with the server's RSS sampled) and an alias
switch under load (a new registry version promoted while requests run).

Usage:
    python benchmarks/serve_bench.py --model /path/minilm.onnx --peer-python /path/peer/bin/python \
        --out benchmarks/results/serve.json [--soak 600] [--switch]

The model needs its contract (``onnxgate contract init``) proving batch up to 32 and seq 128.
Another model, mnist for one (its batch is fixed at 1: concurrency 32 is 32 requests of batch 1
that cannot be batched)::

    python benchmarks/serve_bench.py --model mnist.onnx --name mnist \
        --input Input3:FP32:1,1,28,28 --outputs Plus214_Output_0 --concurrency 1,32 \
        --servers onnxgate,kserve --peer-python /path/peer/bin/python --out mnist.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(
        self, label: str, command: list[str], http: int, grpc: int, log: Path, env=None
    ) -> None:
        self.label, self.http, self.grpc = label, http, grpc
        self.log = log
        self.process = subprocess.Popen(
            command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env or dict(os.environ)
        )

    def wait_ready(self, model: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.label} exited:\n{self.log.read_text()[-3000:]}")
            try:
                url = f"http://127.0.0.1:{self.http}/v2/models/{model}/ready"
                with urllib.request.urlopen(url, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{self.label} not ready after {timeout} s")

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http if protocol == 'http' else self.grpc}"

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=5) as reply:
            return reply.read().decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def onnxgate(
    label: str, model: Path, extra: list[str], logs: Path, name: str, src: str | None = None
) -> Server:
    """``onnxgate serve`` of ``model``; with ``src``, the onnxgate found there (PYTHONPATH)."""
    http, grpc = free_port(), free_port()
    command = [
        PY, "-m", "onnxgate", "serve", f"{name}={model}", "--allow-ungated",
        "--http-port", str(http), "--grpc-port", str(grpc), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": src} if src else None
    return Server(label, command, http, grpc, logs / f"{label}.log", env)


def kserve(python: str, model: Path, logs: Path, name: str) -> Server:
    http, grpc = free_port(), free_port()
    command = [
        python, str(HERE / "serve_peer_kserve.py"), "--model", str(model), "--name", name,
        "--http-port", str(http), "--grpc-port", str(grpc),
    ]  # fmt: skip
    return Server("kserve", command, http, grpc, logs / "kserve.log")


def load(server: Server, protocol: str, concurrency: int, args, name: str, **more) -> dict:
    out = args.work / f"load-{server.label}-{protocol}-c{concurrency}-{time.time_ns()}.json"
    command = [
        PY, str(HERE / "serve_load.py"), "--url", server.url(protocol), "--protocol", protocol,
        "--model", name, "--concurrency", str(concurrency), "--duration", str(args.duration),
        "--warmup", str(args.warmup), "--batch", "1", "--seq", "128",
        "--outputs", *args.outputs.split(","), "--out", str(out),
    ]  # fmt: skip
    for spec in args.input or ():
        command += ["--input", spec]
    for key, value in more.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=args.duration * 4 + 600)
    return json.loads(out.read_text())


def histograms(text: str, name: str) -> dict[str, float]:
    """Sums and counts of the server's histograms for the model (``batch_size_sum`` ...)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("onnxgate_") or f'model="{name}"' not in line:
            continue
        metric = line.split("{", 1)[0].removeprefix("onnxgate_")
        if metric.endswith(("_sum", "_count")):
            found[metric] = found.get(metric, 0.0) + float(line.split()[-1])
    return found


def server_side(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Mean batch, and mean request, queue and compute time inside the server over one run."""

    def mean(metric: str, scale: float = 1.0) -> float | None:
        count = after.get(f"{metric}_count", 0) - before.get(f"{metric}_count", 0)
        total = after.get(f"{metric}_sum", 0) - before.get(f"{metric}_sum", 0)
        return round(total / count * scale, 3) if count else None

    return {
        "mean_batch": mean("batch_size"),
        "server_request_ms": mean("request_duration_seconds", 1e3),
        "server_queue_ms": mean("queue_duration_seconds", 1e3),
        "server_compute_ms": mean("compute_duration_seconds", 1e3),
    }


def summary(result: dict) -> dict:
    latency = result["latency"]
    rss = [r["rss_mb"] for r in result.get("rss_series") or []]
    return {
        "rss_mb_first": rss[0] if rss else None,
        "rss_mb_last": rss[-1] if rss else None,
        "requests_per_s": result["requests_per_s"],
        "p50_ms": latency["p50_ms"],
        "p99_ms": latency["p99_ms"],
        "errors": result["errors"],
        "completed": result["completed"],
        "client_cpu_cores": result.get("client_cpu_cores"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--peer-python", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/serve-bench"))
    parser.add_argument("--duration", type=float, default=12.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--name", default="minilm", help="the model's name on the servers")
    parser.add_argument(
        "--input", action="append", help="NAME:DATATYPE:SHAPE (repeatable; see serve_load.py)"
    )
    parser.add_argument("--outputs", default="sentence_embedding", help="comma-separated")
    parser.add_argument("--servers", default="onnxgate,onnxgate-nobatch,kserve")
    parser.add_argument("--soak", type=float, default=0.0, help="soak seconds (0: none)")
    parser.add_argument("--soak-fraction", type=float, default=0.8)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    name = args.name
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocols.split(",")
    starters = {
        "onnxgate": lambda: onnxgate("onnxgate", args.model, [], args.work, name),
        "onnxgate-nobatch": lambda: onnxgate(
            "onnxgate-nobatch", args.model, ["--no-batching"], args.work, name
        ),
        "kserve": lambda: kserve(args.peer_python, args.model, args.work, name),
    }
    servers = [starters[label]() for label in args.servers.split(",")]
    runs: list[dict] = []
    try:
        for server in servers:
            server.wait_ready(name)
        order = list(servers)
        for round_ in range(args.rounds):
            for concurrency in concurrencies:
                for protocol in protocols:
                    for server in order:
                        ours = server.label.startswith("onnxgate")
                        before = histograms(server.metrics(), name) if ours else {}
                        result = load(
                            server, protocol, concurrency, args, name, rss_pid=server.process.pid
                        )
                        after = histograms(server.metrics(), name) if ours else {}
                        row = {
                            "server": server.label,
                            "protocol": protocol,
                            "concurrency": concurrency,
                            "round": round_,
                            **summary(result),
                            **server_side(before, after),
                        }
                        runs.append(row)
                        print(json.dumps(row), flush=True)
                    order = order[1:] + order[:1]
        formed = sorted({max(1, round(r["mean_batch"])) for r in runs if r["mean_batch"]} | {1, 32})
        if args.input:  # a fixed batch (mnist's 1) cannot be measured at other sizes
            formed = sorted({int(spec.rsplit(":", 1)[1].split(",")[0]) for spec in args.input})
        ceiling_out = args.work / "ceiling.json"
        subprocess.run(
            [PY, str(HERE / "serve_ceiling.py"), str(args.model), "--batches",
             ",".join(map(str, formed)), "--seq", "128", "--duration", "8", "--out", str(ceiling_out),
             *[f"--input={spec}" for spec in args.input or ()]],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        ceiling = json.loads(ceiling_out.read_text())
        soak = None
        if args.soak:
            at_32 = [
                r["requests_per_s"]
                for r in runs
                if r["server"] == "onnxgate" and r["protocol"] == "http" and r["concurrency"] == 32
            ]
            capacity = statistics.median(at_32)  # the batcher's capacity, at concurrency 32
            rate = round(capacity * args.soak_fraction, 1)
            server = servers[0]
            result = load(
                server, "http", 64, argparse.Namespace(**{**vars(args), "duration": args.soak}),
                name, rate=rate, rss_pid=server.process.pid, max_inflight=256,
            )  # fmt: skip
            rss = result["rss_series"]
            soak = {"rate": rate, "capacity": capacity, **summary(result), "rss": rss}
            print(json.dumps({k: v for k, v in soak.items() if k != "rss"}), flush=True)
    finally:
        for server in servers:
            server.stop()
    table = {}
    for row in runs:
        key = (row["server"], row["protocol"], row["concurrency"])
        table.setdefault(key, []).append(row)
    medians = [
        {
            "server": s, "protocol": p, "concurrency": c,
            "requests_per_s": statistics.median(r["requests_per_s"] for r in rows),
            "p50_ms": statistics.median(r["p50_ms"] for r in rows),
            "p99_ms": statistics.median(r["p99_ms"] for r in rows),
            "errors": sum(r["errors"] for r in rows),
            **{
                key: statistics.median(values) if values else None
                for key in ("mean_batch", "server_request_ms", "server_queue_ms",
                            "server_compute_ms", "rss_mb_first", "rss_mb_last")
                for values in [[r[key] for r in rows if r[key] is not None]]
            },
        }
        for (s, p, c), rows in sorted(table.items())
    ]  # fmt: skip
    document = {
        "tool": "serve_bench",
        "model": str(args.model),
        "machine": ceiling["machine"],
        "versions": ceiling["versions"],
        "args": {k: str(v) for k, v in vars(args).items()},
        "runs": runs,
        "medians": medians,
        "ceiling": ceiling["batches"],
        "soak": soak,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
