"""`check`'s load predictions over the onnx node cases, pinned case by case.

An agreement rate hides a trade: one prediction fixed and another broken leave it unchanged, and a
floor of 98% lets ~28 regressions through. So the exact set of node cases where `check` and the
installed ONNX Runtime disagree is pinned in prediction_disagreements_<version>.json, with each
one's reason; any case that joins or leaves the set fails this test. The measurement is the one
benchmarks/check_prediction.py makes (one code path), and `--pin` there regenerates the file.
"""

from __future__ import annotations

import importlib.util
import json
import locale
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = (
    "If the change is intended, regenerate the pin with `python benchmarks/check_prediction.py "
    "--pin` and review its diff."
)


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "check_prediction", ROOT / "benchmarks" / "check_prediction.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_locale(name: str) -> bool:
    """Whether the C library can build locale ``name`` (StringNormalizer needs en_US.UTF-8)."""
    current = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, name)
    except locale.Error:
        return False
    finally:
        locale.setlocale(locale.LC_CTYPE, current)
    return True


def expected_disagreements(document: dict) -> set[tuple[str, bool]]:
    """The pinned (case, predicted_load) pairs that hold on this machine.

    A case that fails only because a locale is missing (StringNormalizer) is a fact about the
    machine, not the model: it is expected exactly when the locale is missing here.
    """
    return {
        (entry["case"], entry["predicted_load"])
        for entry in document["disagreements"]
        if "missing_locale" not in entry or not has_locale(entry["missing_locale"])
    }


def test_prediction_disagreements_are_exactly_the_pinned_ones(installed_profile):
    bench = _benchmark()
    version = installed_profile.version
    pin = bench.pin_path(version)
    pinned = sorted(p.name for p in pin.parent.glob("prediction_disagreements_*.json"))
    assert pin.is_file(), (
        f"no pinned disagreements for the installed onnxruntime {version} (pins exist for: "
        f"{', '.join(pinned) or 'none'}). Regenerate: python benchmarks/check_prediction.py --pin"
    )
    document = json.loads(pin.read_text())
    assert document["onnxruntime"] == version, f"{pin.name} was made for {document['onnxruntime']}"
    assert document["onnx"] == onnx.__version__, (
        f"{pin.name} was made with onnx {document['onnx']}, whose node cases differ from onnx "
        f"{onnx.__version__}'s. Regenerate: python benchmarks/check_prediction.py --pin"
    )
    summary = bench.measure(None, progress=lambda message: None)
    assert summary["cases"] == document["cases"]
    expected = expected_disagreements(document)
    actual = {(row["case"], row["predicted_load"]) for row in summary["disagreements"]}
    reasons = {row["case"]: row["reason"] for row in summary["disagreements"]}
    pinned_reasons = {entry["case"]: entry["reason"] for entry in document["disagreements"]}
    added = [f"  + {case}: {reasons[case]}" for case, _ in sorted(actual - expected)]
    removed = [f"  - {case} (was: {pinned_reasons[case]})" for case, _ in sorted(expected - actual)]
    assert not added and not removed, "\n".join(
        [
            f"check's load predictions over the onnx node cases changed against {pin.name} "
            f"({len(expected)} pinned, {len(actual)} now):",
            *(["new disagreements:", *added] if added else []),
            *(["no longer disagreements:", *removed] if removed else []),
            REGENERATE,
        ]
    )


def test_the_pin_holds_what_a_regeneration_writes():
    """The pinned file is sorted, one entry per case, each with a reason (as --pin writes it)."""
    bench = _benchmark()
    for path in sorted(bench.PINS.glob("prediction_disagreements_*.json")):
        document = json.loads(path.read_text())
        cases = [entry["case"] for entry in document["disagreements"]]
        assert cases == sorted(set(cases)), path.name
        assert all(entry["reason"] for entry in document["disagreements"]), path.name
        assert path == bench.pin_path(document["onnxruntime"])
