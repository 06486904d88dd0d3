"""TensorFlow as a runner and a tensor tap, in its isolated environment (``tf:`` specs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxgate.compare import compare_runners
from onnxgate.compare._replay import lone_node_model
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, RunFailed, RuntimeEnvError
from onnxgate.model import load_model
from onnxgate.runners import OrtRunner, TfToolchain, make_runner
from onnxgate.runners._tf import TfRunner, in_onnx_layout
from onnxgate.settings import SessionSettings, Tolerances

X = np.random.default_rng(0).random((3, 4), dtype=np.float32)


def _onnx(tmp_path):
    """A tiny ONNX model, for the refusals that happen before TensorFlow starts."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(onnx.helper.make_model(graph), path)
    return load_model(path)


def test_a_path_that_is_no_tensorflow_model_is_refused_by_name(tmp_path):
    loaded = _onnx(tmp_path)
    with pytest.raises(ConfigError, match=r"'.*nowhere' does not exist"):
        make_runner(f"tf:{tmp_path / 'nowhere'}", loaded)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty is not a SavedModel: it holds no saved_model.pb"):
        make_runner(f"tf:{tmp_path / 'empty'}", loaded)
    with pytest.raises(ConfigError, match=r"relu.onnx is neither a SavedModel folder nor a Keras"):
        make_runner(f"tf:{loaded.path}", loaded)


def test_the_runner_asks_for_the_toolchain_it_was_given(tmp_path, monkeypatch):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ONNXGATE_ENV_DIR", str(blocker / "envs"))  # no environment can be built
    runner = TfRunner(
        str(tmp_path / "sm"), _onnx(tmp_path), toolchain=TfToolchain(tensorflow="2.20.0")
    )
    with pytest.raises(RuntimeEnvError) as caught, runner:
        pass
    assert "tensorflow-cpu==2.20.0" in " ".join(caught.value.message.split())


def test_channels_last_tensors_take_the_onnx_layout_only_when_that_alone_fits():
    nhwc = np.arange(2 * 6 * 7 * 5, dtype=np.float32).reshape(2, 6, 7, 5)
    moved = in_onnx_layout(nhwc, (None, 5, 6, 7))
    np.testing.assert_array_equal(moved, nhwc.transpose(0, 3, 1, 2))
    assert in_onnx_layout(nhwc, (None, 6, 7, 5)) is nhwc  # already the declared shape
    assert in_onnx_layout(nhwc, (2, 35, 6)) is None  # another tensor by the same name
    assert in_onnx_layout(nhwc, None) is nhwc  # nothing declared: as it is
    kernel = np.zeros((3, 3, 5, 4), np.float32)  # TensorFlow's (h, w, in, out)
    assert in_onnx_layout(kernel, (4, 5, 3, 3)) is None  # only weights are kernels
    assert in_onnx_layout(kernel, (4, 5, 3, 3), weight=True).shape == (4, 5, 3, 3)


@pytest.mark.slow
def test_a_saved_model_runs_taps_its_tensors_by_name_and_replays_a_node(tf_reference_models):
    loaded = load_model(tf_reference_models / "sm.onnx")
    with (
        OrtRunner(loaded, SessionSettings()) as ort,
        make_runner(f"tf:{tf_reference_models / 'sm'}", loaded) as tf,
    ):
        assert isinstance(tf, TfRunner)
        ran = tf.info()
        assert (ran.runtime, ran.version) == ("tensorflow", "2.21.0")
        assert ran.settings["signature"] == "serving_default"
        assert ran.settings["outputs matched"] == "by name"
        (y,) = tf.infer({"x": X}).outputs.values()
        np.testing.assert_allclose(y, ort.infer({"x": X}).outputs["logits"], atol=1e-5)

        # every ONNX node output is a tensor of tf2onnx's frozen graph, fetched by name
        found = tf.infer_all({"x": X})
        mine = ort.infer_all({"x": X})
        names = [o for node in loaded.proto.graph.node for o in node.output]
        assert "StatefulPartitionedCall/Relu:0" in names
        for name in names:
            np.testing.assert_allclose(found[name], mine[name], atol=1e-5, err_msg=name)
        # the weights too, under the initializers' names
        bias = "StatefulPartitionedCall/add/ReadVariableOp:0"
        weights = {t.name: onnx.numpy_helper.to_array(t) for t in loaded.proto.graph.initializer}
        np.testing.assert_array_equal(found[bias], weights[bias])

        # a node alone: TensorFlow fed the tensor it reads, fetching the one it writes
        relu = next(n for n in loaded.proto.graph.node if n.op_type == "Relu")
        lone = lone_node_model(loaded, relu, list(relu.input), found)
        given = {relu.input[0]: -found[relu.input[0]]}
        with tf.sibling(lone) as alone:
            (out,) = alone.infer(given).outputs.values()
        np.testing.assert_array_equal(out, np.maximum(-found[relu.input[0]], 0))
        # the worker outlives its siblings
        assert tf.infer({"x": X}).outputs

        # TensorFlow's own failure names the model, without a traceback
        with pytest.raises(RunFailed, match=r"tf:.*sm: InvalidArgumentError"):
            tf.infer({"x": np.ones((2, 5), np.float32)})
        # and so does its death
        assert tf._worker is not None
        tf._worker.proc.kill()
        with pytest.raises(
            RunFailed, match=r"TensorFlow ended \(exit code -9\) during 'run' on tf:"
        ):
            tf.infer({"x": X})


@pytest.mark.slow
def test_a_signature_with_other_input_names_is_refused_listing_both(tf_reference_models):
    loaded = load_model(tf_reference_models / "sm.onnx")
    with pytest.raises(ConfigError) as raised:
        with make_runner(f"tf:{tf_reference_models / 'renamed'}", loaded):
            pass
    message = raised.value.message
    assert "has input(s) x that" in message
    assert "ONNX inputs x; TensorFlow inputs features" in message
    with pytest.raises(ConfigError, match=r"has no signature 'other' \(it has serving_default\)"):
        with make_runner(f"tf:{tf_reference_models / 'sm'}#other", loaded):
            pass


@pytest.mark.slow
def test_a_keras_file_is_compared_with_outputs_matched_by_position(tf_reference_models, tmp_path):
    # the Keras model's one output is output_0, as in the conversion: rename the ONNX one
    proto = onnx.load(tf_reference_models / "keras.onnx")
    (last,) = (n for n in proto.graph.node if "output_0" in n.output)
    last.output[0] = proto.graph.output[0].name = "scores"
    onnx.save(proto, tmp_path / "renamed.onnx")
    loaded = load_model(tmp_path / "renamed.onnx")
    samples = [Sample("batch=3", {"x": X}), Sample("batch=1", {"x": X[:1]})]
    tf = make_runner(f"tf:{tf_reference_models / 'model.keras'}", loaded)
    ort = OrtRunner(loaded, SessionSettings())
    report = compare_runners(ort, tf, samples, signature=tf.input_specs(), tolerances=Tolerances())
    assert report.passed
    (output,) = report.outputs
    assert output.name == "scores" and output.max_abs < 1e-5
    assert report.ran["reference"].settings["outputs matched"] == "by position"
    assert report.ran["reference"].settings["kind"] == "keras"


def test_a_keras_file_with_custom_layers_names_the_class_and_the_way_round(tf_models, tmp_path):
    runner = make_runner(f"tf:{tf_models / 'custom.keras'}", _onnx(tmp_path))
    with pytest.raises(ConfigError) as caught, runner:
        pass
    assert "custom Keras class ScaledSoftsign" in caught.value.message
    assert "format='tf_saved_model'" in (caught.value.hint or "")
