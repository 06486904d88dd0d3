"""quantize --to fp16: graphs the converter leaves unsorted, If/Loop bodies, overflow, size."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import model, save, value
from onnxgate.quantize import _float16


def _weight(name, rng, shape=(16, 16)):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _subgraph_model():
    """MatMul mm0, then an If whose branches read its output, then a Loop over the result."""
    rng = np.random.default_rng(0)
    then = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w1"], ["t"], name="then_mm")],
        "then",
        [],
        [value("t", shape=(4, 16))],
    )
    other = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["e"], name="else_relu")],
        "else",
        [],
        [value("e", shape=(4, 16))],
    )
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["c_in", "w2"], ["m"], name="body_mm"),
            helper.make_node("Tanh", ["m"], ["c_out"], name="body_tanh"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
        ],
        "body",
        [
            value("i", TensorProto.INT64, ()),
            value("cond_in", TensorProto.BOOL, ()),
            value("c_in", shape=(4, 16)),
        ],
        [value("cond_out", TensorProto.BOOL, ()), value("c_out", shape=(4, 16))],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["a"], name="mm0"),
        helper.make_node("If", ["c"], ["ifo"], then_branch=then, else_branch=other, name="if"),
        helper.make_node("Loop", ["n", "c", "ifo"], ["y"], body=body, name="loop"),
    ]
    weights = [_weight(f"w{i}", rng) for i in range(3)]
    weights.append(numpy_helper.from_array(np.array(3, np.int64), "n"))
    return model(
        nodes,
        [value("x", shape=(4, 16)), value("c", TensorProto.BOOL, ())],
        [value("y", shape=(4, 16))],
        initializers=weights,
    )


@pytest.fixture
def subgraph(tmp_path):
    return save(_subgraph_model(), tmp_path / "subgraph.onnx")


def _run(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("exclude", [[], ["mm0"]])
def test_a_converted_if_loop_model_is_sorted_valid_and_keeps_casts_its_bodies_read(
    subgraph, tmp_path, exclude
):
    out = tmp_path / "subgraph.fp16.onnx"
    _float16.convert(subgraph, out, exclude=exclude)
    onnx.checker.check_model(str(out), full_check=True)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 16)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "c": np.array(cond)}
        np.testing.assert_allclose(_run(out, feeds), _run(subgraph, feeds), atol=0.05)


def test_the_search_on_an_if_loop_model_never_blocks_a_subgraph_holder(subgraph, tmp_path):
    """A strict budget makes the search block nodes; If/Loop blocked made a model ORT refused."""
    from onnxgate.quantize import QuantizeConfig, quantize

    assert [n.name for n in _float16.candidates(onnx.load(str(subgraph)))] == ["mm0"]
    config = QuantizeConfig(
        to="fp16", out=tmp_path / "sg.fp16.onnx", metrics=("cosine>=0.9999999",), bench=False
    )
    report = quantize(subgraph, config)  # raised RunFailed (type mismatch in then_mm) before
    assert report.attempts


def test_a_converted_model_that_does_not_load_names_the_node_set_and_converter(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(Exception) as caught:
        _float16._refuse_unloadable(broken, "m.onnx with mm0 kept in float32")
    text = str(caught.value) + caught.value.hint
    assert "m.onnx with mm0 kept in float32" in text and "float16 converter" in text
    assert "--inputs" not in text and "candidate.onnx" not in text


def test_a_node_whose_output_overflows_float16_is_kept_in_float32_and_named(tmp_path):
    """MatMul outputs near 1e5: infinite on float16 hardware, finite on ORT's CPU (float32)."""
    from onnxgate.quantize import QuantizeConfig, quantize

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(np.full((16, 16), 3000.0, np.float32), "w0")
    small = _weight("w1", rng)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["s"], name="small_mm"),
        helper.make_node("MatMul", ["x", "w0"], ["a"], name="big_mm"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "s"], ["y"], name="add"),
    ]
    source = save(
        model(
            nodes,
            [value("x", shape=(4, 16))],
            [value("y", shape=(4, 16))],
            initializers=[weights, small],
        ),
        tmp_path / "big.onnx",
    )
    np.savez(tmp_path / "eval.npz", x=rng.uniform(1, 2, (4, 16)).astype(np.float32))
    out = tmp_path / "big.fp16.onnx"
    config = QuantizeConfig(to="fp16", out=out, eval=str(tmp_path / "eval.npz"), bench=False)
    report = quantize(source, config)
    assert report.passed, report.reason
    said = " ".join(report.notices)
    assert "big_mm (MatMul): output reaches" in said and "above float16's 65504" in said
    assert "small_mm" not in said
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(out))).graph
    types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
    producer = {o: n.name for n in graph.node for o in n.output}
    big_out = next(o for o, n in producer.items() if n == "big_mm")
    assert types.get(big_out, TensorProto.FLOAT) == TensorProto.FLOAT
    assert "w0" in {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}


