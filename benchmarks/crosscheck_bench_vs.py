"""Does `bench --vs torch:...` agree with a plain, hand-written timing of the same configurations?

For all-MiniLM-L6-v2 at batch 1 and 8 × seq 128, three independent measurements each in a fresh
process, in the order hand, bench, hand (drift during the run hits both):

- ONNX Runtime alone: an ``InferenceSession`` with default options, 10 warm-up runs, then
  ``perf_counter`` around each ``run`` for the same number of seconds as bench's budget; the median;
- PyTorch alone: the SDPA module (``onnxgate.examples.minilm:served``) under ``inference_mode``,
  timed the same way;
- ``onnxgate bench MODEL --vs torch:onnxgate.examples.minilm:served`` (JSON).

It reports each of bench's medians against the mean of the two hand-written medians and the two
ratios, and fails (exit 1) when any differs by more than 15%.

    python benchmarks/crosscheck_bench_vs.py [--budget 5] [--model all-MiniLM-L6-v2.onnx]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _minilm import export, run_script, write

TOLERANCE = 0.15
SHAPES = ((1, 128), (8, 128))
ENTRY = "onnxgate.examples.minilm:served"

ORT_ALONE = """
import json, statistics, sys, time
import numpy as np, onnxruntime as ort
path, batch, seq, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng = np.random.default_rng(0)
feeds = {"input_ids": rng.integers(0, 30522, (batch, seq), dtype=np.int64),
         "attention_mask": np.ones((batch, seq), np.int64),
         "token_type_ids": np.zeros((batch, seq), np.int64)}
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
for _ in range(10):
    session.run(None, feeds)
times, end = [], time.perf_counter() + budget
while time.perf_counter() < end or len(times) < 10:
    start = time.perf_counter()
    session.run(None, feeds)
    times.append((time.perf_counter() - start) * 1e3)
print(json.dumps({"p50_ms": statistics.median(times), "runs": len(times)}))
"""

TORCH_ALONE = """
import json, os, statistics, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from onnxgate.examples.minilm import served
batch, seq, budget = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
gen = torch.Generator().manual_seed(0)
ids = torch.randint(0, 30522, (batch, seq), generator=gen)
mask, types = torch.ones(batch, seq, dtype=torch.int64), torch.zeros(batch, seq, dtype=torch.int64)
module = served()
times = []
with torch.inference_mode():
    for _ in range(10):
        module(ids, mask, types)
    end = time.perf_counter() + budget
    while time.perf_counter() < end or len(times) < 10:
        start = time.perf_counter()
        module(ids, mask, types)
        times.append((time.perf_counter() - start) * 1e3)
print(json.dumps({"p50_ms": statistics.median(times), "runs": len(times)}))
"""


def hand(model: Path, batch: int, seq: int, budget: float) -> tuple[float, float]:
    ort_ms = run_script(ORT_ALONE, str(model), str(batch), str(seq), str(budget))["p50_ms"]
    torch_ms = run_script(TORCH_ALONE, str(batch), str(seq), str(budget))["p50_ms"]
    return ort_ms, torch_ms


def bench(model: Path, batch: int, seq: int, budget: float) -> dict:
    command = [sys.executable, "-m", "onnxgate", "bench", str(model), "--batch", str(batch)]
    command += [
        "--dim",
        f"seq={seq}",
        "--budget",
        str(budget),
        "--vs",
        f"torch:{ENTRY}",
        "-f",
        "json",
    ]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of timed runs per side")
    parser.add_argument("--model", type=Path, help="an exported MiniLM (default: export one)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as folder:
        model = args.model or export(Path(folder))
        for batch, seq in SHAPES:
            before = hand(model, batch, seq, args.budget)
            report = bench(model, batch, seq, args.budget)
            after = hand(model, batch, seq, args.budget)
            ort_hand = (before[0] + after[0]) / 2
            torch_hand = (before[1] + after[1]) / 2
            ort_bench = report["results"][0]["p50_ms"]
            torch_bench = report["vs"]["results"][0]["p50_ms"]
            row = {
                "shape": f"b{batch}×s{seq}",
                "ort_hand_ms": [before[0], after[0]],
                "torch_hand_ms": [before[1], after[1]],
                "ort_bench_ms": ort_bench,
                "torch_bench_ms": torch_bench,
                "ratio_hand": torch_hand / ort_hand,
                "ratio_bench": report["ratio"][0]["ratio"],
            }
            row["ort_diff"] = ort_bench / ort_hand - 1
            row["torch_diff"] = torch_bench / torch_hand - 1
            row["ratio_diff"] = row["ratio_bench"] / row["ratio_hand"] - 1
            ok &= all(abs(row[k]) <= TOLERANCE for k in ("ort_diff", "torch_diff", "ratio_diff"))
            rows.append(row)
    lines = [
        "| shape | ORT hand (before, after) | ORT bench | Δ | torch hand (before, after) "
        "| torch bench | Δ | ratio hand | ratio bench | Δ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['ort_hand_ms'][0]:.2f}, {r['ort_hand_ms'][1]:.2f} "
            f"| {r['ort_bench_ms']:.2f} | {r['ort_diff']:+.1%} "
            f"| {r['torch_hand_ms'][0]:.2f}, {r['torch_hand_ms'][1]:.2f} "
            f"| {r['torch_bench_ms']:.2f} | {r['torch_diff']:+.1%} "
            f"| {r['ratio_hand']:.3f} | {r['ratio_bench']:.3f} | {r['ratio_diff']:+.1%} |"
        )
    elapsed = time.perf_counter() - started
    verdict = "agree" if ok else "DISAGREE"
    lines.append(f"\nAll within {TOLERANCE:.0%}: {verdict} ({elapsed:.0f} s, medians in ms).\n")
    write("crosscheck_bench_vs", {"rows": rows, "agree": ok, "seconds": elapsed}, "\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
