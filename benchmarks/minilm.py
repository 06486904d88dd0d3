"""all-MiniLM-L6-v2 on this machine: PyTorch eager, ONNX Runtime, onnxgate tune, Optimum, int8.

At batch 1 × seq 128 and batch 32 × seq 128, every contender runs in a worker process of its own
and all of them are timed in one interleaved contest per shape (onnxgate's ``Contest``: slices of
about 0.2 s in turn, the order flipping every round), so drift hits all alike. Contenders:

- PyTorch eager: the module PyTorch users serve (``onnxgate.examples.minilm:served``, SDPA
  attention), under ``inference_mode``, default threads;
- ONNX Runtime defaults: our dynamo export, ``onnxgate export torch``, default session options;
- onnxgate tune: what ``onnxgate tune`` recorded for this machine and shape (the defaults again
  when no candidate beat them by a bootstrapped margin);
- Optimum O2 / O3 (and its int8 avx512_vnni preset): the peer, in its own venv
  (``peer_optimum.py``), run here by the same harness;
- onnxgate int8 dynamic / static: ``onnxgate quantize`` with its accuracy gate (cosine ≥ 0.99 on
  held-apart sentences), when the command exists.

Each ONNX contender's outputs are compared with the export's at batch 1 × seq 128 (max |Δ| and
the lowest cosine per output), and each row gets its share of the machine's GEMM peak
(``gemm_peak.py``'s results: MatMul FLOPs of the model / latency / peak).

    python benchmarks/minilm.py [--budget 20] [--work ~/.cache/onnxgate-bench/minilm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _minilm import RESULTS, export, feeds, write

from onnxgate.perf._contest import Contender, Contest

SHAPES = {"b1×s128": (1, 128, "latency"), "b32×s128": (32, 128, "throughput")}
TORCH = "onnxgate.examples.minilm:served"


def onnxgate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxgate", *args], capture_output=True, text=True)


def tuned(model: Path, batch: int, seq: int, objective: str) -> tuple[dict, Path, dict]:
    """Run `onnxgate tune` for one shape; the recorded settings, the file to run and the report."""
    from onnxgate.perf._tuned import tuned_for

    done = onnxgate(
        "tune",
        str(model),
        "--objective",
        objective,
        "--batch",
        str(batch),
        "--dim",
        f"seq={seq}",
        "-f",
        "json",
    )
    if done.returncode != 0:
        raise SystemExit(
            f"onnxgate tune failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
    report = json.loads(done.stdout)
    settings, path = tuned_for(model, objective=objective, dims={"batch": batch, "seq": seq})
    return settings, path, report


def quantized(model: Path, work: Path) -> dict[str, Path]:
    """int8 models from `onnxgate quantize`, dynamic and static, each passing its gate."""
    made = {}
    for mode in ("dynamic", "static"):
        out = work / f"all-MiniLM-L6-v2.int8-{mode}.onnx"
        if not out.exists():
            data = ["--eval", "onnxgate.examples.minilm:eval_feeds"]
            if mode == "static":
                data += ["--calibration", "onnxgate.examples.minilm:calibration_feeds"]
            done = onnxgate(
                "quantize", str(model), "--out", str(out), "--mode", mode, *data, "--no-bench"
            )
            if done.returncode != 0:
                print(
                    f"quantize {mode}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
                continue
        made[f"onnxgate int8 {mode}"] = out
    return made


def parity(model: Path, candidate: Path) -> dict:
    """Max |Δ| and lowest row cosine per output against the export, at b1×s128 (seed 1)."""
    import onnxruntime as ort

    inputs = feeds(1, 128, seed=1)
    ours = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(str(candidate), providers=["CPUExecutionProvider"])
    names = [o.name for o in ours.get_outputs()]
    wanted = {i.name for i in theirs.get_inputs()}
    a = ours.run(None, inputs)
    b = theirs.run(names, {k: v for k, v in inputs.items() if k in wanted})
    figures = {}
    for name, x, y in zip(names, a, b, strict=True):
        x2, y2 = (
            x.reshape(x.shape[0], -1).astype(np.float64),
            y.reshape(y.shape[0], -1).astype(np.float64),
        )
        cosine = (x2 * y2).sum(1) / (np.linalg.norm(x2, axis=1) * np.linalg.norm(y2, axis=1))
        figures[name] = {"max_abs": float(np.abs(x - y).max()), "min_cosine": float(cosine.min())}
    return figures


def peaks() -> dict[str, float]:
    """The machine's practical GEMM peak in GFLOP/s (GOP/s), fp32 and dynamic int8, if measured."""
    if not (RESULTS / "gemm_peak.json").exists():
        return {}
    from gemm_peak import load_peak

    return {
        kind: max(load_peak(op, threads) for threads in (1, 2))
        for kind, op in (("fp32", "MatMul"), ("int8", "DynamicQuantizeMatMul"))
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget", type=float, default=20.0, help="seconds of timed runs per contender and shape"
    )
    parser.add_argument(
        "--work", type=Path, default=Path.home() / ".cache" / "onnxgate-bench" / "minilm"
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["tune", "optimum", "int8"])
    parser.add_argument("--name", default="minilm", help="results/NAME.json and .md")
    args = parser.parse_args()
    started = time.perf_counter()
    work = args.work.expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    model = export(work)

    static: dict[str, Path] = {"ORT defaults": model}
    if "optimum" not in args.skip:
        from peer_optimum import prepare

        for label, path in prepare(model, work / "optimum").items():
            static[f"Optimum {label}"] = path
    if "int8" not in args.skip:
        static.update(quantized(model, work))
    accuracy = {
        label: parity(model, path) for label, path in static.items() if label != "ORT defaults"
    }

    gemm = peaks()
    from gemm_peak import flops_minilm

    rows, tuning = [], {}
    for shape, (batch, seq, objective) in SHAPES.items():
        contenders = [Contender("PyTorch eager", torch=TORCH, signature=model)]
        contenders += [Contender(label, onnx=path) for label, path in static.items()]
        if "tune" not in args.skip:
            settings, path, report = tuned(model, batch, seq, objective)
            tuning[shape] = {"settings": settings, "file": path.name, "report": report}
            contenders.insert(2, Contender("onnxgate tune", onnx=path, settings=settings))
            if path != model:
                accuracy.setdefault(f"onnxgate tune ({shape})", parity(model, path))
        inputs = feeds(batch, seq)
        with Contest(contenders) as contest:
            print(f"{shape}: {len(contenders)} contenders, {args.budget:.0f} s each", flush=True)
            latencies = contest.race(
                [{k: v for k, v in inputs.items()} for _ in contenders],
                warmup=5,
                budget_s=args.budget,
            )
        eager = float(np.median(latencies[0]))
        flops = flops_minilm(batch, seq)
        for contender, ms in zip(contenders, latencies, strict=True):
            p50 = float(np.median(ms))
            row = {
                "shape": shape,
                "contender": contender.label,
                "runs": len(ms),
                "p50_ms": p50,
                "p10_ms": float(np.percentile(ms, 10)),
                "p90_ms": float(np.percentile(ms, 90)),
                "cv": float(np.std(ms) / np.mean(ms)),
                "speedup_vs_eager": eager / p50,
            }
            if gemm:
                kind = "int8" if "int8" in contender.label else "fp32"
                row["peak_share"] = flops / (p50 / 1e3) / 1e9 / gemm[kind]
            rows.append(row)

    lines = [
        "| shape | contender | p50 ms | p10–p90 ms | CV | runs | × PyTorch eager | share of GEMM peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = f"{r['peak_share']:.0%}" if "peak_share" in r else "–"
        lines.append(
            f"| {r['shape']} | {r['contender']} | {r['p50_ms']:.2f} | {r['p10_ms']:.2f}–{r['p90_ms']:.2f} "
            f"| {r['cv']:.1%} | {r['runs']} | {r['speedup_vs_eager']:.2f}× | {share} |"
        )
    lines += [
        "",
        "Outputs against the export at b1×s128 (seed 1):",
        "",
        "| model | output | max abs Δ | min cosine |",
    ]
    lines.append("|---|---|---|---|")
    for label, outputs in accuracy.items():
        for name, f in outputs.items():
            lines.append(f"| {label} | {name} | {f['max_abs']:.3g} | {f['min_cosine']:.6f} |")
    elapsed = time.perf_counter() - started
    lines.append(
        f"\n{elapsed:.0f} s in all; medians of interleaved runs, each contender in its own process.\n"
    )
    document = {
        "rows": rows,
        "parity": accuracy,
        "tuning": tuning,
        "seconds": elapsed,
        "budget_s": args.budget,
    }
    write(args.name, document, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
