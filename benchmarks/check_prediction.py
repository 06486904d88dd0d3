"""How often does `check` predict correctly whether ONNX Runtime loads a model?

For every node test case that `onnx.backend.test.case.node.collect_testcases()` builds, `check`
predicts "loads and has kernels" (`CheckReport.predicted_load`) against a target runtime; then
that runtime is asked to create a session for the same file. Prints agreement and the confusion
counts and writes them, with every disagreement, to benchmarks/results/.

    python benchmarks/check_prediction.py                       # the installed runtime
    python benchmarks/check_prediction.py onnxruntime==1.16.3   # an isolated older release
    python benchmarks/check_prediction.py --pin                 # also rewrite the test's pin

`--pin` (installed runtime only) writes tests/check/prediction_disagreements_<version>.json, the
exact set of disagreements that tests/check/test_prediction.py holds `check` to: run it after a
change that moves a prediction on purpose, and review the diff.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx.backend.test.case.node import collect_testcases

from onnxgate.check import check_model
from onnxgate.compat.runtime import runtime_profile, try_load

RESULTS = Path(__file__).with_name("results")
PINS = Path(__file__).resolve().parents[1] / "tests" / "check"
VERSION_LIMITS = {"VER001", "VER002", "VER003", "VER005", "VER006"}
_LOCALE = re.compile(r"Failed to construct locale with name:([^:\s]+)")


def pin_path(version: str) -> Path:
    """The test's pinned disagreements for ONNX Runtime ``version``."""
    return PINS / f"prediction_disagreements_{version}.json"


def _reason(predicted: bool, blocking: list[str], error: str | None, runtime: str) -> str:
    if predicted:
        return f"check predicts a load; {runtime} refuses: {' '.join((error or '').split())[:300]}"
    return f"check predicts a refusal ({'; '.join(blocking)[:300]}); {runtime} loads it"


def measure(spec: str | None, *, progress: Callable[[str], None] = print) -> dict:
    """Predict and load every node case against ``spec``; the summary with every disagreement."""
    profile = runtime_profile(spec, progress=progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators divide by zero on purpose
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
            report = check_model(path, profile=profile)
            blocking = [f for f in report.findings if f.blocks_load]
            predictions.append((report.predicted_load, blocking))
            by_limits.append(any(f.code in VERSION_LIMITS for f in blocking))
        check_seconds = time.perf_counter() - start
        actual = try_load(spec, paths)
    confusion: Counter[str] = Counter()
    for case, path, (predicted, blocking) in zip(cases, paths, predictions, strict=True):
        error = actual[str(path)]
        loaded = error is None
        cell = ("pred_load" if predicted else "pred_fail") + ("_loaded" if loaded else "_failed")
        confusion[cell] += 1
        if predicted != loaded:
            row = {
                "case": case.name,
                "predicted_load": predicted,
                "codes": [f.code for f in blocking],
                "runtime_error": error,
                "reason": _reason(
                    predicted, [f"{f.code}: {f.message}" for f in blocking], error, profile.label
                ),
            }
            locale = _LOCALE.search(error or "")
            if locale:
                row["missing_locale"] = locale.group(1)
            rows.append(row)
    total = len(cases)
    agree = confusion["pred_load_loaded"] + confusion["pred_fail_failed"]
    # Cases a version limit decides (IR or opset beyond the runtime) are easy; report the rest too.
    within = [
        (predicted == (actual[str(path)] is None))
        for path, (predicted, _), limited in zip(paths, predictions, by_limits, strict=True)
        if not limited
    ]
    return {
        "runtime": profile.label,
        "version": profile.version,
        "onnx": onnx.__version__,
        "cases": total,
        "agreement": round(agree / total, 4),
        "confusion": dict(confusion),
        "within_version_limits": {"cases": len(within), "agree": sum(within)},
        "check_seconds_total": round(check_seconds, 1),
        "disagreements": sorted(rows, key=lambda row: row["case"]),
    }


def pin_document(summary: dict) -> dict:
    """What tests/check/test_prediction.py compares against: the disagreements and their reasons."""
    return {
        "onnxruntime": summary["version"],
        "onnx": summary["onnx"],
        "cases": summary["cases"],
        "regenerate": "python benchmarks/check_prediction.py --pin",
        "disagreements": [
            {
                "case": row["case"],
                "predicted_load": row["predicted_load"],
                "reason": row["reason"],
                **({"missing_locale": row["missing_locale"]} if "missing_locale" in row else {}),
            }
            for row in summary["disagreements"]
        ],
    }


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runtime", nargs="?", help="onnxruntime==X.Y.Z (default: installed)")
    parser.add_argument("--pin", action="store_true", help="rewrite the test's pinned set")
    args = parser.parse_args(argv)
    if args.pin and args.runtime:
        parser.error("--pin records the installed runtime; leave out the runtime argument")
    summary = measure(args.runtime)
    total, confusion = summary["cases"], summary["confusion"]
    agree = confusion.get("pred_load_loaded", 0) + confusion.get("pred_fail_failed", 0)
    within = summary["within_version_limits"]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"check_prediction_{summary['version']}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{summary['runtime']}: {agree}/{total} agree ({100 * agree / total:.2f}%), {summary['confusion']}"
    )
    print(
        f"within the runtime's version limits: {within['agree']}/{within['cases']} agree "
        f"({100 * within['agree'] / within['cases']:.2f}%)"
    )
    print(f"check took {summary['check_seconds_total']:.1f} s for {total} cases; details in {out}")
    if args.pin:
        pin = pin_path(summary["version"])
        pin.write_text(json.dumps(pin_document(summary), indent=1) + "\n")
        print(f"pinned {len(summary['disagreements'])} disagreement(s) in {pin}")
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
