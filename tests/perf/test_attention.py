"""Attention fusion fires, and keeps the answers, on the transformer families exporters write today.

Each family is built from its transformers config with random weights (two layers, width 64,
four heads: no download) and exported with ``torch.onnx``. Then every fused variant must
replace each layer's attention with one ONNX Runtime attention op, leave no Softmax behind, and
agree with the export on shapes it was not exported at (padding rows included).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxgate.perf._attention import fuse_attention
from onnxgate.perf._fusion import AS_GIVEN, graph_candidates

pytestmark = pytest.mark.torch

LAYERS = 2
WIDTH, HEADS, VOCAB = 64, 4, 500


def _family(name: str, attention: str):
    import transformers as tf

    if name == "bert":
        config = tf.BertConfig(
            hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=2 * WIDTH, vocab_size=VOCAB,
        )  # fmt: skip
        return tf.BertModel(config, add_pooling_layer=False)
    if name == "roberta":
        config = tf.RobertaConfig(
            hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=2 * WIDTH, vocab_size=VOCAB,
        )  # fmt: skip
        return tf.RobertaModel(config, add_pooling_layer=False)
    if name == "distilbert":
        config = tf.DistilBertConfig(
            dim=WIDTH, n_layers=LAYERS, n_heads=HEADS, hidden_dim=2 * WIDTH, vocab_size=VOCAB
        )
        return tf.DistilBertModel(config)
    if name == "vit":
        config = tf.ViTConfig(
            hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=2 * WIDTH, image_size=32, patch_size=8,
        )  # fmt: skip
        return tf.ViTModel(config, add_pooling_layer=False)
    assert name == "gpt2"
    config = tf.GPT2Config(
        n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB, n_positions=64,
        use_cache=False,
    )  # fmt: skip
    return tf.GPT2Model(config)


def _export(path, name: str, *, attention: str = "eager", masked: bool = True, dynamo=True):
    """Export family ``name`` to ``path``; returns the input names."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: TID251  (exporting test models)

    torch.manual_seed(0)
    model = _family(name, attention)
    model.config._attn_implementation = attention
    model.eval()

    class Pixels(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values).last_hidden_state

    class Tokens(Pixels):
        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class TokensOnly(Pixels):
        def forward(self, input_ids):
            return self.model(input_ids=input_ids).last_hidden_state

    if name == "vit":
        wrapper, example = Pixels(), {"pixel_values": torch.randn(2, 3, 32, 32)}
        axes = {"pixel_values": {0: "batch"}}
    else:
        example = {"input_ids": torch.randint(0, VOCAB, (2, 16))}
        if masked:
            example["attention_mask"] = torch.ones(2, 16, dtype=torch.int64)
        wrapper = Tokens() if masked else TokensOnly()
        axes = {key: {0: "batch", 1: "seq"} for key in example}
    names = list(example)
    if dynamo:
        dims = {
            key: {axis: torch.export.Dim.DYNAMIC for axis in value} for key, value in axes.items()
        }
        torch.onnx.export(
            wrapper, tuple(example.values()), path, input_names=names, output_names=["out"],
            dynamic_shapes=dims, dynamo=True, opset_version=18, external_data=False,
        )  # fmt: skip
    else:
        torch.onnx.export(
            wrapper, tuple(example.values()), path, input_names=names, output_names=["out"],
            dynamic_axes=axes, dynamo=False, opset_version=17,
        )  # fmt: skip
    return names


def _feeds(names, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + seq)
    feeds = {}
    for name in names:
        if name == "pixel_values":
            feeds[name] = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        elif name == "attention_mask":
            mask = np.ones((batch, seq), np.int64)
            mask[1:, seq - seq // 3 :] = 0  # rows after the first end in padding
            feeds[name] = mask
        else:
            feeds[name] = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
    return feeds


def _run(model: onnx.ModelProto, feeds) -> np.ndarray:
    import onnxruntime as ort  # noqa: TID251  (the engine under test)

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def _assert_fused_and_equal(model: onnx.ModelProto, names) -> None:
    given = model.SerializeToString()
    for packed in (True, False):
        fusion = fuse_attention(model, packed=packed)
        assert model.SerializeToString() == given  # the caller's model is never rewritten
        ops = Counter(node.op_type for node in fusion.proto.graph.node)
        assert fusion.attention == LAYERS, (packed, fusion.counts, ops)
        assert ops["Softmax"] == 0 and ops["IsNaN"] == 0, ops
        if not packed:
            assert ops["Attention"] == 0
        for batch, seq in ((1, 5), (3, 24)):
            feeds = _feeds(names, batch, seq)
            expected, got = _run(model, feeds), _run(fusion.proto, feeds)
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)


FAMILIES = [
    pytest.param("bert", "eager", True, True, id="bert"),
    pytest.param("roberta", "eager", True, True, id="roberta"),
    pytest.param("distilbert", "eager", True, True, id="distilbert"),
    pytest.param("vit", "eager", False, True, id="vit"),
    pytest.param("gpt2", "eager", True, True, id="gpt2-causal"),
    # PyTorch's fused attention decomposes to the Where(IsNaN(Softmax)) guard
    pytest.param("bert", "sdpa", True, True, id="bert-sdpa"),
    pytest.param("gpt2", "sdpa", False, True, id="gpt2-sdpa-no-mask"),
    # the TorchScript exporter reshapes to [batch, seq, -1, head]
    pytest.param("bert", "eager", True, False, id="bert-torchscript"),
    pytest.param("distilbert", "sdpa", False, False, id="distilbert-torchscript-sdpa-no-mask"),
]


