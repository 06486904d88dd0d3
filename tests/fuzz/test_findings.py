"""What the fuzzers found, each kept as the reproducer they wrote, so it stays found.

Every model here is a corpus model with the edits the fuzzer chose (shrunk by hypothesis), built
the way the saved ``reproduce.py`` builds it.
"""

from __future__ import annotations

import json

import onnx
import pytest
from google.protobuf import text_format
from typer.testing import CliRunner

from conftest import CORPUS
from onnxgate.cli import app

MNIST = CORPUS / "mnist.onnx"
pytestmark = pytest.mark.usefixtures("corpus")  # skipped without the corpus, failed under CI


def _calling_a_local_function(function: str) -> onnx.ModelProto:
    """mnist with its first node replaced by a call to a model-local function ``fz.F``."""
    model = onnx.load(MNIST)
    text_format.Parse(function, model.functions.add())
    text_format.Parse('domain: "fz" version: 1', model.opset_import.add())
    model.graph.node[0].op_type = "F"
    model.graph.node[0].domain = "fz"
    return model


RELU_BODY = 'node { op_type: "Relu" domain: "" input: "x" output: "y" }'


def _check(model: onnx.ModelProto, tmp_path) -> tuple[int, dict]:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(app, ["check", str(path), "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


def test_a_function_importing_an_opset_version_of_minus_two_to_the_63(tmp_path):
    """Was exit 4: ``TypeError: get_schema(): incompatible function arguments``."""
    model = _calling_a_local_function(
        f'name: "F" domain: "fz" input: "x" output: "y" {RELU_BODY} '
        'opset_import { domain: "" version: -9223372036854775808 } '
        'opset_import { domain: "fz" version: 1 }'
    )
    code, report = _check(model, tmp_path)
    assert code == 1 and report["findings"], report


def test_a_local_function_beside_training_info(tmp_path):
    """Was exit 4: ``KeyError: <object id>`` (a node looked up by ``id`` in another walk)."""
    model = _calling_a_local_function(
        f'name: "F" domain: "fz" input: "x" output: "y" {RELU_BODY} '
        'opset_import { domain: "" version: 1 } opset_import { domain: "fz" version: 1 }'
    )
    text_format.Parse('algorithm { name: "empty" }', model.training_info.add())
    code, report = _check(model, tmp_path)
    assert code == 1 and report["findings"], report


def test_inspect_prints_no_control_character_from_the_model(tmp_path):
    """Was: a producer or input name's ESC sequences reached the terminal as they were."""
    model = onnx.load(MNIST)
    model.producer_name = "\x1b]0;retitled\x1b\\\x1b[2Jcleared"
    model.graph.input[0].name = "in\x1b[31mred\u202e"
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0
    assert not [c for c in result.stdout if not c.isprintable() and c != "\n"]
    assert "\\x1b]0;retitled" in result.stdout and "in\\x1b[31mred\\u202e" in result.stdout
