"""onnxgate's corrections of the ONNX reference evaluator, its crash reports, and the deviations.

Each correction is shown three ways on a model that reaches the corrected operator version: the
evaluator as onnx ships it is wrong (or crashes), onnxgate's ``ReferenceRunner`` matches the
specification written out in NumPy here, and it matches ONNX Runtime. The versions a correction
does not concern are left to onnx's own classes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import BACKEND_DATA
from models import model, save, value
from onnxgate._words import speaking
from onnxgate.cli._flags import cli_words
from onnxgate.data import synthetic_samples
from onnxgate.errors import ExitCode, InternalError, ReferenceFailed
from onnxgate.model import Signature, load_model
from onnxgate.runners import ReferenceRunner
from onnxgate.runners import _reference_fixes as fixes
from onnxgate.runners._reference_fixes import (
    DEVIATIONS,
    known_deviation,
    known_deviations,
    overrides,
    schema_version,
)

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def ir_for(opset: int) -> int:
    """The IR version that shipped with an opset (ONNX Runtime 1.32 loads all of them)."""
    return 3 if opset < 7 else 4 if opset < 11 else 7 if opset < 13 else 8


def build(nodes, inputs, outputs, opset: int, initializers=()) -> onnx.ModelProto:
    return model(
        nodes, inputs, outputs, initializers=initializers, opsets={"": opset}, ir=ir_for(opset)
    )


def plain(proto: onnx.ModelProto, feeds: dict) -> list:
    """The evaluator as onnx ships it."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(proto).run(None, feeds)


def corrected(proto: onnx.ModelProto, feeds: dict, tmp_path: Path) -> list:
    """onnxgate's reference runner, on the model saved as a file."""
    path = save(proto, tmp_path / "model.onnx")
    with ReferenceRunner(load_model(path)) as runner:
        return list(runner.infer(feeds).outputs.values())


def onnxruntime(proto: onnx.ModelProto, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, atol=1e-5, rtol=1e-4)


# -- BatchNormalization-6 to -13 ---------------------------------------------------------------

SCALE, BIAS, MEAN = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
VAR = RNG.uniform(0.5, 2.0, 3).astype(np.float32)
BN_FEEDS = {"x": X, "s": SCALE, "b": BIAS, "m": MEAN, "v": VAR}
BN_INPUTS = [value("x", shape=[2, 3, 4, 5])] + [value(n, shape=[3]) for n in "sbmv"]


def bn_test_mode(x, scale, bias, mean, var, epsilon=1e-5):
    """``Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B``."""
    c = (-1, 1, 1)
    return (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + epsilon) * scale.reshape(
        c
    ) + bias.reshape(c)


def batch_norm(opset: int, outputs: int = 1, **attributes) -> onnx.ModelProto:
    names = ["y", "mean", "var", "saved_mean", "saved_var"][:outputs]
    node = helper.make_node("BatchNormalization", list("xsbmv"), names, name="bn", **attributes)
    return build([node], BN_INPUTS, [value(n, shape=None) for n in names], opset)


@pytest.mark.parametrize(
    ("opset", "attributes"),
    [(7, {}), (8, {"momentum": 0.9}), (9, {}), (9, {"momentum": 0.9}), (12, {"momentum": 0.99})],
)
def test_batch_normalization_9_with_one_output_is_inference(tmp_path, opset, attributes):
    """BatchNormalization-7 and -9 (Changelog): "Depending on the mode it is being run, there are
    multiple cases for the number of outputs ... Output case #2: Y (test mode)"; in test mode
    ``Y = (X - input_mean) / sqrt(input_var + epsilon) * scale + B`` (BatchNormalization-15).

    onnx's BatchNormalization_9 normalises with batch statistics whenever ``momentum`` is set,
    and its schema default always sets it; BatchNormalization_6 (opsets 7-8) crashes.
    """
    proto = batch_norm(opset, **attributes)
    expected = bn_test_mode(X, SCALE, BIAS, MEAN, VAR)
    try:
        old = plain(proto, BN_FEEDS)[0]
        assert not close(old, expected)
    except TypeError as err:  # opsets 7-8: training mode's tuple returned as one output
        assert "is a tuple" in str(err)
    (new,) = corrected(proto, BN_FEEDS, tmp_path)
    assert close(new, expected)
    assert close(new, onnxruntime(proto, BN_FEEDS)[0])


