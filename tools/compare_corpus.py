"""ONNX Runtime against the ONNX reference evaluator on every loadable real model.

Models: ../shared/corpus (or $ONNXGATE_CORPUS) and the onnx wheel's backend `light` models.
Feeds: seeded synthetic feeds (floats in [0, 1)). Prints a Markdown table and writes it, with the
full JSON reports, to benchmarks/results/compare_corpus.{md,json}.

    python tools/compare_corpus.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import onnx

from onnxgate.compare import CompareConfig, compare
from onnxgate.errors import GateError

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def models() -> list[Path]:
    return sorted(CORPUS.glob("*.onnx")) + sorted(LIGHT.glob("*.onnx"))


def main() -> int:
    rows, reports = [], {}
    for path in models():
        start = time.perf_counter()
        try:
            report = compare(path, CompareConfig(against="reference", localize=True))
        except GateError as err:
            rows.append((path.name, "not run", f"{type(err).__name__}: {err.message}", ""))
            continue
        elapsed = time.perf_counter() - start
        reports[path.name] = report.model_dump(mode="json")
        worst = max(report.outputs, key=lambda o: o.max_abs or 0.0)
        figures = f"max_abs {worst.max_abs:.3g}, max_rel {worst.max_rel or 0:.3g}, cosine {worst.cosine:.7f}"
        verdict = "pass" if report.passed else "FAIL"
        why = ""
        if not report.passed:
            failing = next(o for o in report.outputs if not o.passed)
            why = failing.reason or ""
            d = report.first_divergence
            if d and d.found:
                why += f"; first diverging node {d.node} ({d.op_type})"
            elif d:
                why += f"; {d.note}"
        rows.append((path.name, verdict, f"{figures} ({worst.name})", f"{why} [{elapsed:.1f} s]"))
    lines = ["| model | ORT vs reference | worst output | notes |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    table = "\n".join(lines)
    print(table)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_corpus.md").write_text(table + "\n")
    (out / "compare_corpus.json").write_text(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
