"""Python ONNX Runtime against ONNX Runtime's JavaScript packages: drift and speed, per model.

For each model of ../shared/corpus that Python's ONNX Runtime runs on synthetic feeds, and for
all-MiniLM-L6-v2 (batch 1, seq 128): the outputs of onnxruntime-web (wasm, 1 and 2 threads, in a
headless Chromium) and onnxruntime-node (1 thread) against the installed Python ONNX Runtime (1
thread) on the same feeds (max abs and cosine, the worst float output), then the four timed
against each other in one Contest (each in its own worker process, slices interleaved, the order
flipping every round), p50 per side. Records the CPU's ISA and the load before and after.

    python benchmarks/js_runtimes.py [--minilm PATH] [--budget SECONDS]

Writes benchmarks/results/js_runtimes.json and .md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from onnxgate.data import synthetic_samples
from onnxgate.errors import GateError
from onnxgate.model import Signature, load_model
from onnxgate.perf._contest import Contender, Contest
from onnxgate.runners import open_runner, runtime_version
from onnxgate.settings import SessionSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _minilm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"
SIDES = (
    ("python ORT, 1 thread", None, 1),
    ("web wasm, 1 thread", WEB, 1),
    ("web wasm, 2 threads", WEB, 2),
    ("node, 1 thread", NODE, 1),
)


def _isa() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    found = sorted(set(re.findall(r"\b(avx512_vnni|amx\w*|avx512f|avx2)\b", flags)))
    return ", ".join(found) or platform.machine()


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _drift(expected: dict[str, Any], got: dict[str, Any]) -> tuple[float, float]:
    """The worst max abs and cosine over the float outputs."""
    worst_abs, worst_cos = 0.0, 1.0
    for name, want in expected.items():
        if not isinstance(want, np.ndarray) or want.dtype.kind != "f":
            continue
        a = np.asarray(want, np.float64).ravel()
        b = np.asarray(got[name], np.float64).ravel()
        worst_abs = max(worst_abs, float(np.abs(a - b).max(initial=0.0)))
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosine = float(a @ b / norms) if norms else float(np.array_equal(a, b))
        worst_cos = min(worst_cos, cosine)
    return worst_abs, worst_cos


def measure(path: Path, feeds: dict[str, Any], budget: float) -> dict[str, Any]:
    """Drift against Python ORT, and p50 of every side in one interleaved contest."""
    model = load_model(path)
    row: dict[str, Any] = {"model": path.name, "sides": {}}
    with open_runner(model, SessionSettings(threads=1)) as here:
        expected = here.infer(feeds).outputs
    for label, spec, threads in SIDES[1:]:
        try:
            with open_runner(model, SessionSettings(threads=threads), runtime=spec) as there:
                got = there.infer(feeds).outputs
                ran = there.info().settings
            max_abs, cosine = _drift(expected, got)
            row["sides"][label] = {"max_abs": max_abs, "cosine": cosine, "ran": ran}
        except GateError as err:
            row["sides"][label] = {"error": err.message}
    contenders = [
        Contender(label, onnx=path, settings=SessionSettings(threads=t).wire(), runtime=spec)
        for label, spec, t in SIDES
        if "error" not in row["sides"].get(label, {})
    ]
    arrays = {k: np.asarray(v) for k, v in feeds.items()}
    try:
        with Contest(contenders) as contest:
            latencies = contest.race([arrays] * len(contenders), warmup=5, budget_s=budget)
    except GateError as err:
        row["contest_error"] = err.message
        return row
    for contender, times in zip(contenders, latencies, strict=True):
        side = row["sides"].setdefault(contender.label, {})
        side["p50_ms"] = statistics.median(times)
        side["runs"] = len(times)
    return row


def _cell(side: dict[str, Any], what: str) -> str:
    if "error" in side:
        return "error" if what != "drift" else f"error: {side['error'][:80]}"
    if what == "drift":
        return f"{side['max_abs']:.2g} / {side['cosine']:.10f}"
    return f"{side['p50_ms']:.3f}" if "p50_ms" in side else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minilm", type=Path, help="an exported all-MiniLM-L6-v2 .onnx")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of runs per side")
    args = parser.parse_args()
    began, load_before = time.time(), _load()
    work = Path(tempfile.mkdtemp(prefix="onnxgate-js-bench-"))
    cases: list[tuple[Path, dict[str, Any]]] = []
    skipped: list[str] = []
    for path in sorted(CORPUS.glob("*.onnx")):
        try:
            model = load_model(path)
            signature = Signature.from_graph(model.proto.graph)
            sample = synthetic_samples(signature, model=model.proto, dims={}, seed=0)[0]
            with open_runner(model) as here:
                here.infer(sample.feeds)
        except Exception as err:  # a corpus model Python's ONNX Runtime cannot run
            skipped.append(f"{path.name}: {type(err).__name__}: {' '.join(str(err).split())[:160]}")
            print(f"skipped {skipped[-1]}")
            continue
        if any(np.asarray(v).dtype.kind in "OUS" for v in sample.feeds.values()):
            skipped.append(f"{path.name}: string inputs (bench's feeds file holds no strings)")
            print(f"skipped {skipped[-1]}")
            continue
        cases.append((path, dict(sample.feeds)))
    minilm = args.minilm or _minilm.export(work)
    cases.append((minilm, _minilm.feeds(1, 128)))
    rows = []
    for path, feeds in cases:
        print(f"measuring {path.name}", flush=True)
        rows.append(measure(path, feeds, args.budget))
    document = {
        "isa": _isa(),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": _load(),
        "seconds": round(time.time() - began),
        "python_onnxruntime": runtime_version(),
        "budget_s": args.budget,
        "rows": rows,
        "skipped": skipped,
    }
    labels = [label for label, _, _ in SIDES]
    lines = [
        "# Python ONNX Runtime vs onnxruntime-web and onnxruntime-node",
        "",
        f"`python benchmarks/js_runtimes.py --budget {args.budget}`: ISA {document['isa']}, "
        f"{document['cpus']} CPUs, load average {load_before} before and {document['load_after']} "
        f"after ({document['seconds']} s). Python ONNX Runtime {runtime_version()}; "
        f"{WEB} in Chromium (wasm), {NODE}. Synthetic feeds (seed 0); MiniLM at batch 1, seq "
        "128. Drift: the worst float output's max abs / cosine against Python ONNX Runtime "
        "(1 thread) on the same feeds. p50: ms per run, all four sides timed in one contest "
        "(a worker process each, slices interleaved); the web's includes the page's await, and "
        "its clock (performance.now in a cross-origin isolated page) ticks in 5 µs.",
        "",
        *(
            [
                f"The load average stayed above the {document['cpus']} CPUs: other processes "
                "shared the cores, so the p50 figures (and any ratio between them, the 2-thread "
                "columns most) measure the machine as much as the runtimes; the drift figures "
                "do not depend on it.",
                "",
            ]
            if min(float(load_before.split()[0]), float(document["load_after"].split()[0]))
            > (document["cpus"] or 1)
            else []
        ),
        "| model | "
        + " | ".join(f"{label}: max abs / cosine" for label in labels[1:])
        + " | "
        + " | ".join(f"p50 {label}" for label in labels)
        + " |",
        "|---" * (len(labels) * 2) + "|",
    ]
    for row in rows:
        sides = row["sides"]
        drift = [_cell(sides.get(label, {"error": "not run"}), "drift") for label in labels[1:]]
        speed = [_cell(sides.get(label, {"error": "not run"}), "p50") for label in labels]
        lines.append(f"| {row['model']} | " + " | ".join(drift + speed) + " |")
    if skipped:
        lines += [
            "",
            "Not measured (Python's ONNX Runtime cannot run them here, or bench cannot feed them):",
            "",
        ]
        lines += [f"- {line}" for line in skipped]
    _minilm.write("js_runtimes", document, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
