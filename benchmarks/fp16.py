"""fp16 on all-MiniLM-L6-v2 and two corpus CNNs: drift, size, speed on this CPU, kept in fp32.

    PYTHONPATH=src python benchmarks/fp16.py [--budget 3] [--tight]

Each model goes through ``onnxgate quantize MODEL --to fp16`` (a process of its own), which
judges the fp16 model on held-apart data and times it against the float32 model with the speed
code int8 uses (``quantize._speed``: each model in a worker process of its own, interleaved
slices, medians, a 90% bootstrap interval of the ratio). Drift (max abs, cosine) is measured here
on the same evaluation data, with ONNX Runtime's CPU provider. ``--tight`` also runs the CNNs
with a budget the all-fp16 model misses, so the exclusion search keeps nodes in fp32.

Data: MiniLM on the 32 held-apart sentences (``onnxgate.examples.minilm:eval_feeds``, 32 x 128);
the CNNs on 8 crops of scikit-learn's two sample photos (china.jpg, flower.jpg), resized to the
model's input by nearest neighbour. Writes ``results/fp16.json`` and ``results/fp16.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _minilm import RESULTS, export, write  # noqa: E402

CACHE = Path.home() / ".cache" / "onnxgate-bench" / "fp16"
CORPUS = Path(
    os.environ.get("ONNXGATE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus")
)
CNNS = {
    # name: (file, [C, H, W], how pixels in [0, 255] become the input)
    "ultraface_rfb320": ("ultraface_rfb320.onnx", (3, 240, 320), "(x - 127) / 128"),
    "FastestDet": ("FastestDet.onnx", (3, 352, 352), "x / 255"),
}


def _photos(shape: tuple[int, int, int], scale: str, count: int = 8) -> np.ndarray:
    """``count`` crops of the two sample photos, [count, C, H, W] float32."""
    from sklearn.datasets import load_sample_images

    _, height, width = shape
    out = []
    for index in range(count):
        image = load_sample_images().images[index % 2].astype(np.float32)  # [427, 640, 3]
        rows, cols = image.shape[:2]
        top, left = (index // 2) * 30, (index // 2) * 60
        crop = image[top : rows - (3 - index // 2) * 30, left : cols - (3 - index // 2) * 60]
        ys = np.linspace(0, crop.shape[0] - 1, height).astype(int)
        xs = np.linspace(0, crop.shape[1] - 1, width).astype(int)
        resized = crop[ys][:, xs].transpose(2, 0, 1)
        out.append(eval(scale, {"x": resized}))  # noqa: S307  (the two fixed formulas above)
    return np.stack(out).astype(np.float32)


def _cpu() -> dict[str, str]:
    flags = open("/proc/cpuinfo").read()  # noqa: SIM115
    model = re.search(r"model name\s*:\s*(.*)", flags)
    isa = sorted(set(re.findall(r"avx512_vnni|amx\w*|avx512_fp16|avx512_bf16|avx2", flags)))
    return {
        "cpu": model.group(1) if model else platform.processor(),
        "isa": " ".join(isa),
        "cores": str(os.cpu_count()),
    }


def _load() -> str:
    return open("/proc/loadavg").read().split(" ", 3)[:3].__str__()  # noqa: SIM115


def _quantize(model: Path, out: Path, evaluation: str, *extra: str) -> dict:
    command = [sys.executable, "-m", "onnxgate", "quantize", str(model), "--to", "fp16"]
    command += ["-o", str(out), "--eval", evaluation, "--format", "json", *extra]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"quantize failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _drift(model: Path, converted: Path, feeds: list[dict[str, np.ndarray]]) -> dict:
    """Max abs and cosines of every float output, fp16 against fp32, over all samples."""
    import onnxruntime as ort

    sessions = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (model, converted)
    ]
    names = [o.name for o in sessions[0].get_outputs()]
    pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {n: [] for n in names}
    for sample in feeds:
        ref, got = (dict(zip(names, s.run(names, sample), strict=True)) for s in sessions)
        for name in names:
            pairs[name].append((ref[name], got[name]))
    result = {}
    for name, items in pairs.items():
        a = np.concatenate([r.reshape(r.shape[0], -1) for r, _ in items]).astype(np.float64)
        b = np.concatenate([g.reshape(g.shape[0], -1) for _, g in items]).astype(np.float64)
        rows = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)
        result[name] = {
            "max_abs": float(np.abs(a - b).max()),
            "mean_row_cosine": float(rows.mean()),
            "min_row_cosine": float(rows.min()),
            "dtype": str(items[0][1].dtype),
        }
    return result


def _row(name: str, model: Path, report: dict, drift: dict, label: str) -> dict:
    return {
        "model": name,
        "run": label,
        "passed": report["passed"],
        "size_fp32_mb": report["size_before"] / 1e6,
        "size_fp16_mb": (report["size_after"] or 0) / 1e6,
        "size_ratio": report.get("size_ratio"),
        "latency": report["latency"],
        "speed_verdict": report["speed"].get("verdict"),
        "kept_in_fp32": [f"{n['node']} ({n['op_type']})" for n in report["excluded"]],
        "attempts": len(report["attempts"]),
        "gate": [{k: g[k] for k in ("output", "rule", "value", "passed")} for g in report["gate"]],
        "drift": drift,
        "notices": report["notices"],
        "reason": report.get("reason"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per model and shape")
    parser.add_argument("--tight", action="store_true", help="also a budget the CNNs miss")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite results/fp16.md from results/fp16.json"
    )
    args = parser.parse_args()
    if args.render:
        document = json.loads((RESULTS / "fp16.json").read_text())
        write("fp16", document, _markdown(document))
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.time()
    document: dict = {"machine": _cpu(), "load_before": _load(), "rows": []}
    import onnxruntime

    document["onnxruntime"] = onnxruntime.__version__
    bench = ["--bench-budget", str(args.budget)]

    from onnxgate.examples.minilm import eval_feeds

    minilm = export(CACHE)
    report = _quantize(
        minilm,
        CACHE / "minilm.fp16.onnx",
        "onnxgate.examples.minilm:eval_feeds",
        *bench,
        "--bench-batch",
        "1,8",
    )
    feeds = list(eval_feeds())
    drift = _drift(minilm, CACHE / "minilm.fp16.onnx", feeds) if report["passed"] else {}
    document["rows"].append(_row("all-MiniLM-L6-v2", minilm, report, drift, "max_drop 0.01"))

    for name, (file, shape, scale) in CNNS.items():
        model = CORPUS / file
        input_name = onnx.load(str(model), load_external_data=False).graph.input[0].name
        images = _photos(shape, scale)
        evaluation = CACHE / f"{name}.eval"  # one sample per file: the input's batch is fixed
        evaluation.mkdir(exist_ok=True)
        feeds = [{input_name: images[i : i + 1]} for i in range(len(images))]
        for index, sample in enumerate(feeds):
            np.savez(evaluation / f"photo{index}.npz", **sample)
        out = CACHE / f"{name}.fp16.onnx"
        report = _quantize(model, out, str(evaluation), *bench)
        drift = _drift(model, out, feeds) if report["passed"] else {}
        document["rows"].append(_row(name, model, report, drift, "max_drop 0.01"))
        if args.tight:
            worst = max(1 - g["value"] for g in report["gate"] if g["value"] is not None)
            tight = f"{max(worst / 2, 1e-9):.2g}"
            out = CACHE / f"{name}.fp16.tight.onnx"
            report = _quantize(model, out, str(evaluation), "--no-bench", "--max-drop", tight)
            drift = _drift(model, out, feeds) if report["passed"] else {}
            document["rows"].append(_row(name, model, report, drift, f"max_drop {tight}"))
    document["load_after"] = _load()
    document["seconds"] = round(time.time() - started)
    write("fp16", document, _markdown(document))


def _markdown(document: dict) -> str:
    machine = document["machine"]
    lines = [
        "# fp16 on this CPU: drift, size, speed, what stayed fp32",
        "",
        f"`PYTHONPATH=src python benchmarks/fp16.py --tight` ({document['seconds']} s); "
        f"{machine['cpu']}, {machine['cores']} vCPUs, ISA: {machine['isa']}; onnxruntime "
        f"{document['onnxruntime']}; load average before {document['load_before']}, after "
        f"{document['load_after']} (a shared machine: read ratios, not absolute times).",
        "",
        "| model | budget | kept in fp32 | output | max abs | mean row cosine | size fp32 → fp16 "
        "| p50 fp32 → fp16 (ms) | fp32/fp16 (90% interval) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = {r["verdict"] for row in document["rows"] for r in row["latency"]}
    notes = [
        "",
        "fp32/fp16 is the fp32 median over the fp16 median, from `quantize`'s timing (each model "
        "in a worker process of its own, interleaved slices, 90% bootstrap interval): below 1 "
        "fp16 is slower. ",
    ]
    if "inconclusive" in verdicts:
        notes[-1] += (
            "*inconclusive*: other processes loaded the machine while it timed, so `quantize` "
            "proves neither slower nor faster (it says so and does not judge); the medians are "
            "shown as measured. Drift and size do not depend on the load."
        )
    for row in document["rows"]:
        size = (
            f"{row['size_fp32_mb']:.1f} → {row['size_fp16_mb']:.1f} MB (×{row['size_ratio']:.2f})"
        )
        speed = "<br>".join(
            f"{_dims(r['dims'])}: {r['float_ms']:.3g} → {r['quantized_ms']:.3g}"
            for r in row["latency"]
        )
        ratio = "<br>".join(
            f"×{r['speedup']:.2f} ({r['interval'][0]:.2f}–{r['interval'][1]:.2f}), {r['verdict']}"
            for r in row["latency"]
        )
        kept = row["kept_in_fp32"]
        kept = (
            f"{len(kept)}: {', '.join(kept[:2])}{', ...' if len(kept) > 2 else ''}"
            if kept
            else "none"
        )
        if not row["passed"]:
            kept = f"FAIL: {row['reason']}"
        drifts = row["drift"].items() or [("-", {})]
        for index, (output, d) in enumerate(drifts):
            first = index == 0
            lines.append(
                f"| {row['model'] if first else ''} | {row['run'] if first else ''} "
                f"| {kept if first else ''} | {output} | {_num(d.get('max_abs'), '.3g')} "
                f"| {_num(d.get('mean_row_cosine'), '.7f')} | {size if first else ''} "
                f"| {speed if first else ''} | {ratio if first else ''} |"
            )
    lines += notes
    lines += ["", "Nodes kept in fp32 (the exclusion search, by measured drift):", ""]
    lines += [
        f"- {row['model']}, {row['run']}: {', '.join(row['kept_in_fp32'])}"
        for row in document["rows"]
        if row["kept_in_fp32"]
    ]
    lines += [
        "",
        "Ops ONNX Runtime's CPU provider ran in float32 between casts (no float16 kernel in its "
        "registry; `quantize`'s notice), so on this CPU the drift above is the rounding of "
        "weights and of tensors to float16, not float16 arithmetic; a GPU can drift more:",
        "",
    ]
    for row in document["rows"]:
        for notice in row["notices"]:
            found = re.search(r"no float16 kernel for (.*) and computes", notice)
            if found:
                lines.append(f"- {row['model']}, {row['run']}: {found.group(1)}")
    lines.append("")
    return "\n".join(lines)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _dims(dims: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items()) or "fixed"


if __name__ == "__main__":
    main()
