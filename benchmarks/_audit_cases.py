"""The audit's cases: onnx's node test cases, small models for older operator versions, and
real models (../shared/corpus and the onnx wheel's backend test data). See reference_audit.py."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxgate.data import synthetic_samples
from onnxgate.model import Signature

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data"
BACKEND_SETS = ("light", "simple", "pytorch-converted", "pytorch-operator")
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform"}
    | {"RandomUniformLike"}
)


@dataclass
class Case:
    """One model with one set of inputs, and the outputs shipped with it (if any)."""

    name: str
    source: str
    model: onnx.ModelProto | None
    feeds: dict[str, Any]
    expected: list[Any] | None
    data: str
    error: str | None = None


# -- cases --------------------------------------------------------------------------------------


def _value(item: Any) -> Any:
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, list):
        return [_value(v) for v in item]
    if item is None or isinstance(item, np.ndarray | dict):
        return item
    return np.asarray(item)


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    weights = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def node_cases(match: str | None) -> list[Case]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = collect_testcases(None)
    cases = []
    for test in found:
        if match and match not in test.name:
            continue
        inputs, outputs = test.data_sets[0]
        names = [v.name for v in _graph_inputs(test.model)]
        feeds = {n: _value(x) for n, x in zip(names, inputs, strict=False)}
        cases.append(
            Case(test.name, "node", test.model, feeds, [_value(x) for x in outputs], "shipped")
        )
    return cases


def _read_pb(path: Path, type_proto: onnx.TypeProto) -> Any:
    which = type_proto.WhichOneof("value")
    proto: Any = {
        "sequence_type": onnx.SequenceProto,
        "optional_type": onnx.OptionalProto,
        "map_type": onnx.MapProto,
    }.get(which, onnx.TensorProto)()
    proto.ParseFromString(path.read_bytes())
    if isinstance(proto, onnx.SequenceProto):
        return numpy_helper.to_list(proto)
    if isinstance(proto, onnx.OptionalProto):
        return numpy_helper.to_optional(proto)
    if isinstance(proto, onnx.MapProto):
        return numpy_helper.to_dict(proto)
    return numpy_helper.to_array(proto)


def model_case(path: Path, source: str, name: str) -> Case:
    try:
        model = onnx.load(path)
    except Exception as err:  # a corpus file may not even parse
        return Case(name, source, None, {}, None, "none", f"onnx cannot load it: {err}")
    inputs = _graph_inputs(model)
    data = path.parent / "test_data_set_0"
    if path.name == "model.onnx" and data.is_dir():
        feeds = {
            v.name: _read_pb(data / f"input_{i}.pb", v.type)
            for i, v in enumerate(inputs)
            if (data / f"input_{i}.pb").exists()
        }
        outs = [data / f"output_{i}.pb" for i in range(len(model.graph.output))]
        expected = None
        if all(p.exists() for p in outs):
            expected = [_read_pb(p, v.type) for p, v in zip(outs, model.graph.output, strict=True)]
        return Case(name, source, model, feeds, expected, "shipped")
    try:
        sample = synthetic_samples(Signature.from_graph(model.graph), model=model)[0]
    except Exception as err:  # a string or sequence input cannot be made up
        return Case(name, source, model, {}, None, "none", f"no synthetic feeds: {err}")
    return Case(name, source, model, dict(sample.feeds), None, "synthetic")


def model_cases(match: str | None) -> list[Case]:
    paths = [(p, "corpus", f"corpus/{p.name}") for p in sorted(CORPUS.glob("*.onnx"))]
    for folder in BACKEND_SETS:
        base = BACKEND / folder
        paths += [
            (p, folder, f"{folder}/{p.parent.name}") for p in sorted(base.glob("*/model.onnx"))
        ]
        paths += [(p, folder, f"{folder}/{p.stem}") for p in sorted(base.glob("*.onnx"))]
    return [model_case(p, s, n) for p, s, n in paths if not match or match in n]


# -- older operator versions ---------------------------------------------------------------------
# The node test cases are stamped at the newest opsets, so they never reach the versions most
# exported models use. These cases reach them; "expected" is the specification's formula, written
# here independently of onnxgate's overrides, where the specification gives one.


def _bn(x, s, b, m, v, eps=1e-5):  # BatchNormalization-15, training_mode=False
    shape = (-1,) + (1,) * (x.ndim - 2)
    return (
        (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps) * s.reshape(shape)
        + b.reshape(shape)
    ).astype(x.dtype)


def _coerced(x: np.ndarray, axis: int, kind: str) -> np.ndarray:  # Softmax-1/-11 family
    rows = int(np.prod(x.shape[: axis % x.ndim]))
    flat = x.reshape(rows, -1).astype(np.float64)
    if kind == "Hardmax":
        out = np.eye(flat.shape[1])[flat.argmax(axis=1)]
    else:
        logs = flat - flat.max(axis=1, keepdims=True)
        logs = logs - np.log(np.exp(logs).sum(axis=1, keepdims=True))
        out = logs if kind == "LogSoftmax" else np.exp(logs)
    return out.reshape(x.shape).astype(x.dtype)


def _along(x: np.ndarray, axis: int, kind: str) -> np.ndarray:  # Softmax-13 family
    moved = np.moveaxis(x, axis, -1)
    return np.moveaxis(_coerced(moved, moved.ndim - 1, kind), -1, axis)


def _mk(nodes, inputs, outputs, opset, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 7 else 4 if opset < 11 else 7 if opset < 13 else 8
    return model


def _vi(name, elem=onnx.TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _loop_body(shape: list[int]) -> onnx.GraphProto:
    """v_out = v_in + 1 and scan = v_in, so scans are 0, 1, 2... of the carried shape."""
    return helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["v", "one"], ["v_out"]),
            helper.make_node("Identity", ["v"], ["scan"]),
        ],
        "body",
        [
            _vi("i", onnx.TensorProto.INT64, []),
            _vi("c", onnx.TensorProto.BOOL, []),
            _vi("v", shape=shape),
        ],
        [
            _vi("c_out", onnx.TensorProto.BOOL, []),
            _vi("v_out", shape=shape),
            _vi("scan", shape=shape),
        ],
        initializer=[helper.make_tensor("one", onnx.TensorProto.FLOAT, [], [1.0])],
    )


FOR_LOOP_OPSETS = (10, 11, 13, 16, 19, 21, 23, 24, 25)


def version_cases(match: str | None) -> list[Case]:
    rng = np.random.default_rng(0)
    cases: list[Case] = []

    def add(name, model, feeds, expected=None):
        if not match or match in name:
            cases.append(Case(name, "version", model, feeds, expected, "generated"))

    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, b, m = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    ins = [_vi("x", shape=[2, 3, 4, 5])] + [_vi(n, shape=[3]) for n in "sbmv"]
    bn = [
        (6, {"is_test": 1}, 1),
        (6, {"is_test": 0}, 5),
        (7, {}, 1),
        (8, {}, 1),
        (9, {}, 1),
        (9, {"momentum": 0.9}, 1),
        (9, {"momentum": 0.9}, 5),
        (12, {"momentum": 0.9}, 1),
        (14, {"momentum": 0.9}, 1),
        (15, {"momentum": 0.9, "training_mode": 1}, 3),
    ]
    for opset, attrs, count in bn:
        outs = ["y", "mean", "var", "saved_mean", "saved_var"][:count]
        model = _mk(
            [helper.make_node("BatchNormalization", list("xsbmv"), outs, **attrs)],
            ins,
            [_vi(o) for o in outs],
            opset,
        )
        label = ",".join(f"{k}={w}" for k, w in attrs.items())
        add(
            f"bn{opset}_{count}out_{label}",
            model,
            feeds,
            [_bn(x, s, b, m, v)] if count == 1 else None,
        )
    for family in ("Softmax", "LogSoftmax", "Hardmax"):
        for opset in (1, 11, 12, 13):
            for attrs in ({}, {"axis": 2}):
                model = _mk(
                    [helper.make_node(family, ["x"], ["y"], **attrs)], ins[:1], [_vi("y")], opset
                )
                axis = attrs.get("axis", 1 if opset < 13 else -1)
                want = _coerced(x, axis, family) if opset < 13 else _along(x, axis, family)
                add(
                    f"{family.lower()}{opset}_axis{attrs.get('axis', 'default')}",
                    model,
                    {"x": x},
                    [want],
                )
    cube = np.arange(3, dtype=np.float32).reshape(3, 1, 1)
    grid = np.arange(6, dtype=np.float32).reshape(2, 3)
    for op, data, axes in (("Squeeze", cube, [2, 1]), ("Unsqueeze", grid, [3, 0])):
        for opset in (1, 11, 13):
            inits = (
                [helper.make_tensor("axes", onnx.TensorProto.INT64, [2], axes)]
                if opset >= 13
                else []
            )
            node = (
                helper.make_node(op, ["x", "axes"], ["y"])
                if opset >= 13
                else helper.make_node(op, ["x"], ["y"], axes=axes)
            )
            model = _mk([node], [_vi("x", shape=list(data.shape))], [_vi("y")], opset, inits)
            want = (
                np.squeeze(data, tuple(axes))
                if op == "Squeeze"
                else np.expand_dims(data, tuple(axes))
            )
            add(f"{op.lower()}{opset}_axes{axes[0]}{axes[1]}", model, {"x": data}, [want])
    for opset in (11, 13, 16):
        for shape, trips in (([], 3), ([2, 3], 3), ([2], 0)):
            model = _mk(
                [
                    helper.make_node(
                        "Loop", ["M", "c", "v0"], ["vf", "scans"], body=_loop_body(shape)
                    )
                ],
                [
                    _vi("M", onnx.TensorProto.INT64, []),
                    _vi("c", onnx.TensorProto.BOOL, []),
                    _vi("v0", shape=shape),
                ],
                [_vi("vf", shape=shape), _vi("scans")],
                opset,
            )
            v0 = np.zeros(shape, np.float32)
            scans = (
                np.stack([v0 + i for i in range(trips)])
                if trips
                else np.empty((0, *shape), np.float32)
            )
            add(
                f"loop{opset}_scan{'x'.join(map(str, shape)) or 'scalar'}_{trips}trips",
                model,
                {"M": np.array(trips, np.int64), "c": np.array(True), "v0": v0},
                [v0 + trips, scans],
            )
    for opset in FOR_LOOP_OPSETS:  # Loop without cond: the trip count alone decides
        body = _loop_body([])
        body.node[0].op_type = "Not"  # the body's condition turns false at once: ignored
        node = helper.make_node("Loop", ["M", "", "v0"], ["vf", "scans"], body=body)
        model = _mk(
            [node],
            [_vi("M", onnx.TensorProto.INT64, []), _vi("v0", shape=[])],
            [_vi("vf", shape=[]), _vi("scans")],
            opset,
        )
        v0 = np.zeros((), np.float32)
        add(
            f"loop{opset}_for_loop",
            model,
            {"M": np.array(4, np.int64), "v0": v0},
            [np.array(4, np.float32), np.arange(4, dtype=np.float32)],
        )
    q = rng.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    f = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for opset, shape in ((10, []), (13, []), (13, [3])):
        scale = rng.uniform(0.01, 0.1, shape).astype(np.float32)
        zero = np.full(shape, 7, np.uint8)
        sc = scale.reshape(1, 3, 1) if shape else scale  # per-axis: axis 1, the default
        zp = zero.reshape(1, 3, 1).astype(np.int32) if shape else zero.astype(np.int32)
        for op in ("DequantizeLinear", "QuantizeLinear"):
            dequantize = op == "DequantizeLinear"
            data, elem = (q, onnx.TensorProto.UINT8) if dequantize else (f, onnx.TensorProto.FLOAT)
            out = onnx.TensorProto.FLOAT if dequantize else onnx.TensorProto.UINT8
            model = _mk(
                [helper.make_node(op, ["x", "s", "z"], ["y"])],
                [
                    _vi("x", elem, [2, 3, 4]),
                    _vi("s", shape=shape),
                    _vi("z", onnx.TensorProto.UINT8, shape),
                ],
                [_vi("y", out)],
                opset,
            )
            if dequantize:  # y = (x - x_zero_point) * x_scale
                want = ((data.astype(np.int32) - zp) * sc).astype(np.float32)
            else:  # y = saturate(round(x / y_scale) + y_zero_point), rounding half to even
                want = np.clip(np.rint(data / sc) + zp, 0, 255).astype(np.uint8)
            add(
                f"{op.lower()}{opset}_{'per_axis' if shape else 'per_tensor'}",
                model,
                {"x": data, "s": scale, "z": zero},
                [want],
            )
    image = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    for mode in ("nearest", "linear"):
        model = _mk(
            [helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)],
            [_vi("x", shape=[1, 2, 4, 6]), _vi("s", shape=[4])],
            [_vi("y")],
            10,
        )
        add(f"resize10_{mode}", model, {"x": image, "s": np.array([1, 1, 2, 2], np.float32)})
        model = _mk(
            [helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)],
            [_vi("x", shape=[1, 2, 4, 6]), _vi("s", shape=[4])],
            [_vi("y")],
            9,
        )
        add(f"upsample9_{mode}", model, {"x": image, "s": np.array([1, 1, 2, 2], np.float32)})
        model = _mk(
            [helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 2.0])],
            [_vi("x", shape=[1, 2, 4, 6])],
            [_vi("y")],
            7,
        )
        add(f"upsample7_{mode}", model, {"x": image})
    feature = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    rois = np.array([[0.5, 0.5, 5.3, 6.1], [1.0, 2.0, 7.0, 7.5]], np.float32)
    for opset, mode in ((10, "avg"), (10, "max"), (16, "avg")):
        node = helper.make_node(
            "RoiAlign",
            ["x", "rois", "index"],
            ["y"],
            mode=mode,
            output_height=3,
            output_width=3,
            sampling_ratio=2,
        )
        model = _mk(
            [node],
            [
                _vi("x", shape=[1, 2, 8, 8]),
                _vi("rois", shape=[2, 4]),
                _vi("index", onnx.TensorProto.INT64, [2]),
            ],
            [_vi("y")],
            opset,
        )
        add(
            f"roialign{opset}_{mode}",
            model,
            {"x": feature, "rois": rois, "index": np.zeros(2, np.int64)},
        )
    square = rng.standard_normal((1, 1, 5, 5)).astype(np.float32)
    for opset in (10, 11):
        node = helper.make_node(
            "AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
        )
        model = _mk([node], [_vi("x", shape=[1, 1, 5, 5])], [_vi("y")], opset)
        add(f"averagepool{opset}_ceil", model, {"x": square})
    grid = rng.uniform(-1, 1, (1, 3, 4, 2)).astype(np.float32)
    model = _mk(
        [helper.make_node("GridSample", ["x", "grid"], ["y"])],
        [_vi("x", shape=[1, 1, 5, 5]), _vi("grid", shape=[1, 3, 4, 2])],
        [_vi("y")],
        16,
    )
    add("gridsample16_default_mode", model, {"x": square, "grid": grid})
    model = _mk(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"])],
        [_vi("start", shape=[]), _vi("limit", shape=[]), _vi("delta", shape=[])],
        [_vi("y")],
        11,
    )
    add(
        "range11_float",
        model,
        {
            "start": np.array(0.1, np.float32),
            "limit": np.array(2.0, np.float32),
            "delta": np.array(0.3, np.float32),
        },
    )
    for test in node_cases("qk_matmul_bias_3d_mask_causal"):  # Attention-23 cases stamped at 24
        if test.name.endswith("_expanded") or (match and match not in test.name + "@24"):
            continue
        restamped = onnx.ModelProto()
        restamped.CopyFrom(test.model)
        restamped.opset_import[0].version = 24
        cases.append(
            Case(test.name + "@24", "version", restamped, test.feeds, test.expected, "shipped")
        )
    return cases
