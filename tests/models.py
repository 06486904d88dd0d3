"""Tiny models built in code, stamped with an IR and opset the installed runtime accepts."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR = 10
OPSET = 17


def value(
    name: str,
    elem: int = TensorProto.FLOAT,
    shape: Sequence[int | str | None] | None = ("batch", 4),
):
    """A typed graph input or output."""
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    *,
    initializers: Sequence[onnx.TensorProto] = (),
    opsets: dict[str, int] | None = None,
    ir: int = IR,
) -> onnx.ModelProto:
    """A model with explicit IR and opsets (onnx 1.23 would stamp IR 14 by default)."""
    graph = helper.make_graph(
        list(nodes), "g", list(inputs), list(outputs), initializer=list(initializers)
    )
    imports = [helper.make_opsetid(d, v) for d, v in (opsets or {"": OPSET}).items()]
    proto = helper.make_model(graph, opset_imports=imports, producer_name="onnxgate-tests")
    proto.ir_version = ir
    return proto


def relu(**kwargs) -> onnx.ModelProto:
    """x -> Relu -> y, batch dynamic."""
    return model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [value("x")], [value("y")], **kwargs
    )


def mlp() -> onnx.ModelProto:
    """x[batch, 4] @ W[4, 3] + b -> Relu, with real weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    return model(nodes, [value("x")], [value("y", shape=("batch", 3))], initializers=[w, b])


def save(proto: onnx.ModelProto, path: Path) -> Path:
    """Write the model and return its path."""
    onnx.save_model(proto, path)
    return path


@functools.cache
def _installed_limits():
    from onnxgate.compat.runtime import runtime_profile

    return runtime_profile().limits()


def newer_opset() -> int:
    """One ``ai.onnx`` opset past what the installed runtime loads (each release raises it)."""
    return _installed_limits().max_opsets["ai.onnx"] + 1


def newer_ir() -> int:
    """One IR version past what the installed runtime loads."""
    return _installed_limits().max_ir + 1
