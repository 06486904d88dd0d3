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


def test_a_cheap_node_goes_before_a_worse_but_far_costlier_one():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    scores = {"embed": 0.004, "narrow": 0.003, "wide": 0.01}
    # error per unit of cost: narrow 5.9e-6, embed 5.0e-6, wide 2.4e-6
    assert _rank(scores, costs) == ["narrow", "embed", "wide"]
    # without costs, error alone decides, as before
    assert _rank(scores, None) == ["wide", "embed", "narrow"]


def test_a_node_without_error_is_never_ranked_before_one_with_error():
    proto = _model()
    costs = speed_costs(proto, list(proto.graph.node))
    scores = {"embed": 0.0, "narrow": 0.0, "wide": 1e-9}
    assert _rank(scores, costs)[0] == "wide"
