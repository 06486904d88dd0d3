"""The shadow benchmarks' premises: the slow candidate answers exactly as the champion and ONNX
Runtime keeps its extra work; the planted variant answers differently from the same signature.

``benchmarks/shadow_load.py`` reads "shadowing must shed, not slow the champion" off a candidate
made slower by ``slow_variant``; if ONNX Runtime optimised the extra work away, or if it changed
an answer, the benchmark would measure something else than it says. ``shadow_minilm.py``'s bad
candidate must differ where it was perturbed, and only there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _shadow_candidates import (  # noqa: E402
    perturb_attention,
    shifted_ids,
    slow_variant,
    unshifted_sentences,
)

BIAS = "bert.encoder.layer.{}.attention.self.{}.bias"


def tiny_encoder(path: Path) -> Path:
    """x [batch, seq, 8] → hidden [batch, seq, 8] and pooled [batch, 8]: two 'layers' of
    query/key/value projections named as a BERT export names their biases."""
    rng = np.random.default_rng(0)
    nodes, inits, current = [], [], "x"
    for layer in range(2):
        parts = []
        for part in ("query", "key", "value"):
            weight, bias = f"w{layer}{part}", BIAS.format(layer, part)
            inits += [
                numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), weight),
                numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), bias),
            ]
            nodes += [
                helper.make_node("MatMul", [current, weight], [f"{weight}_mm"]),
                helper.make_node("Add", [f"{weight}_mm", bias], [f"{weight}_out"]),
            ]
            parts.append(f"{weight}_out")
        nodes.append(helper.make_node("Sum", parts, [f"h{layer}"]))
        nodes.append(helper.make_node("Tanh", [f"h{layer}"], [f"t{layer}"]))
        current = f"t{layer}"
    nodes.append(helper.make_node("Identity", [current], ["hidden"]))
    nodes.append(helper.make_node("ReduceMean", ["hidden", "axis"], ["pooled"], keepdims=0))
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis"))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", 8]),
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.save(model, path)
    return path


def run(path: Path, x: np.ndarray, optimized: Path | None = None) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_the_slow_candidate_answers_bit_for_bit_and_its_work_survives_optimisation(tmp_path):
    champion = tiny_encoder(tmp_path / "champion.onnx")
    slow = slow_variant(champion, tmp_path / "slow.onnx", 6, output="hidden")
    x = np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32) * 4
    for want, got in zip(run(champion, x), run(slow, x, tmp_path / "opt.onnx"), strict=True):
        assert want.dtype == got.dtype and np.array_equal(want, got)
    kept = onnx.load(str(tmp_path / "opt.onnx"))
    extra = {i.name for i in kept.graph.initializer if i.name.startswith("shadow_bench_w")}
    assert len(extra) == 7  # the 8 -> 512 projection and 6 blocks: nothing folded or dropped
    tanh = [n for n in kept.graph.node if n.op_type == "Tanh"]
    assert len(tanh) >= 2 + 7


def test_the_planted_variant_differs_where_it_was_perturbed_and_only_there(tmp_path):
    champion = tiny_encoder(tmp_path / "champion.onnx")
    planted = perturb_attention(champion, tmp_path / "bad.onnx", layer=1, scale=0.05)
    assert planted["weights"] == ["w1query", "w1key", "w1value"]
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(champion)).graph.initializer}
    after = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(str(tmp_path / "bad.onnx")).graph.initializer
    }
    changed = sorted(name for name in before if not np.array_equal(before[name], after[name]))
    assert changed == ["w1key", "w1query", "w1value"]
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    want, got = run(champion, x), run(tmp_path / "bad.onnx", x)
    assert np.abs(want[0] - got[0]).max() > 1e-3  # a difference rules at 1e-5 cannot miss


def test_shifted_traffic_is_framed_like_tokenised_text_and_unshifted_comes_from_the_examples():
    feeds = shifted_ids(3, 16, seed=4)
    assert feeds["input_ids"].shape == (3, 16) and feeds["input_ids"].dtype == np.int64
    assert (feeds["input_ids"][:, 0] == 101).all() and (feeds["input_ids"][:, -1] == 102).all()
    assert feeds["attention_mask"].all() and not feeds["token_type_ids"].any()
    assert (feeds["input_ids"][:, 1:-1] >= 1000).all()
    from onnxgate.examples.sentences import CALIBRATION, EVALUATION

    known = set(CALIBRATION + EVALUATION)
    for sentence in unshifted_sentences(20, seed=3):
        assert sentence in known or any(sentence.startswith(s + " ") for s in known)