def test_batch_normalization_9_with_five_outputs_is_training(tmp_path):
    """BatchNormalization-9: "Output case #1: Y, mean, var, saved_mean, saved_var (training
    mode)"; Y uses the batch statistics, ``running_mean = input_mean * momentum + current_mean *
    (1 - momentum)`` (the -15 text of the same update). saved_var is described only as "Saved
    variance used during training": the override returns the batch variance, ORT its
    1/sqrt(var + epsilon), so that output is not compared with ORT.
    """
    proto = batch_norm(9, outputs=5, momentum=0.8)
    with pytest.raises(RuntimeError, match="Unable to find output name 'mean'"):
        plain(proto, BN_FEEDS)  # onnx returns Y alone
    y, mean, var, saved_mean, saved_var = corrected(proto, BN_FEEDS, tmp_path)
    axes = (0, 2, 3)
    batch_mean, batch_var = X.mean(axis=axes), X.var(axis=axes)
    assert close(y, bn_test_mode(X, SCALE, BIAS, batch_mean, batch_var))
    assert close(mean, MEAN * 0.8 + batch_mean * 0.2)
    assert close(var, VAR * 0.8 + batch_var * 0.2)
    assert close(saved_mean, batch_mean) and close(saved_var, batch_var)
    theirs = onnxruntime(proto, BN_FEEDS)
    for mine, other in zip((y, mean, var, saved_mean), theirs[:4], strict=True):
        assert close(mine, other)


def test_batch_normalization_6_follows_is_test(tmp_path):
    """BatchNormalization-6: "is_test: If set to nonzero, run spatial batch normalization in test
    mode, default is 0". ONNX Runtime has no -6 kernel, so only the formula judges it.
    """
    (y,) = corrected(batch_norm(6, is_test=1), BN_FEEDS, tmp_path)
    assert close(y, bn_test_mode(X, SCALE, BIAS, MEAN, VAR))
    training = corrected(batch_norm(6, outputs=5), BN_FEEDS, tmp_path)
    assert close(training[0], bn_test_mode(X, SCALE, BIAS, X.mean((0, 2, 3)), X.var((0, 2, 3))))


@pytest.mark.parametrize("opset", [14, 15])
def test_batch_normalization_from_14_is_left_to_onnx(opset):
    from onnx.reference import ReferenceEvaluator

    proto = batch_norm(opset, momentum=0.9)
    evaluator = ReferenceEvaluator(proto, new_ops=list(overrides()))
    assert type(evaluator.rt_nodes_[0]).__module__.startswith("onnx.reference")
    assert close(evaluator.run(None, BN_FEEDS)[0], plain(proto, BN_FEEDS)[0])


# -- Softmax, LogSoftmax, Hardmax -1 and -11 ---------------------------------------------------


def coerced_2d(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """The input "coerced into a 2-dimensional tensor with dimensions [a_0 * ... * a_{k-1},
    a_k * ... * a_{n-1}]", normalised per row, and reshaped back."""
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    if kind == "Hardmax":
        out = np.eye(flat.shape[1])[flat.argmax(axis=1)]
    else:
        logs = flat - flat.max(axis=1, keepdims=True)
        logs -= np.log(np.exp(logs).sum(axis=1, keepdims=True))
        out = logs if kind == "LogSoftmax" else np.exp(logs)
    return out.reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("opset", "axis"), [(1, None), (11, None), (12, 2), (11, -2)])
def test_softmax_family_before_13_coerces_to_2d(tmp_path, kind, opset, axis):
    """Softmax-1/-11 (and LogSoftmax, Hardmax, Changelog): "input will be coerced into a
    2-dimensional tensor with dimensions [a_0 * ... * a_{k-1}, a_k * ... * a_{n-1}]"; the axis
    "defaults to one". onnx applies the -13 semantics (one axis, default -1) at every opset.
    """
    attributes = {} if axis is None else {"axis": axis}
    node = helper.make_node(kind, ["x"], ["y"], name="head", **attributes)
    proto = build([node], [value("x", shape=[2, 3, 4, 5])], [value("y", shape=None)], opset)
    expected = coerced_2d(X, 1 if axis is None else axis % 4, kind)
    assert not close(plain(proto, {"x": X})[0], expected)
    (new,) = corrected(proto, {"x": X}, tmp_path)
    assert close(new, expected)
    assert close(new, onnxruntime(proto, {"x": X})[0])


def test_softmax_13_is_left_to_onnx():
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    proto = build([node], [value("x", shape=[2, 3, 4, 5])], [value("y", shape=None)], 13)
    evaluator = ReferenceEvaluator(proto, new_ops=list(overrides()))
    assert type(evaluator.rt_nodes_[0]).__module__ == "onnx.reference.ops.op_softmax"


