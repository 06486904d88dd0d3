"""``tools/output_identity.py``: its normalisation and its diff, without running onnxgate."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "output_identity", ROOT / "tools" / "output_identity.py"
)
identity = importlib.util.module_from_spec(_spec)
sys.modules["output_identity"] = identity  # dataclasses look their module up by name
_spec.loader.exec_module(identity)

WORK = "/tmp/onnxgate-identity-abc123"
CONTEXT = identity.Context(
    work=WORK, src="/trees/after/src", dates=("2026-11-27",), stamped=frozenset({"ab" * 32})
)


def _normaliser(*args: str, timed: bool = False) -> object:
    return identity.Normaliser(CONTEXT, identity.Command("x", args, timed=timed))


def test_timed_text_loses_its_figures_and_measured_verdicts_and_keeps_the_rest() -> None:
    text = (
        "shape     threads  runs    p50    p90  samples/s     cv\n"
        "batch=1      auto    20  0.004  0.007   214778.9  21.6%\n"
        "warning: UNRELIABLE: other processes took 80% of the 2 CPU(s)\n"
        "  pass  as given @ all  y: 0/117 outside, max |Δ| 7.18e-08\n"
        "onnxruntime 1.32.0, wrote " + WORK + "/m.onnx\n"
    )
    assert _normaliser("bench", timed=True).text(text) == (
        "shape threads runs p50 p90 samples/s cv\n"
        "batch=1 auto 20 # # # #%\n"
        " pass as given @ all y: 0/117 outside, max |Δ| 7.18e-08\n"
        "onnxruntime 1.32.0, wrote <work>/m.onnx\n"
    )
    # the same text from a command that times nothing keeps every figure and every space
    untimed = _normaliser("compare").text(text)
    assert "0.004  0.007" in untimed and "UNRELIABLE" in untimed and WORK not in untimed


def test_a_gate_summary_keeps_its_fixed_figures_and_loses_the_measured_ones() -> None:
    summary = (
        "p50 0.12 ms, p99 0.50 ms, 0.0 MB (timings unreliable); unreliable (other processes "
        "took 84% of the 2 CPU(s) while it was timed)"
    )
    assert (
        _normaliser("gate", timed=True).string(summary, in_json=True)
        == "p50 # ms, p99 # ms, 0.0 MB"
    )


def test_json_keeps_its_layout_and_replaces_measured_keys_only() -> None:
    document = {
        "results": [{"batch": 1, "runs": 20, "p50_ms": 0.004, "latencies_ms": [0.1, 0.2]}],
        "figures": {"size_mb": 0.001, "reliable": False, "unreliable": "busy"},
        "created": "2026-11-27T13:09:11+00:00",
        "model_sha256": "cd" * 32,
        "contract_sha256": "ab" * 32,
    }
    out = _normaliser("bench", timed=True).document(json.dumps(document, indent=2) + "\n")
    assert json.loads(out) == {
        "results": [{"batch": 1, "runs": 20, "p50_ms": "<measured>", "latencies_ms": "<measured>"}],
        "figures": {"size_mb": 0.001},
        "created": "<time>",
        "model_sha256": "cd" * 32,
        "contract_sha256": "<sha256 of a timestamped file>",
    }
    assert out == json.dumps(json.loads(out), indent=2) + "\n"
    # not the CLI's layout: compared as text instead
    assert _normaliser("bench").document(json.dumps(document) + "\n") is None


def test_a_prefix_of_a_timestamped_digest_is_replaced_and_other_digests_are_kept() -> None:
    text = "contract  c.json  abababababababab\nmodel  m.onnx  cdcdcdcdcdcdcdcd"
    assert identity.stamped_hashes(text, CONTEXT.stamped) == (
        "contract  c.json  <sha256 of a timestamped file>\nmodel  m.onnx  cdcdcdcdcdcdcdcd"
    )


def test_ranked_tables_are_compared_as_sets_of_rows() -> None:
    lines = ["op type  ms", "Conv  #", "Add  #", "", "node  ms", "b  #", "a  #", "", "after"]
    assert identity._sort_ranked(lines) == [
        "op type  ms",
        "Add  #",
        "Conv  #",
        "",
        "node  ms",
        "a  #",
        "b  #",
        "",
        "after",
    ]


def _capture(folder: Path, outputs: dict[str, str], skipped: dict[str, str] | None = None) -> Path:
    """A capture's folder with these output files, and these commands skipped."""
    folder.mkdir()
    for name, text in outputs.items():
        (folder / name).write_text(text)
    commands = {n: {"skipped": why} for n, why in (skipped or {}).items()}
    (folder / "manifest.json").write_text(json.dumps({"commands": commands}))
    return folder


def test_diff_names_each_command_that_differs_and_exits_1(tmp_path: Path, capsys) -> None:
    same = {"check.x.stdout": "PASS\n", "check.x.exit": "0\n", "inspect.y.stdout": "IR 3\n"}
    a = _capture(tmp_path / "a", same)
    b = _capture(tmp_path / "b", same)
    assert identity.diff(a, b) == 0
    assert "0 of 2 commands differ" in capsys.readouterr().out

    c = _capture(tmp_path / "c", {**same, "check.x.stdout": "PASS!\n", "gate.z.exit": "1\n"})
    assert identity.diff(a, c) == 1
    out = capsys.readouterr().out
    assert "=== check.x" in out and "-PASS" in out and "+PASS!" in out
    assert "=== gate.z" in out and "inspect.y" not in out
    assert "2 of 3 commands differ" in out

    d = _capture(tmp_path / "d", same, skipped={"profile.w": "missing: corpus/mnist.onnx"})
    assert identity.diff(a, d) == 1
    assert "skipped on one side only" in capsys.readouterr().out