@pytest.mark.parametrize(("name", "attention", "masked", "dynamo"), FAMILIES)
def test_attention_fuses_and_keeps_the_answers(tmp_path, name, attention, masked, dynamo):
    pytest.importorskip("transformers")
    path = tmp_path / f"{name}.onnx"
    names = _export(path, name, attention=attention, masked=masked, dynamo=dynamo)
    model = onnx.load(path)
    assert Counter(n.op_type for n in model.graph.node)["Softmax"] == LAYERS
    _assert_fused_and_equal(model, names)


def test_the_fused_graphs_are_tune_candidates(tmp_path):
    pytest.importorskip("transformers")
    from onnxgate.model import load_model

    path = tmp_path / "gpt2.onnx"
    _export(path, "gpt2")
    notes: list[str] = []
    graphs = {g.label: g for g in graph_candidates(load_model(path), notes=notes)}
    assert AS_GIVEN in graphs and "attention-fusion" in graphs
    assert "2 MultiHeadAttention" in graphs["attention-fusion"].note
    # GPT-2 has no packed form here: the multi-head variant is the same graph, and says so
    assert "attention-fusion-mha" not in graphs
    assert any(n.startswith("attention-fusion-mha: fuses nothing beyond") for n in notes)


def test_a_graph_without_attention_gives_no_candidate(tmp_path):
    from onnxgate.model import load_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "g", [x], [y])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(proto, tmp_path / "softmax.onnx")
    notes: list[str] = []
    assert [
        g.label for g in graph_candidates(load_model(tmp_path / "softmax.onnx"), notes=notes)
    ] == [AS_GIVEN]
    assert notes == ["attention-fusion: no attention pattern matched; not tried"]


def test_a_transposed_gemm_between_reshapes_is_left_alone():
    """FlatGemm rewrites only what it can prove: a Gemm with transB is another computation."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 3])
    weight = onnx.numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    flat = onnx.numpy_helper.from_array(np.array([-1, 4], np.int64), "flat")
    back = onnx.numpy_helper.from_array(np.array([2, 3, 3], np.int64), "back")
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("Gemm", ["x2", "w"], ["g"], transB=1),
        helper.make_node("Reshape", ["g", "back"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [weight, flat, back])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    fusion = fuse_attention(proto)
    assert "normalise" not in fusion.counts
    assert [n.op_type for n in fusion.proto.graph.node].count("Gemm") == 1
    # the same graph without transB is a MatMul on the 3-D input, and the rule says so
    nodes[1] = helper.make_node("Gemm", ["x2", "wt"], ["g"])
    weight_t = onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "wt")
    plain = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [weight_t, flat, back]),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    rewritten = fuse_attention(plain)
    assert rewritten.counts.get("normalise") == 1
    assert "Gemm" not in [n.op_type for n in rewritten.proto.graph.node]
    np.testing.assert_array_equal(
        _run(rewritten.proto, {"x": np.ones((2, 3, 4), np.float32)}),
        _run(plain, {"x": np.ones((2, 3, 4), np.float32)}),
    )
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}
    np.testing.assert_array_equal(_run(fusion.proto, feeds), _run(proto, feeds))


def test_minilm_with_its_real_weights_fuses_into_six_attentions_that_pass_tune_parity(
    minilm_onnx,
):
    from onnxgate.examples.minilm import tokenize
    from onnxgate.examples.sentences import EVALUATION
    from onnxgate.model import load_model

    model = onnx.load(minilm_onnx)
    feeds = tokenize(EVALUATION[:8], seq=64)
    for packed, op in ((True, "Attention"), (False, "MultiHeadAttention")):
        fusion = fuse_attention(model, packed=packed)
        ops = Counter(node.op_type for node in fusion.proto.graph.node)
        assert ops[op] == 6 and ops["Softmax"] == 0, ops
        np.testing.assert_allclose(_run(fusion.proto, feeds), _run(model, feeds), atol=1e-4)
    labels = [g.label for g in graph_candidates(load_model(minilm_onnx))]
    assert labels[:3] == [AS_GIVEN, "attention-fusion", "attention-fusion-mha"]


def test_a_rewrite_that_fails_is_a_note_and_the_model_as_given_stays(tmp_path, monkeypatch):
    from onnxgate.model import load_model
    from onnxgate.perf import _attention

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), tmp_path / "softmax.onnx")

    def broken(proto, *, packed=True):
        raise ValueError("Dimension 2 does not have expected size")

    monkeypatch.setattr(_attention, "fuse_attention", broken)
    notes: list[str] = []
    graphs = graph_candidates(load_model(tmp_path / "softmax.onnx"), notes=notes)
    assert [g.label for g in graphs] == [AS_GIVEN]
    assert notes == [
        f"{label}: the rewrite failed: Dimension 2 does not have expected size"
        for label in ("attention-fusion", "attention-fusion-mha")
    ]