LIGHT = BACKEND_DATA / "light"


@pytest.mark.skipif(not LIGHT.is_dir(), reason="the onnx wheel ships no light models")
@pytest.mark.parametrize(
    ("name", "op_type"),
    [("light_densenet121.onnx", "BatchNormalization"), ("light_squeezenet.onnx", "Softmax")],
)
def test_light_models_now_agree_with_onnxruntime(name, op_type):
    """light_densenet121 (opset 9 BatchNormalization with momentum) and light_squeezenet
    (Softmax-1 over [1, 1000, 1, 1]: 0.001 per class, not 1.0) were the audit's first findings."""
    loaded = load_model(LIGHT / name, load_weights=True)
    assert op_type in {n.op_type for n in loaded.proto.graph.node}
    feeds = synthetic_samples(Signature.from_graph(loaded.proto.graph), model=loaded.proto)[0].feeds
    theirs = onnxruntime(loaded.proto, dict(feeds))[0]
    assert not close(plain(loaded.proto, dict(feeds))[0], theirs)
    with ReferenceRunner(loaded) as runner:
        (mine,) = runner.infer(feeds).outputs.values()
    if op_type == "Softmax":
        # Every weight is 0.02, so the 1000 logits tie in exact arithmetic (about 6e9 each). How
        # the reference's NumPy convolution rounds each channel depends on the CPU's BLAS kernels
        # (an AMD family 26 breaks the ties by a relative 1e-7, and Softmax turns that into
        # another distribution), so the fix is held to what it changes: one distribution over
        # the 1000 classes, as ONNX Runtime's, where the plain evaluator gives 1.0 to each.
        assert np.isclose(mine.sum(), 1.0) and np.isclose(theirs.sum(), 1.0)
        assert mine.max() < 0.01
        return
    assert close(mine, theirs)


# -- Squeeze and Unsqueeze -1 and -11 ----------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 11])
def test_squeeze_takes_axes_in_any_order(tmp_path, opset):
    """Squeeze-1/-11: "Takes a parameter `axes` with a list of axes to squeeze"; onnx squeezes
    them one at a time, so axes=[2, 1] fails as it did on a tf2onnx model."""
    data = np.arange(3, dtype=np.float32).reshape(3, 1, 1)
    node = helper.make_node("Squeeze", ["x"], ["y"], name="sq", axes=[2, 1])
    proto = build([node], [value("x", shape=[3, 1, 1])], [value("y", shape=None)], opset)
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds"):
        plain(proto, {"x": data})
    (new,) = corrected(proto, {"x": data}, tmp_path)
    assert new.shape == (3,) and close(new, onnxruntime(proto, {"x": data})[0])


@pytest.mark.parametrize("opset", [1, 11])
def test_unsqueeze_takes_axes_in_any_order(tmp_path, opset):
    """Unsqueeze-11: "The order of values in `axes` does not matter and can come in any order."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = helper.make_node("Unsqueeze", ["x"], ["y"], axes=[3, 0])
    proto = build([node], [value("x", shape=[2, 3])], [value("y", shape=None)], opset)
    with pytest.raises(np.exceptions.AxisError):
        plain(proto, {"x": data})
    (new,) = corrected(proto, {"x": data}, tmp_path)
    assert new.shape == (1, 2, 3, 1) and close(new, onnxruntime(proto, {"x": data})[0])


# -- Loop ----------------------------------------------------------------------------------------


def counting_loop(shape: list[int], opset: int) -> onnx.ModelProto:
    """Carries v (starting at zeros) and adds 1 per iteration; the scan output is v before."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["v", "one"], ["v_out"]),
            helper.make_node("Identity", ["v"], ["scan"]),
        ],
        "body",
        [
            value("i", TensorProto.INT64, []),
            value("c", TensorProto.BOOL, []),
            value("v", shape=shape),
        ],
        [
            value("c_out", TensorProto.BOOL, []),
            value("v_out", shape=shape),
            value("scan", shape=shape),
        ],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    node = helper.make_node("Loop", ["M", "cond", "v0"], ["v_final", "scans"], body=body)
    inputs = [
        value("M", TensorProto.INT64, []),
        value("cond", TensorProto.BOOL, []),
        value("v0", shape=shape),
    ]
    return build([node], inputs, [value("v_final", shape=shape), value("scans", shape=None)], opset)


