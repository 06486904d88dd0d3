"""quantize with custom operator libraries: every session registers them (the float model's,
each candidate's, the timing workers'), the custom-domain nodes stay in float, the contract
records the libraries; static calibration, which ONNX Runtime's own session makes, refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from models import OPSET, model, value
from onnxgate._opslib import EXTENSIONS
from onnxgate.cli import app
from onnxgate.contract import SIDECAR

runner = CliRunner()


def _custom_mlp() -> onnx.ModelProto:
    """x[batch, 16] @ W1 -> onnxruntime-extensions' NegPos -> pos @ W2 -> y; neg out too."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "W2")
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
        helper.make_node(
            "NegPos", ["h"], ["neg", "pos"], name="split_signs", domain="ai.onnx.contrib"
        ),
        helper.make_node("MatMul", ["pos", "W2"], ["y"], name="mm2"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", 16))],
        [value("y", shape=("batch", 8)), value("neg", shape=("batch", 32))],
        initializers=[w1, w2],
        opsets={"": OPSET, "ai.onnx.contrib": 1},
    )


@pytest.fixture
def custom(tmp_path: Path) -> Path:
    path = tmp_path / "custom.onnx"
    onnx.save(_custom_mlp(), path)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "eval.npz", x=rng.standard_normal((32, 16)).astype(np.float32))
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((32, 16)).astype(np.float32))
    return path


def _quantize(model_path: Path, *extra: str):
    folder = model_path.parent
    args = ["quantize", str(model_path), "-o", str(folder / "q.onnx")]
    args += ["--eval", str(folder / "eval.npz"), "--no-bench", "--no-second-opinion"]
    return runner.invoke(app, [*args, *extra, "-f", "json"])


def test_dynamic_int8_registers_the_library_and_the_contract_records_it(custom):
    result = _quantize(custom, "--ops-library", EXTENSIONS)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert f"custom operator libraries: {EXTENSIONS}" in report["notices"]
    written = onnx.load(str(custom.parent / "q.onnx"))
    ops = [(n.domain, n.op_type) for n in written.graph.node]
    assert ("ai.onnx.contrib", "NegPos") in ops  # in float, as it was
    assert ("", "MatMulInteger") in ops
    recorded = SIDECAR.read(custom.parent / "q.onnx").requirements.ops_libraries
    assert [lib.name for lib in recorded] == [EXTENSIONS]


def test_without_the_library_the_float_model_cannot_run(custom):
    result = _quantize(custom)
    assert result.exit_code != 0
    assert "NegPos" in result.output
    assert not (custom.parent / "q.onnx").exists()


def test_the_parent_contracts_libraries_are_used_when_none_is_given(custom):
    init = runner.invoke(
        app,
        [
            "contract", "init", str(custom), "--reference", "ort", "--no-second-opinion",
            "--ops-library", EXTENSIONS,
        ],
    )  # fmt: skip
    assert init.exit_code == 0, init.output
    result = _quantize(custom)
    assert result.exit_code == 0, result.output
    recorded = SIDECAR.read(custom.parent / "q.onnx").requirements.ops_libraries
    assert [lib.name for lib in recorded] == [EXTENSIONS]


def test_static_calibration_with_a_library_is_refused_naming_it(custom):
    folder = custom.parent
    result = _quantize(
        custom, "--mode", "static", "--calibration", str(folder / "calib.npz"),
        "--ops-library", EXTENSIONS,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"static quantisation cannot register the custom operator library {EXTENSIONS}" in text
    assert "--mode dynamic" in text
    assert not (folder / "q.onnx").exists()
