"""ONNX Runtime's JavaScript packages as runtimes: onnxruntime-web in a real headless Chromium,
onnxruntime-node in the machine's Node.js, through the one driver (``runners/js/driver.mjs``).

The tests need Node.js, npm (the first run installs the packages into the shared environment
folder) and Chromium; without them they skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import CORPUS, ON_CI, needs_corpus
from onnxgate.errors import RunFailed
from onnxgate.runners._jstensors import read_tensors, write_tensors

WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"
MNIST = CORPUS / "mnist.onnx"
HAVE_JS = bool(shutil.which("node") and shutil.which("npm") and shutil.which("chromium"))
needs_js = pytest.mark.skipif(
    not HAVE_JS and not ON_CI, reason="Node.js, npm or Chromium is not installed"
)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_tensor_container_keeps_every_type_as_raw_bytes(tmp_path: Path) -> None:
    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "f16": np.array([1.5, -2.25, 65504], dtype=np.float16),
        "i64": np.array([[2**62, -3]], dtype=np.int64),
        "flag": np.array([True, False, True]),
        "u8": np.array([255, 0], dtype=np.uint8),
        "text": np.array([["a", "héllo"], ["", "z"]], dtype=object),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    write_tensors(tmp_path / "t.ogt", arrays, runtime=WEB)
    back = read_tensors(tmp_path / "t.ogt")
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype, name
        assert back[name].shape == array.shape, name
        assert (back[name] == array).all(), name


def test_a_type_the_javascript_api_lacks_is_refused_by_input_name(tmp_path: Path) -> None:
    with pytest.raises(RunFailed, match="input z is complex64: onnxruntime-web"):
        write_tensors(tmp_path / "t.ogt", {"z": np.zeros(2, np.complex64)}, runtime=WEB)


def _driver(spec: str, requests: list[dict]) -> list[dict]:
    """The driver's answers to ``requests``, over its stdin and stdout."""
    from onnxgate.runners._js import driver_command
    from onnxgate.runners.runtimes import RuntimeSpec

    env = dict(os.environ)
    command = driver_command(RuntimeSpec.parse(spec), env)
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        command, input=lines, capture_output=True, text=True, env=env, timeout=300, check=True
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def _relu(path: Path, opset: int) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 30 else 13
    onnx.save(model, path)
    return path


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_probe_says_which_files_load(spec: str, tmp_path: Path) -> None:
    good = _relu(tmp_path / "good.onnx", 13)
    bad = _relu(tmp_path / "bad.onnx", 99)
    (answer,) = _driver(spec, [{"op": "probe", "models": [str(good), str(bad)], "settings": {}}])
    loads = answer["ok"]["loads"]
    assert loads[str(good)] is None
    assert "99" in loads[str(bad)] or "opset" in loads[str(bad)].lower(), loads[str(bad)]


@needs_js
@needs_corpus(MNIST)
@pytest.mark.parametrize(
    ("spec", "threads", "backend"), [(WEB, 1, "wasm"), (WEB, 2, "wasm"), (NODE, 0, "cpu")]
)
def test_mnist_matches_python_onnxruntime(spec: str, threads: int, backend: str) -> None:
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    model = load_model(MNIST)
    feeds = {"Input3": np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)}
    with open_runner(model) as here:
        expected = here.infer(feeds).outputs["Plus214_Output_0"]
    with open_runner(model, SessionSettings(threads=threads), runtime=spec) as there:
        got = there.infer(feeds).outputs["Plus214_Output_0"]
        info = there.info()
    assert info.settings["backend"] == backend
    if threads:
        assert info.settings["intra_op_threads"] == threads
    assert np.abs(got - expected).max() < 1e-5
    assert _cosine(got, expected) > 0.999999