@pytest.mark.parametrize("shape", [[], [2, 3]])
def test_loop_stacks_scan_outputs_along_a_new_axis(tmp_path, shape):
    """Loop (every version), sample code: "user_defined_vals[i] = user_defined_val // accumulate
    scan-output values": N iterations of a [2, 3] value give [N, 2, 3], of a scalar [N]. onnx
    joins them with np.vstack ([N, 1] and [2N, 3])."""
    proto = counting_loop(shape, 16)
    feeds = {"M": np.array(3, np.int64), "cond": np.array(True), "v0": np.zeros(shape, np.float32)}
    expected = np.stack([np.full(shape, i, np.float32) for i in range(3)])
    assert plain(proto, feeds)[1].shape != expected.shape
    _, scans = corrected(proto, feeds, tmp_path)
    assert scans.shape == expected.shape and close(scans, expected)
    assert close(scans, onnxruntime(proto, feeds)[1])


def test_loop_without_iterations_has_empty_scan_outputs(tmp_path):
    proto = counting_loop([2], 13)
    feeds = {"M": np.array(0, np.int64), "cond": np.array(True), "v0": np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match="need at least one array"):
        plain(proto, feeds)
    final, scans = corrected(proto, feeds, tmp_path)
    assert scans.shape == (0, 2) and close(final, np.zeros(2, np.float32))
    assert scans.shape == onnxruntime(proto, feeds)[1].shape


def test_loop_without_cond_runs_the_trip_count(tmp_path):
    """Loop: 'input (trip_count, "") // Note this is analogous to a for loop ... cond = ...; //
    ignored'. onnx runs no iteration (and crashes stacking nothing); ONNX Runtime stops at the
    body's first false condition, a deviation registered as ONNX Runtime's."""
    proto = counting_loop([], 13)
    proto.graph.node[0].input[1] = ""
    proto.graph.input.remove(proto.graph.input[1])
    body = proto.graph.node[0].attribute[0].g
    body.node[0].op_type = "Not"  # the body's condition is false after the first iteration
    feeds = {"M": np.array(4, np.int64), "v0": np.zeros((), np.float32)}
    with pytest.raises(ValueError, match="need at least one array"):
        plain(proto, feeds)
    final, scans = corrected(proto, feeds, tmp_path)
    assert final == 4 and close(scans, np.arange(4, dtype=np.float32))
    assert onnxruntime(proto, feeds)[1].shape == (1,)
    ort_side = [d.wrong for d in known_deviations("Loop", "ai.onnx", 13)]
    assert ort_side == ["reference", "onnxruntime"]


# -- DequantizeLinear-10/-13, RoiAlign-10 -------------------------------------------------------


@pytest.mark.parametrize(("opset", "per_axis"), [(10, False), (13, False), (13, True)])
def test_dequantize_linear_before_19_runs(tmp_path, opset, per_axis):
    """DequantizeLinear-10/-13: "The dequantization formula is y = (x - x_zero_point) *
    x_scale" (-13: per axis along ``axis``, default 1). onnx registers it only from -19."""
    shape = [3] if per_axis else []
    q = RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    scale = RNG.uniform(0.01, 0.1, shape).astype(np.float32)
    zero = np.full(shape, 7, np.uint8)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    inputs = [
        value("x", TensorProto.UINT8, [2, 3, 4]),
        value("s", shape=shape),
        value("z", TensorProto.UINT8, shape),
    ]
    proto = build([node], inputs, [value("y", shape=None)], opset)
    feeds = {"x": q, "s": scale, "z": zero}
    with pytest.raises(RuntimeError, match="No implementation for operator 'DequantizeLinear'"):
        plain(proto, feeds)
    c = (1, 3, 1) if per_axis else ()
    expected = (q.astype(np.int32) - zero.reshape(c)) * scale.reshape(c)
    (new,) = corrected(proto, feeds, tmp_path)
    assert close(new, expected) and close(new, onnxruntime(proto, feeds)[0])


