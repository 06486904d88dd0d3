"""The real all-MiniLM-L6-v2: ONNX Runtime at every level, the reference evaluator and PyTorch agree."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxgate.compare import CompareConfig, compare
from onnxgate.settings import FeedSettings

pytestmark = pytest.mark.torch

SHAPE = {"batch": [3], "seq": [17]}
LEVELS = ("disable", "basic", "extended", "all")


@pytest.mark.parametrize("level", LEVELS)
def test_every_optimisation_level_agrees_with_the_reference_evaluator(minilm_onnx, level):
    report = compare(
        minilm_onnx,
        CompareConfig(
            against="reference", candidate=f"ort:{level}", feeds=FeedSettings(dims=SHAPE)
        ),
    )
    assert report.passed, [o.reason for o in report.outputs]
    by_name = {o.name: o for o in report.outputs}
    assert set(by_name) == {"last_hidden_state", "sentence_embedding"}
    for output in report.outputs:
        # the actual error is reported, and it is a float32 rounding error, not zero by accident
        assert 0 < output.max_abs < output.atol + output.rtol
        assert output.cosine > 0.999999
        assert output.elements > 0
    assert by_name["last_hidden_state"].shape == [3, 17, 384]
    # token ids were drawn below the vocabulary size, found from the embedding table
    assert report.value_ranges["input_ids"].startswith("[0, 30522)")


def test_onnx_runtime_agrees_with_the_pytorch_module(minilm_onnx):
    report = compare(
        minilm_onnx,
        CompareConfig(
            against="torch:minilm_factory:factory",
            feeds=FeedSettings(dims={"batch": [1, 7], "seq": [5, 33]}),
        ),
    )
    assert report.passed, [o.reason for o in report.outputs]
    assert len(report.samples) == 4
    assert {tuple(s.shapes["input_ids"]) for s in report.samples} == {
        (1, 5),
        (1, 33),
        (7, 5),
        (7, 33),
    }
    embedding = next(o for o in report.outputs if o.name == "sentence_embedding")
    assert 0 < embedding.max_abs < 1e-5


def _with_layernorm_epsilon(source: Path, target: Path, index: int) -> str:
    model = onnx.load(source)
    norms = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    node = norms[index]
    for attribute in node.attribute:
        if attribute.name == "epsilon":
            attribute.f = 0.5
            break
    else:
        node.attribute.append(onnx.helper.make_attribute("epsilon", 0.5))
    onnx.save(model, target)
    return node.name


def test_an_attribute_fault_in_a_real_model_is_localised(minilm_onnx, tmp_path):
    faulty = tmp_path / "faulty.onnx"
    changed = _with_layernorm_epsilon(minilm_onnx, faulty, index=5)
    report = compare(
        faulty,
        CompareConfig(
            against=str(minilm_onnx),
            localize=True,
            feeds=FeedSettings(dims={"batch": [2], "seq": [9]}),
        ),
    )
    assert not report.passed
    divergence = report.first_divergence
    assert divergence is not None and divergence.found
    assert divergence.node == changed
    assert divergence.op_type == "LayerNormalization"
    assert all(t.agrees for t in divergence.inputs if not t.initializer)
    assert not all(t.agrees for t in divergence.outputs)
    assert divergence.chain, "the nodes after the fault disagree too"
    assert "exposed" in divergence.method
