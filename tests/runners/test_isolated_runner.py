"""An older ONNX Runtime as a runner, in its isolated environment, on a known list of samples."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import mlp, model, relu, save, value
from onnxgate.compat.runtime import RuntimeSpec
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, ProviderUnavailable, RunFailed, SessionFailed
from onnxgate.model import load_model
from onnxgate.runners._isolated import IsolatedOrtRunner
from onnxgate.settings import SessionSettings

pytestmark = pytest.mark.slow
MIDDLE = RuntimeSpec.parse("onnxruntime==1.20.1")
OLD = RuntimeSpec.parse("onnxruntime==1.16.3")


def samples(*batches: int) -> list[Sample]:
    rng = np.random.default_rng(0)
    return [
        Sample(f"batch={b}", {"x": rng.standard_normal((b, 4)).astype(np.float32)}) for b in batches
    ]


def test_runs_every_sample_in_one_go_and_replays_them(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    arrays = {t.name: numpy_helper.to_array(t) for t in loaded.proto.graph.initializer}
    given = samples(2, 5)
    with IsolatedOrtRunner(loaded, MIDDLE, given) as runner:
        assert runner.version == "1.20.1"
        for sample in given:
            (y,) = runner.infer(sample.feeds).outputs.values()
            x = sample.feeds["x"]
            np.testing.assert_allclose(y, np.maximum(x @ arrays["W"] + arrays["b"], 0), atol=1e-6)
        # feeds it was not given cost one more subprocess, with the same settings
        other = np.full((1, 4), -1.0, np.float32)
        (y,) = runner.infer({"x": other}).outputs.values()
        np.testing.assert_allclose(y, np.maximum(other @ arrays["W"] + arrays["b"], 0), atol=1e-6)
        ran = runner.info()
        assert (ran.runtime, ran.version) == ("onnxruntime", "1.20.1")
        assert ran.settings["providers"] == ["CPUExecutionProvider"]


def test_a_session_the_old_release_refuses_is_session_failed(tmp_path):
    loaded = load_model(save(relu(opsets={"": 20}, ir=9), tmp_path / "opset20.onnx"))
    with pytest.raises(SessionFailed, match="onnxruntime 1.16.3 cannot create a session"):
        with IsolatedOrtRunner(loaded, OLD, samples(2)):
            pass


def test_a_failing_run_is_run_failed(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    inputs = [value("x"), value("shape", TensorProto.INT64, shape=(2,))]
    loaded = load_model(save(model(nodes, inputs, [value("y", shape=None)]), tmp_path / "r.onnx"))
    feeds = {"x": np.ones((2, 4), np.float32), "shape": np.array([3, 3], np.int64)}
    with pytest.raises(RunFailed, match="onnxruntime 1.20.1 failed"):
        with IsolatedOrtRunner(loaded, MIDDLE, [Sample("bad", feeds)]):
            pass


def test_providers_are_checked_against_that_release(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    with pytest.raises(ProviderUnavailable, match="CUDAExecutionProvider") as caught:
        with IsolatedOrtRunner(loaded, MIDDLE, samples(2), SessionSettings(providers=("CUDA",))):
            pass
    assert "onnxruntime-gpu" in caught.value.hint
    # a level no release has, as a record or request may hold it: refused before any subprocess
    max_level = SessionSettings.from_wire({"optimization": "max"})
    with pytest.raises(ConfigError, match="session.opt_level 'max'"):
        IsolatedOrtRunner(loaded, MIDDLE, samples(2), max_level)


def test_every_setting_reaches_the_other_release(tmp_path):
    """Threads and config entries used to be dropped on the way to another release."""
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    options = SessionSettings(
        opt_level="basic", threads=1, session_config={"session.intra_op.allow_spinning": "0"}
    )
    with IsolatedOrtRunner(loaded, MIDDLE, samples(2), options) as runner:
        applied = runner.info().settings
    assert applied["optimization"] == "basic" and applied["intra_op_threads"] == 1
    assert applied["config"] == {"session.intra_op.allow_spinning": "0"}


def test_an_optimisation_level_the_release_lacks_is_refused(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    with pytest.raises(ConfigError, match="onnxruntime 1.16.3 has no optimisation level 'layout'"):
        with IsolatedOrtRunner(loaded, OLD, samples(2), SessionSettings(opt_level="layout")):
            pass