def test_roi_align_10_has_no_half_pixel_shift(tmp_path):
    """RoiAlign-16 added coordinate_transformation_mode: "Use the value 'output_half_pixel' to omit
    the pixel shift for the input (use this for a backward-compatible behavior)", i.e. -10's
    behaviour. onnx applies -22's default 'half_pixel' to -10 nodes. The specification's own
    reference here is onnx's RoiAlign-16 with 'output_half_pixel'."""
    feeds = {
        "x": RNG.standard_normal((1, 2, 8, 8)).astype(np.float32),
        "rois": np.array([[0.5, 0.5, 5.3, 6.1], [1.0, 2.0, 7.0, 7.5]], np.float32),
        "index": np.zeros(2, np.int64),
    }
    inputs = [
        value("x", shape=[1, 2, 8, 8]),
        value("rois", shape=[2, 4]),
        value("index", TensorProto.INT64, [2]),
    ]
    sizes = {"output_height": 3, "output_width": 3, "sampling_ratio": 2}
    old_style = build(
        [helper.make_node("RoiAlign", ["x", "rois", "index"], ["y"], **sizes)],
        inputs,
        [value("y", shape=None)],
        10,
    )
    spec = build(
        [
            helper.make_node(
                "RoiAlign",
                ["x", "rois", "index"],
                ["y"],
                coordinate_transformation_mode="output_half_pixel",
                **sizes,
            )
        ],
        inputs,
        [value("y", shape=None)],
        16,
    )
    expected = plain(spec, feeds)[0]
    assert not close(plain(old_style, feeds)[0], expected)
    (new,) = corrected(old_style, feeds, tmp_path)
    assert close(new, expected) and close(new, onnxruntime(old_style, feeds)[0])


# -- a real export -------------------------------------------------------------------------------


