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


def negpos() -> onnx.ModelProto:
    """x[batch, 3] -> Relu -> onnxruntime-extensions' NegPos (ai.onnx.contrib) -> neg, pos."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(
            "NegPos", ["r"], ["neg", "pos"], name="split_signs", domain="ai.onnx.contrib"
        ),
    ]
    shape = ("batch", 3)
    return model(
        nodes,
        [value("x", shape=shape)],
        [value("neg", shape=shape), value("pos", shape=shape)],
        opsets={"": OPSET, "ai.onnx.contrib": 1},
    )


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


def detector() -> onnx.ModelProto:
    """A detector's neck: three stride-2 convs, the coarsest upsampled and concatenated with the
    one before, on ``images[batch, 3, height, width]``. At 3×3 the features no longer line up
    (ONNX Runtime: "Non concat axis dimensions must match"); at 224 they do."""
    rng = np.random.default_rng(0)
    nodes, weights = [], []
    for name, source, channels in (("c1", "images", 3), ("c2", "c1", 8), ("c3", "c2", 8)):
        w = numpy_helper.from_array(
            rng.standard_normal((8, channels, 3, 3)).astype(np.float32) * 0.2, f"{name}.w"
        )
        weights.append(w)
        nodes.append(
            helper.make_node(
                "Conv", [source, w.name], [name], name=name, strides=[2, 2], pads=[1, 1, 1, 1]
            )
        )
    weights.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    nodes.append(helper.make_node("Resize", ["c3", "", "scales"], ["up"], name="up"))
    nodes.append(helper.make_node("Concat", ["up", "c2"], ["features"], name="cat", axis=1))
    return model(
        nodes,
        [value("images", shape=("batch", 3, "height", "width"))],
        [value("features", shape=("batch", 16, None, None))],
        initializers=weights,
    )


def flat_classifier(side: int = 56) -> onnx.ModelProto:
    """Conv (stride 2) → MaxPool → Flatten → MatMul with a fixed weight → Squeeze, on an image
    whose height and width have no name: only ``side`` × ``side`` images fit the weight."""
    rng = np.random.default_rng(0)
    features = 4 * (side // 4) ** 2
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((features, 5)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], pads=[1] * 4),
        helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    return model(
        nodes,
        [value("x", shape=("N", 3, None, None))],
        [value("y", shape=("N", 5))],
        initializers=[w, fc],
    )


def token_model(vocab: int = 50) -> onnx.ModelProto:
    """Token ids and a mask → an embedding table → mean over positions: a text model whose
    sequence axis is symbolic."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((vocab, 8)).astype(np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["e"], name="embed"),
        helper.make_node("Cast", ["attention_mask"], ["m"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m", "axis"], ["m3"], name="unsq"),
        helper.make_node("Mul", ["e", "m3"], ["em"], name="mask"),
        helper.make_node("ReduceMean", ["em"], ["y"], name="mean", axes=[1], keepdims=0),
    ]
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
    ids = value("input_ids", TensorProto.INT64, ("batch", "sequence"))
    mask = value("attention_mask", TensorProto.INT64, ("batch", "sequence"))
    return model(nodes, [ids, mask], [value("y", shape=("batch", 8))], initializers=[table, axis])


def text_labels() -> onnx.ModelProto:
    """text string [batch] -> label string [batch] and score float [batch] (LabelEncoders,
    ai.onnx.ml): strings in and out with no custom operator."""
    nodes = [
        helper.make_node(
            "LabelEncoder", ["text"], ["label"], domain="ai.onnx.ml",
            keys_strings=["rain", "goal"], values_strings=["weather", "sport"],
            default_string="other",
        ),
        helper.make_node(
            "LabelEncoder", ["text"], ["score"], domain="ai.onnx.ml",
            keys_strings=["rain", "goal"], values_floats=[1.0, 2.0], default_float=0.5,
        ),
    ]  # fmt: skip
    return model(
        nodes,
        [value("text", TensorProto.STRING, ["batch"])],
        [value("label", TensorProto.STRING, ["batch"]), value("score", shape=["batch"])],
        opsets={"": OPSET, "ai.onnx.ml": 2},
    )


def misdeclared() -> onnx.ModelProto:
    """x[N, 10] -> y[N, 1, 10], while y is declared [1, seqlen] (as ddddocr's OCR model does).

    The reshape's target is sliced to a length only known when the model runs, so onnx's shape
    inference cannot see the contradiction: only running the model shows it.
    """
    const = functools.partial(helper.make_node, "Constant")
    nodes = [
        const([], ["zero"], value=numpy_helper.from_array(np.array([0], np.int64))),
        const([], ["one"], value=numpy_helper.from_array(np.array([1], np.int64))),
        const([], ["tail"], value=numpy_helper.from_array(np.array([1, -1], np.int64))),
        helper.make_node("Shape", ["x"], ["sx"], name="shape"),
        helper.make_node("Slice", ["sx", "zero", "one"], ["n"], name="batch"),
        helper.make_node("Concat", ["n", "tail"], ["full"], axis=0, name="target"),
        helper.make_node("Shape", ["full"], ["length"], name="length"),
        helper.make_node("Slice", ["full", "zero", "length"], ["target"], name="hide"),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    return model(nodes, [value("x", shape=("N", 10))], [value("y", shape=(1, "seqlen"))])


def record_runs_on(model: Path, providers: list[str], runtime: str | None) -> None:
    """Record in the contract beside ``model`` where it runs, as ``quantize`` does for a recipe.

    The contract's sha256 fields stay right (the model's files are intact); ``lineage`` is what
    ``quantize`` writes (``lineage.runs_on``), here alone.
    """
    import json

    path = model.with_name(f"{model.stem}.contract.json")
    document = json.loads(path.read_text())
    runs_on = {"providers": providers, "runtime": runtime}
    document["lineage"] = {"step": "quantize", "runs_on": runs_on}
    path.write_text(json.dumps(document))
