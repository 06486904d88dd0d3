"""Function bodies: built from the node's full types, refusals are findings, our bugs are exit 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from models import model, save, value
from onnxgate.check import check_model
from onnxgate.check._functions import NoBody, expand
from onnxgate.cli import app
from onnxgate.compat.kernels import onnx_schema
from onnxgate.compat.runtime import try_load
from onnxgate.errors import InternalError


def loads_here(path: Path) -> bool:
    return try_load(None, [path])[str(path)] is None


def _rope(shaped: bool):
    """RotaryEmbedding-23 in bfloat16: no kernel, so the runtime must inline its body."""
    bf16 = TensorProto.BFLOAT16
    shapes = [(1, 2, 3, 8), (1, 3, 4), (1, 3, 4), (1, 3)] if shaped else [None] * 4
    inputs = [
        value(name, elem, shape)
        for name, elem, shape in zip(
            ["X", "cos", "sin", "pos"], [bf16, bf16, bf16, TensorProto.INT64], shapes, strict=True
        )
    ]
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], name="rope")
    return model([node], inputs, [value("Y", bf16, (1, 2, 3, 8))], opsets={"": 23})


def _op(report, code):
    return [f for f in report.findings if f.code == code]


def test_a_body_the_builder_cannot_build_is_a_blocking_finding(tmp_path, installed_profile):
    """Without the input's rank onnx's builder (the runtime's too) builds nothing: no inlining."""
    path = save(_rope(shaped=False), tmp_path / "rope.onnx")
    report = check_model(path, profile=installed_profile)
    (op001,) = _op(report, "OP001")
    assert "function body cannot be built for this node" in op001.message
    assert "builds no body" in op001.message and "bfloat16 of unknown rank" in op001.message
    assert not _op(report, "OP005")
    assert report.predicted_load is False and loads_here(path) is False


def test_the_body_is_built_from_full_types_as_the_runtime_builds_it(tmp_path, installed_profile):
    """With shapes the body exists; it multiplies bfloat16 tensors, which have no kernel."""
    path = save(_rope(shaped=True), tmp_path / "rope.onnx")
    report = check_model(path, profile=installed_profile)
    (op001,) = _op(report, "OP001")
    assert "its function body cannot run: Mul-14" in op001.message
    assert report.predicted_load is False and loads_here(path) is False


def test_a_builder_exception_is_reported_with_its_words(tmp_path, installed_profile):
    body = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])],
        "f",
        [value("a", shape=None)],
        [value("b", shape=None)],
    )
    node = helper.make_node("SequenceMap", ["x"], ["y"], body=body, name="sm")
    out = helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None)
    path = save(model([node], [value("x")], [out], opsets={"": 17}), tmp_path / "seqmap.onnx")
    report = check_model(path, profile=installed_profile)
    (op001,) = _op(report, "OP001")
    assert (
        "onnx's function builder rejects it: Expected a sequence type for input 0" in op001.message
    )
    assert report.predicted_load is False and loads_here(path) is False


def test_expand_says_why_it_did_not_build_a_body():
    schema = onnx_schema("RotaryEmbedding", "ai.onnx", 23)
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"])
    unknown = expand(schema, node, [None, None, None, None], 23)
    assert unknown == NoBody("the type of input 'X' is not known here", refused=False)


def _castlike(tmp_path: Path) -> Path:
    """CastLike-19 has no kernel at all: check always expands it."""
    node = helper.make_node("CastLike", ["x", "t"], ["y"], name="c")
    inputs = [value("x"), value("t", TensorProto.FLOAT16)]
    proto = model([node], inputs, [value("y", TensorProto.FLOAT16)], opsets={"": 19})
    return save(proto, tmp_path / "castlike.onnx")


def _break_our_call(monkeypatch):
    """Pass get_schema() a domain of the wrong type, as a bug in onnxgate would."""
    monkeypatch.setattr("onnxgate.check._functions.proto_domain", lambda domain: None)


def test_a_failure_in_our_own_expansion_code_is_an_internal_error(
    tmp_path, monkeypatch, installed_profile
):
    path = _castlike(tmp_path)
    assert "OP005" in {f.code for f in check_model(path, profile=installed_profile).findings}
    _break_our_call(monkeypatch)
    with pytest.raises(InternalError) as caught:
        check_model(path, profile=installed_profile)
    message = caught.value.message
    assert "expanding CastLike-19 (node c)" in message and "TypeError" in message, message
    assert "incompatible function arguments" in message and "_functions.py:" in message


def test_check_exits_4_when_our_expansion_code_fails(tmp_path, monkeypatch):
    path = _castlike(tmp_path)
    _break_our_call(monkeypatch)
    result = CliRunner().invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 4, result.output
    assert json.loads(result.stdout)["error"] == "internal"
