"""How often does `check` predict correctly whether ONNX Runtime loads a model?

For every node test case that `onnx.backend.test.case.node.collect_testcases()` builds, `check`
predicts "loads and has kernels" (`CheckReport.predicted_load`) against a target runtime; then
that runtime is asked to create a session for the same file. Prints agreement and the confusion
counts and writes them, with every disagreement, to benchmarks/results/.

    python benchmarks/check_prediction.py                       # the installed runtime
    python benchmarks/check_prediction.py onnxruntime==1.16.3   # an isolated older release
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx
from onnx.backend.test.case.node import collect_testcases

from onnxgate.check import check_model
from onnxgate.compat.runtime import runtime_profile, try_load

RESULTS = Path(__file__).with_name("results")
VERSION_LIMITS = {"VER001", "VER002", "VER003", "VER005", "VER006"}


def main(spec: str | None) -> dict:
    profile = runtime_profile(spec, progress=print)
    cases = collect_testcases(None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for index, case in enumerate(cases):
            path = Path(tmp) / f"{index:04d}.onnx"
            onnx.save_model(case.model, path)
            paths.append(path)
        start = time.perf_counter()
        predictions = []
        by_limits = []
        for path in paths:
            report = check_model(path, runtime=profile)
            blocking = [f.code for f in report.findings if f.blocks_load]
            predictions.append((report.predicted_load, blocking))
            by_limits.append(any(code in VERSION_LIMITS for code in blocking))
        check_seconds = time.perf_counter() - start
        actual = try_load(spec, paths)
    confusion: Counter[str] = Counter()
    for case, path, (predicted, codes) in zip(cases, paths, predictions, strict=True):
        error = actual[str(path)]
        loaded = error is None
        cell = ("pred_load" if predicted else "pred_fail") + ("_loaded" if loaded else "_failed")
        confusion[cell] += 1
        if predicted != loaded:
            rows.append(
                {
                    "case": case.name,
                    "predicted_load": predicted,
                    "codes": codes,
                    "runtime_error": error,
                }
            )
    total = len(cases)
    agree = confusion["pred_load_loaded"] + confusion["pred_fail_failed"]
    # Cases a version limit decides (IR or opset beyond the runtime) are easy; report the rest too.
    within = [
        (predicted == (actual[str(path)] is None))
        for path, (predicted, _), limited in zip(paths, predictions, by_limits, strict=True)
        if not limited
    ]
    summary = {
        "runtime": profile.label,
        "onnx": onnx.__version__,
        "cases": total,
        "agreement": round(agree / total, 4),
        "confusion": dict(confusion),
        "within_version_limits": {"cases": len(within), "agree": sum(within)},
        "check_seconds_total": round(check_seconds, 1),
        "disagreements": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"check_prediction_{profile.version}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{profile.label}: {agree}/{total} agree ({100 * agree / total:.2f}%), {dict(confusion)}")
    print(
        f"within the runtime's version limits: {sum(within)}/{len(within)} agree ({100 * sum(within) / len(within):.2f}%)"
    )
    print(f"check took {check_seconds:.1f} s for {total} cases; details in {out}")
    return summary


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
