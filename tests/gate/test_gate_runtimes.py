"""The gate with ONNX Runtime's JavaScript packages as targets: verify's columns, bench per runtime.

Needs Node.js, npm and Chromium (skipped without them, except under CI, where it fails).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import CORPUS, ON_CI, needs_corpus
from onnxgate.gate import run_gate

MNIST = CORPUS / "mnist.onnx"
WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"
HAVE_JS = bool(shutil.which("node") and shutil.which("npm") and shutil.which("chromium"))


@pytest.mark.skipif(not HAVE_JS and not ON_CI, reason="Node.js, npm or Chromium is not installed")
@needs_corpus(MNIST)
def test_mnist_passes_a_gate_targeting_the_browser_and_node(tmp_path: Path) -> None:
    shutil.copyfile(MNIST, tmp_path / "mnist.onnx")
    path = tmp_path / "gate.toml"
    path.write_text(
        'version = 1\n[model]\nname = "mnist"\nsource = "mnist.onnx"\n'
        f'[targets]\nruntimes = ["installed", "{WEB}", "{NODE}"]\n'
        "[steps.tune]\nenabled = false\n[steps.bench]\nbudget = 0.2\n"
    )
    report = run_gate(path)
    steps = {s.name: s for s in report.steps}
    assert report.passed, [(s.name, s.status, s.reason) for s in report.steps]
    for name in ("check", "verify", "placement", "bench"):
        assert steps[name].status == "passed", name
    verify = steps["verify"]
    assert verify.figures[f"{WEB}.passed"] is True
    assert verify.figures[f"{NODE}.passed"] is True
    ran = {r["runtime"]: r["ran"]["settings"] for r in verify.report["results"]}
    assert ran[WEB]["backend"] == "wasm" and ran[NODE]["backend"] == "cpu"
    bench = steps["bench"]
    for runtime in (WEB, NODE):
        assert bench.figures[f"{runtime}.p50_ms"] > 0
        assert f"{runtime} p50" in bench.summary
    assert bench.report["runtimes"][WEB]["session"]["backend"] == "wasm"
    document = json.loads((Path(report.run_dir) / "report.json").read_text())
    assert f"{WEB}.p50_ms" in next(s for s in document["steps"] if s["name"] == "bench")["figures"]
    html = (Path(report.run_dir) / "report.html").read_text()
    assert "on the other target runtimes" in html and f"<strong>{NODE}</strong>" in html