def test_the_gates_fp16_files_are_named_fp16_and_registered_as_model_fp16(tmp_path):
    """The gate's quantize step wrote NAME.int8.* and role ``model.int8`` for fp16 too."""
    from onnxgate.gate._pipeline import _role
    from onnxgate.gate._records import BY_NAME
    from onnxgate.gate._steps import Context

    assert Context.quantized_model.__doc__  # one method, named by format
    run = tmp_path
    save(_subgraph_model(), run / "m.fp16.onnx")
    produced = [p.name for p in BY_NAME["quantize"].produces(run, "m")]
    assert "m.fp16.onnx" in produced
    assert _role("m.fp16.onnx", "m") == "model.fp16"
    assert _role("m.fp16.contract.json", "m") == "contract.fp16"


def _two_matmuls(tmp_path, *, external: bool):
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["a"], name="mm0"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w1"], ["y"], name="mm1"),
    ]
    proto = model(
        nodes,
        [value("x", shape=(4, 64))],
        [value("y", shape=(4, 64))],
        initializers=[_weight("w0", rng, (64, 64)), _weight("w1", rng, (64, 64))],
    )
    path = tmp_path / "ext.onnx"
    if external:
        onnx.save_model(proto, str(path), save_as_external_data=True, location="ext.bin")
    else:
        save(proto, path)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(-1, 1, (4, 64)).astype(np.float32))
    return path


def test_external_weights_count_in_the_size_and_stay_external_in_the_output(tmp_path):
    from onnxgate.quantize import QuantizeConfig, quantize

    source = _two_matmuls(tmp_path, external=True)
    out = tmp_path / "ext.fp16.onnx"
    config = QuantizeConfig(to="fp16", out=out, eval=str(tmp_path / "eval.npz"), bench=False)
    report = quantize(source, config)
    assert report.passed, report.reason
    assert report.size_before >= 2 * 64 * 64 * 4  # the side file's weights (was the graph alone)
    assert 0.4 < report.size_ratio < 0.7  # float16 weights: about half (was 5.5)
    assert (tmp_path / "ext.fp16.onnx.data").is_file()
    assert onnx.load(str(out), load_external_data=False).graph.initializer[0].data_location == 1
    onnx.checker.check_model(str(out), full_check=True)
    assert "not measured here" in report.gain and "no gain in size" not in report.gain
    contract = (tmp_path / "ext.fp16.contract.json").read_text()
    assert "onnxruntime.transformers.float16" in contract


def test_a_file_that_does_not_shrink_claims_no_size_gain():
    from onnxgate.quantize._report import SpeedGate

    text = _float16.gain("fp16", SpeedGate(gated=False, note="not timed"), 1.01)
    assert "1.01 of the float32 file's size (no gain in size)" in text
    assert "expected on GPUs with float16 units" in text and "not measured here" in text


def test_a_constant_is_not_said_to_lack_a_float16_kernel():
    from onnxgate.quantize._float16 import _profile_table

    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["k"],
            value=numpy_helper.from_array(np.ones((4,), np.float16)),
            name="k",
        ),
        helper.make_node("Add", ["x", "k"], ["y"], name="add"),
    ]
    proto = model(
        nodes, [value("x", TensorProto.FLOAT16, (4,))], [value("y", TensorProto.FLOAT16, (4,))]
    )
    _, table = _profile_table("m.onnx")
    assert "Constant" not in _float16.without_cpu_kernel(proto, table)


def test_the_gate_pages_plots_name_fp16_not_int8():
    from onnxgate.gate._plots import quantize_latency_plot, ranking_plot

    report = {
        "settings": {"to": "fp16"},
        "ranking": [{"node": "mm0", "op_type": "MatMul", "score": 0.01}],
        "excluded": [],
        "latency": [{"dims": {}, "float_ms": 1.0, "quantized_ms": 2.0, "speedup": 0.5}],
    }
    for svg in (ranking_plot(report), quantize_latency_plot(report)):
        assert svg and "fp16" in svg and "int8" not in svg


def test_a_rounding_the_model_itself_makes_is_kept() -> None:
    from onnx import TensorProto, helper

    from onnxgate.quantize._float16 import drop_round_trips

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], name="mine_down", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["f"], name="mine_up", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["f"], ["y"], name="relu"),
    ]
    proto = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    assert drop_round_trips(proto, keep={"mine_down", "mine_up"}) == 0
    assert [n.name for n in proto.graph.node] == ["mine_down", "mine_up", "relu"]
    assert drop_round_trips(proto) == 1  # the same pair, inserted by the converter, goes
    assert [n.name for n in proto.graph.node] == ["relu"]
