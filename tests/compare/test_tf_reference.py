"""`compare --against tf:DIR`: TensorFlow as the reference, with figures and localisation."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from onnxgate.cli import app

pytestmark = pytest.mark.slow
BIAS = "StatefulPartitionedCall/add/ReadVariableOp:0"


def run_json(*args: str):
    result = CliRunner().invoke(app, ["compare", *args, "--format", "json"])
    return result, json.loads(result.stdout)


def test_a_converted_saved_model_agrees_with_tensorflow(tf_reference_models):
    result, report = run_json(
        str(tf_reference_models / "sm.onnx"), "--against", f"tf:{tf_reference_models / 'sm'}"
    )
    assert result.exit_code == 0, result.stdout
    (output,) = report["outputs"]
    assert output["name"] == "logits" and output["passed"]
    assert output["max_abs"] < 1e-5 and output["mismatches"] == 0
    assert report["ran"]["reference"]["runtime"] == "tensorflow"


def test_a_planted_weight_change_is_localized_to_its_node_by_name(tf_reference_models, tmp_path):
    proto = onnx.load(tf_reference_models / "sm.onnx")
    for tensor in proto.graph.initializer:
        if tensor.name == BIAS:
            changed = numpy_helper.to_array(tensor).copy()
            changed[0] += 1.0
            tensor.CopyFrom(numpy_helper.from_array(changed, BIAS))
    planted = tmp_path / "planted.onnx"
    onnx.save(proto, planted)
    result, report = run_json(
        str(planted),
        "--against",
        f"tf:{tf_reference_models / 'sm'}",
        "--localize",
        "--dim",
        "unk__6=5",
    )
    assert result.exit_code == 1, result.stdout
    found = report["first_divergence"]
    assert found["found"] and found["node"] == "StatefulPartitionedCall/add"
    assert "tf2onnx" in found["method"]
    inputs = {t["name"]: t for t in found["inputs"]}
    assert inputs["StatefulPartitionedCall/MatMul:0"]["agrees"]
    assert inputs[BIAS]["initializer"] and not inputs[BIAS]["agrees"]
    assert found["replay"]["verdict"] == "differs on identical inputs"
    assert found["note"].startswith(f"its weight(s) {BIAS} differ from the reference side's")
    assert found["chain"] == ["StatefulPartitionedCall/Relu", "StatefulPartitionedCall/MatMul_1"]


def test_a_channels_last_convolution_is_localized_with_its_kernel(tf_reference_models, tmp_path):
    # tf2onnx runs the convolutions channels-first under TensorFlow's channels-last names
    proto = onnx.load(tf_reference_models / "cnn.onnx")
    second = [n for n in proto.graph.node if n.op_type == "Conv"][1]
    kernel = next(t for t in proto.graph.initializer if t.name == second.input[1])
    changed = numpy_helper.to_array(kernel).copy()
    assert changed.shape == (4, 5, 3, 3)  # ONNX's (out, in, h, w); TensorFlow holds (h, w, in, out)
    changed[0, 0, 0, 0] += 0.5
    kernel.CopyFrom(numpy_helper.from_array(changed, kernel.name))
    onnx.save(proto, tmp_path / "planted.onnx")
    result, report = run_json(
        str(tmp_path / "planted.onnx"),
        "--against",
        f"tf:{tf_reference_models / 'cnn'}",
        "--localize",
    )
    assert result.exit_code == 1, result.stdout
    found = report["first_divergence"]
    assert found["node"] == second.name
    inputs = {t["name"]: t for t in found["inputs"]}
    assert inputs[second.input[0]]["agrees"]  # the first convolution's output, moved to NCHW
    assert inputs[kernel.name]["mismatches"] == 1 and inputs[kernel.name]["max_abs"] == 0.5
    assert found["replay"]["verdict"] == "differs on identical inputs"


def test_tensorflow_environment_that_cannot_start_is_exit_3(tf_reference_models, monkeypatch):
    import onnxgate.runners._tf as tf_runner

    monkeypatch.setattr(tf_runner, "tf_python", lambda *a, **k: Path("/nonexistent/python"))
    result, report = run_json(
        str(tf_reference_models / "sm.onnx"), "--against", f"tf:{tf_reference_models / 'sm'}"
    )
    assert result.exit_code == 3
    assert report["error"] == "runtime-env"
    assert "cannot start TensorFlow's environment (/nonexistent/python)" in report["message"]
