"""The exclusion search keeps in float first the nodes with the most error for their speed cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxgate.quantize._ort import speed_costs
from onnxgate.quantize._search import rank


def _model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.zeros((100, 8), np.float32), "table")
    small = numpy_helper.from_array(np.zeros((8, 4), np.float32), "small")
    large = numpy_helper.from_array(np.zeros((4, 64), np.float32), "large")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["embedded"], name="embed"),
        helper.make_node("MatMul", ["embedded", "small"], ["h"], name="narrow"),
        helper.make_node("MatMul", ["h", "large"], ["y"], name="wide"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64])],
        [table, small, large],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 16, 4])],
    )
    return helper.make_model(graph)


def test_costs_are_multiply_adds_and_a_lookup_costs_its_table():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    # weight elements × the positions the output has (its dims but the last; batch unknown = 1)
    assert costs == {"embed": 100 * 8.0, "narrow": 8 * 4 * 16.0, "wide": 4 * 64 * 16.0}


def _rank(scores: dict[str, float], costs: dict[str, float] | None) -> list[str]:
    proto = _model()

    def make(exclude, only):
        return Path(only[0])

    def error(path):
        return scores[str(path)]

    return [s.node for s in rank(list(proto.graph.node), make, error, lambda m: None, costs)]


def test_of_two_equal_errors_the_cheaper_node_stays_float_first():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    scores = {"embed": 0.01, "narrow": 0.01, "wide": 0.01}
    assert _rank(scores, costs) == ["narrow", "embed", "wide"]


def test_near_ties_go_to_the_cheaper_node_but_a_twice_worse_error_comes_first():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    # wide is alone in its band [2^-8, 2^-7); narrow and embed share [2^-9, 2^-8)
    scores = {"embed": 0.0035, "narrow": 0.003, "wide": 0.005}
    assert _rank(scores, costs) == ["wide", "narrow", "embed"]
    # without costs, error alone decides, as before
    assert _rank(scores, None) == ["wide", "embed", "narrow"]


def test_a_cheap_node_never_jumps_a_node_with_far_more_error():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    scores = {"embed": 1e-5, "narrow": 0.0, "wide": 0.01}
    assert _rank(scores, costs) == ["wide", "embed", "narrow"]


def test_conv_and_constant_weights_are_costed():
    weight = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node(
            "Constant", [], ["k"], value=numpy_helper.from_array(np.zeros((8, 2), np.float32))
        ),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("MatMul", ["c", "k"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 2])],
        [weight],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 8, 10, 8])],
    )
    costs = speed_costs(helper.make_model(graph), nodes[1:])
    # Conv: weight × output positions (10 × 8); MatMul: a Constant's 16 elements × [1, 8, 10]
    assert costs == {"conv": 8 * 3 * 3 * 3 * 80.0, "matmul": 16 * 80.0}
