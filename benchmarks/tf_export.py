"""``onnxgate export tf``/``export keras`` on the test models: which path wins, by how much.

``PYTHONPATH=src python benchmarks/tf_export.py`` builds the TensorFlow export tests' models
(tests/tf_models.py: a CNN, an LSTM over a dynamic sequence, MultiHeadAttention, a subclassed
custom layer, a tf.Module SavedModel) in TensorFlow's isolated environment, exports each with
every conversion path that applies, and writes ``benchmarks/results/tf_export.md`` and
``.json``: the path chosen, the opset, the chosen file's max abs error against TensorFlow at each
parity shape (read back from its golden samples, TensorFlow's outputs), every path's overall max
abs, node count and conversion time, and the wall time of the whole export (TensorFlow's import included).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from onnxgate.contract import load_contract, read_golden
from onnxgate.export import TfExportConfig, export_tf
from onnxgate.model import load_model
from onnxgate.runners import open_runner, tf_python

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
MODELS = {
    "cnn.keras": {},
    "lstm.keras": {"dynamic": ["series:1=seq"]},
    "mha.keras": {},
    "custom.keras": {"custom_objects": (TESTS / "tf_layers.py",)},
    "scorer": {},
}


def _machine() -> str:
    flags = set(
        re.findall(r"\b(avx2|avx512f|avx512_vnni|amx_tile)\b", Path("/proc/cpuinfo").read_text())
    )
    load = os.getloadavg()
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, ISA "
        f"{', '.join(sorted(flags)) or 'none of avx2/avx512'}; load {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} at the start"
    )


def _per_shape(out: Path) -> dict[str, float]:
    """The written model's max abs error against TensorFlow's golden outputs, by sample."""
    contract = load_contract(out)
    found = {}
    with open_runner(load_model(out)) as runner:
        for sample, expected in read_golden(contract, out):
            got = runner.infer(sample.feeds).outputs
            found[sample.label] = max(
                float(np.max(np.abs(got[n].astype(np.float64) - expected[n].astype(np.float64))))
                if expected[n].size
                else 0.0
                for n in expected
            )
    return found


def main() -> None:
    started = _machine()
    work = Path(tempfile.mkdtemp(prefix="onnxgate-tf-bench-"))
    python = tf_python()
    subprocess.run([str(python), str(TESTS / "tf_models.py"), str(work)], check=True)
    rows = []
    for name, options in MODELS.items():
        out = work / f"{name.split('.')[0]}.onnx"
        began = time.perf_counter()
        report = export_tf(work / name, TfExportConfig(out=out, **options))
        seconds = time.perf_counter() - began
        rows.append(
            {
                "model": name,
                "passed": report.passed,
                "chosen": next(c.path for c in report.candidates if c.chosen),
                "opset": report.opset,
                "per_shape": _per_shape(out) if report.passed else {},
                "candidates": [c.model_dump() for c in report.candidates],
                "seconds": round(seconds, 1),
            }
        )
        print(name, rows[-1]["chosen"], rows[-1]["seconds"], file=sys.stderr)
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "tf_export.json").write_text(
        json.dumps({"machine": started, "rows": rows}, indent=1)
    )
    lines = [
        "# export tf / export keras",
        "",
        f"`PYTHONPATH=src python benchmarks/tf_export.py`; {started}; tensorflow-cpu 2.21.0, "
        "tf2onnx 1.17.0, Keras 3.15.1, onnxruntime as installed.",
        "",
        "| model | chosen | opset | max abs at each shape (chosen) | every path: max abs, nodes, "
        "conversion s | export s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        shapes = "; ".join(f"{k}: {v:.2g}" for k, v in r["per_shape"].items())
        paths = "; ".join(
            f"{c['path']}: {c['max_abs']:.2g}, {c['nodes']}, {c['seconds']:.1f}"
            if c["error"] is None
            else f"{c['path']}: failed"
            for c in r["candidates"]
        )
        lines.append(
            f"| {r['model']} | {r['chosen']} | {r['opset']} | {shapes} | {paths} | {r['seconds']} |"
        )
    (results / "tf_export.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