@pytest.mark.torch
def test_torchscript_export_at_opset_12_agrees_with_onnxruntime(tmp_path):
    """A Conv-BatchNorm-ReLU exported by torch's TorchScript exporter at opset 12 writes
    ``momentum`` on its BatchNormalization-9 node: the plain evaluator uses batch statistics."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    net.eval()
    path = tmp_path / "cbr.onnx"
    example = torch.randn(2, 3, 8, 8)
    torch.onnx.export(
        net,
        (example,),
        str(path),
        dynamo=False,
        opset_version=12,
        do_constant_folding=False,
        input_names=["x"],
        output_names=["y"],
    )
    proto = onnx.load(path)
    (bn,) = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert "momentum" in {a.name for a in bn.attribute}
    feeds = {"x": example.numpy()}
    theirs = onnxruntime(proto, feeds)[0]
    assert close(theirs, net(example).detach().numpy())
    assert not close(plain(proto, feeds)[0], theirs)
    with ReferenceRunner(load_model(path)) as runner:
        assert close(runner.infer(feeds).outputs["y"], theirs)


# -- crashes are the evaluator's ----------------------------------------------------------------


def resize_10(name: str = "upscale") -> onnx.ModelProto:
    node = helper.make_node("Resize", ["x", "scales"], ["y"], name=name, mode="nearest")
    return build(
        [node],
        [value("x", shape=[1, 1, 2, 2]), value("scales", shape=[4])],
        [value("y", shape=None)],
        10,
    )


RESIZE_FEEDS = {
    "x": np.ones((1, 1, 2, 2), np.float32),
    "scales": np.array([1, 1, 2, 2], np.float32),
}


def test_a_crash_names_the_node_and_points_to_onnxruntime(tmp_path):
    path = save(resize_10(), tmp_path / "resize10.onnx")
    with ReferenceRunner(load_model(path)) as runner, pytest.raises(ReferenceFailed) as caught:
        runner.infer(RESIZE_FEEDS)
    error = caught.value
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert "node 'upscale' (Resize-10)" in error.message
    assert "output_size is None and scale_factors is None" in error.message  # onnx's own words
    # in the words of the caller: a Python caller's config fields, a command's flags
    assert "against='ort:disable'" in error.hint and "reference='ort:disable'" in error.hint
    with speaking(cli_words), ReferenceRunner(load_model(path)) as runner:
        with pytest.raises(ReferenceFailed) as caught:
            runner.infer(RESIZE_FEEDS)
    hint = caught.value.hint
    assert "--against ort:disable" in hint and "--reference ort:disable" in hint


def test_a_crash_inside_a_subgraph_names_both_nodes(tmp_path):
    inner = resize_10("inner_resize").graph.node[0]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            inner,
            helper.make_node("Identity", ["x"], ["x_out"]),
        ],
        "body",
        [
            value("i", TensorProto.INT64, []),
            value("c", TensorProto.BOOL, []),
            value("x", shape=[1, 1, 2, 2]),
        ],
        [
            value("c_out", TensorProto.BOOL, []),
            value("x_out", shape=[1, 1, 2, 2]),
            value("y", shape=None),
        ],
        initializer=[helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])],
    )
    loop = helper.make_node(
        "Loop", ["M", "cond", "x0"], ["x_final", "ys"], name="outer_loop", body=body
    )
    inputs = [
        value("M", TensorProto.INT64, []),
        value("cond", TensorProto.BOOL, []),
        value("x0", shape=[1, 1, 2, 2]),
    ]
    proto = build([loop], inputs, [value("x_final", shape=None), value("ys", shape=None)], 10)
    feeds = {"M": np.array(2, np.int64), "cond": np.array(True), "x0": RESIZE_FEEDS["x"]}
    with ReferenceRunner(load_model(save(proto, tmp_path / "loop.onnx"))) as runner:
        with pytest.raises(
            ReferenceFailed,
            match=r"node 'outer_loop' \(Loop-1\), inside it node 'inner_resize' \(Resize-10\)",
        ):
            runner.infer(feeds)


def test_an_unknown_domain_says_so_when_loading(tmp_path):
    node = helper.make_node("Tokenize", ["x"], ["y"], domain="my.custom", name="tok")
    proto = model(
        [node], [value("x", shape=[2])], [value("y", shape=[2])], opsets={"": 17, "my.custom": 1}
    )
    with pytest.raises(
        ReferenceFailed, match="only the standard domains .* uses my.custom"
    ) as caught:
        ReferenceRunner(load_model(save(proto, tmp_path / "custom.onnx"))).__enter__()
    assert "node 'tok' (my.custom:Tokenize)" in caught.value.message


def test_a_bug_in_an_override_is_onnxgates_not_the_models(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the override")

    monkeypatch.setattr(fixes, "batch_norm_inference", broken)
    path = save(batch_norm(9), tmp_path / "bn.onnx")
    with ReferenceRunner(load_model(path)) as runner, pytest.raises(InternalError) as caught:
        runner.infer(BN_FEEDS)
    assert "node 'bn' (BatchNormalization-9)" in caught.value.message
    assert (
        "onnxgate's own correction" in caught.value.message
        and "ZeroDivisionError" in caught.value.message
    )


# -- the registry --------------------------------------------------------------------------------


def test_known_deviation_by_operator_version():
    assert schema_version("BatchNormalization", "ai.onnx", 12) == 9
    assert schema_version("Softmax", "", 12) == 11
    assert schema_version("NoSuchOp", "ai.onnx", 17) is None
    bn = known_deviation("BatchNormalization", "ai.onnx", 9)
    assert bn is not None and bn.wrong == "reference" and bn.fixed
    assert known_deviation("BatchNormalization", "ai.onnx", 15) is None
    assert known_deviation("Softmax", "", 11) is not None
    assert known_deviation("Softmax", "ai.onnx", 13) is None
    reduce_max = known_deviation("ReduceMax", "ai.onnx", schema_version("ReduceMax", "", 22))
    assert reduce_max is not None and reduce_max.wrong == "onnxruntime" and not reduce_max.fixed
    assert known_deviation("Softmax", "com.microsoft", 1) is None


def test_every_fixed_deviation_has_an_override_and_no_ort_deviation_is_fixed():
    overridden = {cls.__name__ for cls in overrides()}
    for deviation in DEVIATIONS:
        assert deviation.spec and deviation.summary
        if deviation.wrong == "onnxruntime":
            assert not deviation.fixed
        else:
            assert deviation.fixed == (deviation.op_type in overridden), deviation.op_type


def test_importing_the_fixes_loads_neither_the_evaluator_nor_onnxruntime():
    code = (
        "import sys, onnxgate.runners._reference_fixes as f; "
        "assert f.known_deviation('Softmax', 'ai.onnx', 11); "
        "print('onnx.reference' in sys.modules, 'onnxruntime' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def test_onnxs_own_code_raising_under_an_override_is_the_evaluators(tmp_path):
    """DequantizeLinear-13 is dispatched to onnx's own -19 class: a bad model fails there."""
    scale = numpy_helper.from_array(np.ones(4, np.float32), "s")  # 4 scales for axis 1 of size 3
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, name="dq")
    proto = model(
        [node],
        [value("x", TensorProto.INT8, shape=[2, 3])],
        [value("y", shape=[2, 3])],
        initializers=[scale],
        opsets={"": 13},
        ir=7,
    )
    path = save(proto, tmp_path / "dq.onnx")
    with ReferenceRunner(load_model(path)) as runner, pytest.raises(ReferenceFailed) as caught:
        runner.infer({"x": np.ones((2, 3), np.int8)})
    assert "node 'dq' (DequantizeLinear-13)" in caught.value.message
