"""The ceiling for a server: ONNX Runtime in-process, no network, at the batch sizes it formed.

A server's throughput at batch B can at best equal one ``InferenceSession.run`` at batch B in a
tight loop, with the same session settings. This script measures that, so a server's figures can
be put as a ratio of it (``serve_load.py`` gives the server's side)::

    python benchmarks/serve_ceiling.py /tmp/bench-minilm/all-MiniLM-L6-v2.onnx \\
        --batches 1,2,4,8,16,32 --seq 128 --threads 2 --duration 10 --out /tmp/ceiling.json

Run it in a process of its own, with no server running: it is meant to have the machine.

The batch sizes are **interleaved**: after ``--warmup`` runs at every size, rounds run each size
for a slice of ``--slice`` s in turn, the order reversed every round, until each size has had
``--duration`` s. Drift of the machine (another tenant, thermal state) thus falls on all sizes
alike. Inputs are the load generator's: random token ids in [0, ``--vocab``) (seeded), attention
mask ones, token type ids zeros (or ``--input`` tensors, as ``serve_load.py`` takes them), a few
distinct feeds per size sent in turn; all outputs are fetched, as a server must.

Output (stdout and ``--out``): per batch size the median, p10, p90 and p99 latency in ms, runs,
samples/s at the median (batch / median) and as measured (samples over time in the loop), plus
the session settings, ONNX Runtime's version and providers, and the machine (CPU, ISA flags,
cores: see ``serve_load.machine``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# The load generator's machine facts and feeds: this script sits beside it.
from serve_load import VOCAB_SIZE, feeds_pool, machine, machine_cpu, spec_pool, versions

LEVELS = ("disable", "basic", "extended", "all")


def session(model: Path, args: argparse.Namespace):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = args.inter_threads
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[args.level]
    options.enable_cpu_mem_arena = not args.no_arena
    options.enable_mem_pattern = not args.no_mem_pattern
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def measure(sess, args: argparse.Namespace, batches: list[int]) -> dict[int, dict]:
    names = [i.name for i in sess.get_inputs()]
    pools = {
        b: spec_pool(args.input, size=args.pool, seed=args.seed + b, batch=b)
        if args.input
        else feeds_pool(b, args.seq, size=args.pool, seed=args.seed + b, vocab=args.vocab)
        for b in batches
    }
    for feeds in pools.values():
        missing = set(names) - feeds[0].keys()
        if missing:
            raise SystemExit(
                f"the model takes inputs {names}; this script feeds {sorted(feeds[0])}"
            )
    times: dict[int, list[float]] = {b: [] for b in batches}
    spent = dict.fromkeys(batches, 0.0)
    for b in batches:
        for k in range(args.warmup):
            sess.run(None, pools[b][k % args.pool])
    order, counter = list(batches), dict.fromkeys(batches, 0)
    while any(spent[b] < args.duration for b in batches):
        for b in order:
            if spent[b] >= args.duration:
                continue
            pool = pools[b]
            slice_end = time.perf_counter() + args.slice
            while True:
                feeds = pool[counter[b] % args.pool]
                counter[b] += 1
                start = time.perf_counter_ns()
                sess.run(None, feeds)
                elapsed = (time.perf_counter_ns() - start) / 1e9
                times[b].append(elapsed)
                spent[b] += elapsed
                if time.perf_counter() >= slice_end or spent[b] >= args.duration:
                    break
        order.reverse()
    report = {}
    for b in batches:
        ms = np.asarray(times[b]) * 1e3
        p10, p50, p90, p99 = np.percentile(ms, [10, 50, 90, 99])
        report[b] = {
            "batch": b,
            "runs": int(ms.size),
            "median_ms": round(float(p50), 3),
            "p10_ms": round(float(p10), 3),
            "p90_ms": round(float(p90), 3),
            "p99_ms": round(float(p99), 3),
            "cv": round(float(ms.std() / ms.mean()), 4),
            "samples_per_s_at_median": round(b * 1e3 / float(p50), 2),
            "samples_per_s_measured": round(b * ms.size / (ms.sum() / 1e3), 2),
        }
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("model", type=Path, help="the .onnx file")
    parser.add_argument("--batches", default="1,2,4,8,16,32", help="comma-separated batch sizes")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument(
        "--input",
        action="append",
        help="NAME:DATATYPE:SHAPE (repeatable; the first dim becomes each batch size) instead of "
        "token inputs, e.g. Input3:FP32:1,1,28,28",
    )
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: ORT's)")
    parser.add_argument("--inter-threads", type=int, default=0, help="inter-op threads")
    parser.add_argument("--level", choices=LEVELS, default="all", help="graph optimisation")
    parser.add_argument("--no-arena", action="store_true", help="disable the CPU memory arena")
    parser.add_argument("--no-mem-pattern", action="store_true", help="disable memory patterns")
    parser.add_argument("--duration", type=float, default=10.0, help="timed seconds per size")
    parser.add_argument("--slice", type=float, default=0.5, help="seconds per size per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per size first")
    parser.add_argument("--pool", type=int, default=4, help="distinct feeds per size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=VOCAB_SIZE)
    parser.add_argument("--label", help="free text stored with the result")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        args.batch_list = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    except ValueError:
        parser.error(f"--batches takes comma-separated integers, got {args.batches!r}")
    if not args.batch_list or min(args.batch_list) < 1:
        parser.error("--batches needs sizes >= 1")
    if args.duration <= 0 or args.slice <= 0 or args.warmup < 1 or args.pool < 1:
        parser.error("--duration and --slice must be > 0, --warmup and --pool >= 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    sess = session(args.model, args)
    load_s = time.perf_counter() - t0
    cpu0, box0 = time.process_time(), machine_cpu()
    t1 = time.perf_counter()
    report = measure(sess, args, args.batch_list)
    wall = time.perf_counter() - t1
    own = time.process_time() - cpu0
    box1 = machine_cpu()
    document = {
        "tool": "serve_ceiling",
        "label": args.label,
        "started": started,
        "model": str(args.model.resolve()),
        "seq": args.seq,
        "session": {
            "intra_op_threads": args.threads,
            "inter_op_threads": args.inter_threads,
            "graph_level": args.level,
            "cpu_mem_arena": not args.no_arena,
            "mem_pattern": not args.no_mem_pattern,
            "providers": sess.get_providers(),
        },
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "session_load_s": round(load_s, 3),
        "wall_s": round(wall, 3),
        "process_cpu_cores": round(own / wall, 3),
        # What other processes used meanwhile: well above 0 means the run was disturbed.
        "other_busy_cores": round((box1["busy_s"] - box0["busy_s"] - own) / wall, 3),
        "steal_cores": round((box1["steal_s"] - box0["steal_s"]) / wall, 3),
        "versions": versions("onnxruntime", "numpy"),
        "machine": machine(),
        "batches": list(report.values()),
    }
    text = json.dumps(document, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    for row in report.values():
        print(
            f"b{row['batch']}xs{args.seq}: median {row['median_ms']} ms "
            f"(p10 {row['p10_ms']}, p90 {row['p90_ms']}), {row['samples_per_s_at_median']} "
            f"samples/s, {row['runs']} runs",
            file=sys.stderr,
        )
    print(text)
    return document


if __name__ == "__main__":
    main()
