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

from conftest import CORPUS, ON_CI, needs_corpus, needs_js
from onnxgate.errors import RunFailed
from onnxgate.runners._jstensors import read_tensors, write_tensors

WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"
MNIST = CORPUS / "mnist.onnx"


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


def _types_model(path: Path) -> Path:
    """int64, bool, float16 and string inputs; float, string, int64 and float16 outputs."""
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [3]),
        helper.make_tensor_value_info("half", TensorProto.FLOAT16, [3]),
        helper.make_tensor_value_info("text", TensorProto.STRING, [2]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
        helper.make_tensor_value_info("t", TensorProto.STRING, [2]),
        helper.make_tensor_value_info("big", TensorProto.INT64, [3]),
        helper.make_tensor_value_info("h", TensorProto.FLOAT16, [3]),
    ]
    nodes = [
        helper.make_node("Cast", ["ids"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["flag"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["half"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Sum", ["a", "b", "c"], ["y"]),
        helper.make_node("Identity", ["text"], ["t"]),
        helper.make_node("Identity", ["ids"], ["big"]),
        helper.make_node("Cast", ["y"], ["h"], to=TensorProto.FLOAT16),
    ]
    graph = helper.make_graph(nodes, "types", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_int64_bool_float16_and_string_tensors_cross_both_ways(spec: str, tmp_path: Path) -> None:
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner

    model = load_model(_types_model(tmp_path / "types.onnx"))
    feeds = {
        "ids": np.array([2**40 + 1, -1, 3], np.int64),
        "flag": np.array([True, False, True]),
        "half": np.array([0.5, 1.5, -2], np.float16),
        "text": np.array(["héllo", ""], dtype=object),
    }
    with open_runner(model) as here:
        expected = here.infer(feeds).outputs
    with open_runner(model, runtime=spec) as there:
        got = there.infer(feeds).outputs
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert got[name].dtype == value.dtype, name
        assert (got[name] == value).all(), name


def _leaky(path: Path, alpha: float) -> Path:
    """x -> MatMul -> LeakyRelu(alpha) -> MatMul -> y, with fixed weights."""
    rng = np.random.default_rng(1)
    w1 = onnx.numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w1")
    w2 = onnx.numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("LeakyRelu", ["h"], ["r"], name="leaky", alpha=alpha),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "planted",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@needs_js
def test_a_divergence_planted_in_the_web_copy_is_localized_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web runtime is handed a copy of the model whose LeakyRelu has another alpha (same
    node and tensor names): compare --against onnxruntime-web --localize names that node, and
    replaying it alone on both sides (Python ORT on the model, the web on its copy) shows it
    differs on identical inputs."""
    from onnxgate.compare import CompareConfig, compare
    from onnxgate.model import load_model
    from onnxgate.runners import _js

    model = _leaky(tmp_path / "model.onnx", 0.1)
    planted = load_model(_leaky(tmp_path / "planted.onnx", 0.5))
    opened = _js.JsRunner.__init__

    def perturbed(self: _js.JsRunner, given, spec, *args, **kwargs) -> None:  # noqa: ANN001
        opened(self, planted if given.path == model else given, spec, *args, **kwargs)

    monkeypatch.setattr(_js.JsRunner, "__init__", perturbed)
    report = compare(model, CompareConfig(against=WEB, localize=True))
    assert not report.passed
    assert report.ran["reference"].settings["backend"] == "wasm"
    found = report.first_divergence
    assert found is not None and found.found, report.notes
    assert found.node == "leaky"
    assert found.replay is not None
    assert found.replay.verdict == "differs on identical inputs", found.replay.statement


@needs_js
@needs_corpus(MNIST)
@pytest.mark.parametrize(
    ("variable", "words"),
    [
        ("ONNXGATE_NODE", "apt-get install nodejs npm"),
        ("ONNXGATE_CHROMIUM", "apt-get install chromium"),
    ],
)
def test_a_missing_node_or_chromium_is_exit_3_with_the_install_line(
    variable: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from onnxgate.cli import app

    monkeypatch.setenv(variable, str(tmp_path / "absent"))
    result = CliRunner().invoke(app, ["compare", str(MNIST), "--against", WEB])
    assert result.exit_code == 3, result.output
    assert words in " ".join(result.output.split())


@needs_js
def test_without_node_on_the_path_it_is_exit_3_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from onnxgate.cli import app

    monkeypatch.delenv("ONNXGATE_NODE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    model = _relu(tmp_path / "m.onnx", 13)
    result = CliRunner().invoke(app, ["compare", str(model), "--against", NODE])
    assert result.exit_code == 3, result.output
    assert "Node.js is not installed" in " ".join(result.output.split())


@needs_js
@needs_corpus(MNIST)
@pytest.mark.parametrize("spec", [NODE, WEB])
def test_bench_times_the_javascript_runtime_in_its_driver(spec: str) -> None:
    from typer.testing import CliRunner

    from onnxgate.cli import app

    args = ["bench", str(MNIST), "-r", spec, "--threads", "1", "--runs", "20", "--warmup", "2"]
    args += ["--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["runtime"] == f"{spec.replace('==', ' ')}"
    assert report["session"]["backend"] == ("wasm" if spec == WEB else "cpu")
    assert report["results"][0]["runs"] > 0


def _verify_everywhere(model: Path, threads: int) -> dict:
    """``contract init`` then ``verify -r web -r node --threads N`` on ``model``; the report."""
    from typer.testing import CliRunner

    from onnxgate.cli import app

    if not model.with_suffix(".contract.json").exists():
        made = CliRunner().invoke(app, ["contract", "init", str(model)])
        assert made.exit_code == 0, made.output
    args = ["verify", str(model), "-r", WEB, "-r", NODE, "--threads", str(threads)]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _assert_ran(report: dict, threads: int) -> None:
    ran = {r["runtime"]: r["ran"]["settings"] for r in report["results"]}
    assert ran[WEB]["backend"] == "wasm" and ran[WEB]["intra_op_threads"] == threads
    assert ran[WEB]["cross_origin_isolated"] is True
    assert ran[NODE]["backend"] == "cpu" and ran[NODE]["intra_op_threads"] == threads
    assert all(r["parity"]["passed"] for r in report["results"]), report


@needs_js
@pytest.mark.parametrize("name", ["ultraface_rfb320", "image_classifier32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_corpus_models_verify_on_web_wasm_and_node(name: str, threads: int, tmp_path: Path) -> None:
    source = CORPUS / f"{name}.onnx"
    if not source.exists() and not ON_CI:
        pytest.skip(f"{source} is absent")
    model = tmp_path / source.name
    shutil.copy(source, model)
    _assert_ran(_verify_everywhere(model, threads), threads)


@needs_js
@pytest.mark.slow
@pytest.mark.torch
def test_minilm_verifies_on_web_wasm_at_1_and_2_threads_and_on_node(
    minilm_onnx: Path, tmp_path: Path
) -> None:
    model = tmp_path / "minilm.onnx"
    shutil.copy(minilm_onnx, model)
    for threads in (1, 2):
        _assert_ran(_verify_everywhere(model, threads), threads)


@needs_js
@needs_corpus(MNIST)
def test_webgpu_runs_only_when_asked_and_a_fallback_adapter_only_when_admitted() -> None:
    """Headless Chromium's only WebGPU adapter is SwiftShader, a CPU emulation: refused unless
    the provider option admits it, and then what ran says so. Never wasm instead."""
    from onnxgate.errors import ProviderUnavailable
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    model = load_model(MNIST)
    feeds = {"Input3": np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)}
    with (
        pytest.raises(ProviderUnavailable, match="fallback adapter"),
        open_runner(model, SessionSettings(providers=("webgpu",)), runtime=WEB),
    ):
        pass
    admitted = SessionSettings(providers=("webgpu:allow_fallback_adapter=1",))
    with open_runner(model) as here, open_runner(model, admitted, runtime=WEB) as there:
        expected = here.infer(feeds).outputs["Plus214_Output_0"]
        got = there.infer(feeds).outputs["Plus214_Output_0"]
        ran = there.info().settings
    assert ran["backend"] == "webgpu" and ran["adapter"]["fallback"] is True
    assert np.abs(got - expected).max() < 1e-4


@needs_js
@needs_corpus(MNIST)
@pytest.mark.parametrize(
    ("spec", "providers", "words"),
    [
        (NODE, ("cuda",), "has no cuda provider"),
        (WEB, ("tensorrt",), "has no tensorrt provider"),
        (NODE, ("webgpu",), "found no WebGPU adapter"),
    ],
)
def test_a_provider_the_runtime_cannot_run_is_refused_by_name(
    spec: str, providers: tuple[str, ...], words: str
) -> None:
    from onnxgate.contract_store import contract_extras
    from onnxgate.errors import ProviderUnavailable
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    settings = SessionSettings(providers=providers)
    runner = open_runner(load_model(MNIST), settings, runtime=spec, extras=contract_extras())
    with pytest.raises(ProviderUnavailable, match=words), runner:
        pass


def test_what_needs_a_python_environment_refuses_a_javascript_runtime_by_name() -> None:
    from onnxgate.compat.runtime import ensure_env
    from onnxgate.errors import ConfigError
    from onnxgate.runners.runtimes import RuntimeSpec

    with pytest.raises(ConfigError, match="onnxruntime-web==1.30.0 is not a Python build"):
        ensure_env(RuntimeSpec.parse(WEB))


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_a_model_with_external_data_runs_and_exposes_its_tensors(spec: str, tmp_path: Path) -> None:
    from onnxgate.model import load_model
    from onnxgate.runners import open_runner

    proto = onnx.load(_leaky(tmp_path / "inline.onnx", 0.1))
    external = {"save_as_external_data": True, "location": "weights.bin", "size_threshold": 0}
    onnx.save(proto, tmp_path / "ext.onnx", **external)
    model = load_model(tmp_path / "ext.onnx")
    assert model.external_data
    feeds = {"x": np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)}
    with open_runner(model) as here, open_runner(model, runtime=spec) as there:
        expected, got = here.infer(feeds).outputs, there.infer(feeds).outputs
        every = there.infer_all(feeds)
    assert np.abs(got["y"] - expected["y"]).max() < 1e-5
    assert {"h", "r", "y"} <= set(every)


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_check_measures_the_limits_of_a_javascript_runtime_through_its_probe(spec: str) -> None:
    """``compat.runtime`` probes these runtimes through the driver's probe op: IR and opset
    limits from one-node models, no kernel registry (the hook kernel probing fills)."""
    from onnxgate.compat.runtime import runtime_profile

    profile = runtime_profile(spec)
    assert profile.package == spec.split("==")[0] and profile.version == "1.30.0"
    assert profile.max_ir >= 10 and profile.max_opsets["ai.onnx"] >= 21
    assert profile.kernels is None
    assert profile.loads["ai.onnx:13"] is None


# --- a model that never ends, a refused output, broken containers --------------------------------


def _endless(path: Path) -> Path:
    """A Loop of 2**62 trips: it runs for ever on every runtime."""
    from onnx import numpy_helper

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "one"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1]),
        ],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
        "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [
            numpy_helper.from_array(np.array(2**62, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "c"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _gone(pid: int, seconds: float = 30) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``seconds``: a bound, not a timing."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in "ZX":
            return True
        time.sleep(0.2)
    return False


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_a_request_that_never_ends_is_stopped_at_the_limit_with_its_driver(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.model import load_model
    from onnxgate.runners import _js
    from onnxgate.runners.runtimes import RuntimeSpec

    model = _endless(tmp_path / "endless.onnx")
    with _js.JsRunner(load_model(model), RuntimeSpec.parse(spec)) as runner:
        assert runner._driver is not None
        # the limit as ONNXGATE_JS_TIMEOUT_S=3 sets it, once loaded: starting Chromium may take
        # longer than that on a busy machine
        monkeypatch.setenv("ONNXGATE_JS_TIMEOUT_S", "3")
        runner._driver.timeout = _js.request_timeout()
        driver = runner._driver.proc
        with pytest.raises(RunFailed) as caught:
            runner.infer({"x": np.zeros(1, np.float32)})
        # killed at the limit, not asked to quit (a busy driver reads no quit)
        assert driver.poll() is not None
    message = caught.value.message
    assert str(model) in message and spec in message and "within 3 s" in message, message
    assert "ONNXGATE_JS_TIMEOUT_S" in (caught.value.hint or "")


def test_a_request_limit_that_is_no_number_of_seconds_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from onnxgate.errors import ConfigError
    from onnxgate.runners._js import request_timeout

    monkeypatch.setenv("ONNXGATE_JS_TIMEOUT_S", "soon")
    with pytest.raises(ConfigError, match="ONNXGATE_JS_TIMEOUT_S"):
        request_timeout()


HANGING_CHILD = """
import sys
import numpy as np
from onnxgate.model import load_model
from onnxgate.runners._js import JsRunner
from onnxgate.runners.runtimes import RuntimeSpec

with JsRunner(load_model(sys.argv[1]), RuntimeSpec.parse(sys.argv[2])) as runner:
    print(runner._driver.proc.pid, flush=True)
    runner.infer({"x": np.zeros(1, np.float32)})
"""


@needs_js
@pytest.mark.parametrize("spec", [WEB, NODE])
def test_the_driver_dies_with_onnxgate_killed_during_a_request(spec: str, tmp_path: Path) -> None:
    import signal
    import sys

    model = _endless(tmp_path / "endless.onnx")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", HANGING_CHILD, str(model), spec],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    driver = int(child.stdout.readline())
    browser = _descendants(driver)
    try:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
        assert _gone(driver), f"the driver {driver} outlived onnxgate"
        assert all(_gone(pid) for pid in browser), "the browser outlived onnxgate"
    finally:
        for pid in [driver, *browser]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (the browser the driver started), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


@needs_js
def test_the_web_driver_keeps_no_input_it_served(tmp_path: Path) -> None:
    from onnxgate.model import load_model
    from onnxgate.runners._js import JsRunner
    from onnxgate.runners.runtimes import RuntimeSpec

    model = _relu(tmp_path / "relu.onnx", 13)
    with JsRunner(load_model(model), RuntimeSpec.parse(WEB)) as runner:
        assert runner._driver is not None
        for _ in range(3):
            runner.infer({"x": np.array([-1, 2], np.float32)})
        state = runner._driver.ask({"op": "state"}, "state")
    assert state == {"served": 0}


def _zipmap(path: Path) -> Path:
    graph = helper.make_graph(
        [
            helper.make_node(
                "ZipMap", ["x"], ["z"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]
            )
        ],
        "zm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [
            helper.make_value_info(
                "z",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(
                        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
                    )
                ),
            )
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("spec", [WEB, NODE])
def test_an_output_that_is_no_tensor_is_refused_by_name_before_the_driver_starts(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.errors import SessionFailed
    from onnxgate.model import load_model
    from onnxgate.runners import _js
    from onnxgate.runners.runtimes import RuntimeSpec

    def no_driver(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver started")

    monkeypatch.setattr(_js, "Driver", no_driver)
    runner = _js.JsRunner(load_model(_zipmap(tmp_path / "zipmap.onnx")), RuntimeSpec.parse(spec))
    with pytest.raises(SessionFailed, match="output 'z' is a sequence: onnxgate compares tensors"):
        runner.__enter__()


def test_the_synthetic_inputs_hint_is_left_out_of_a_model_the_runtime_refuses() -> None:
    from onnxgate.data import Synthesized
    from onnxgate.errors import SessionFailed

    assert Synthesized.may_explain(RunFailed("a run failed"))
    assert not Synthesized.may_explain(SessionFailed("no kernel for BertTokenizer"))


def _container(tmp_path: Path, entry: dict, data: bytes = b"\0" * 8, length: int = 0) -> Path:
    import struct

    header = json.dumps({"tensors": [entry]}).encode()
    raw = b"OGTNSR01" + struct.pack("<I", length or len(header)) + header
    raw += b"\0" * (-len(raw) % 8) + data
    (tmp_path / "t.ogt").write_bytes(raw)
    return tmp_path / "t.ogt"


BROKEN = {
    "nbytes beyond the file": ({"offset": 0, "nbytes": 4_000_000_000, "shape": [10**9]}, 0),
    "negative offset": ({"offset": -8, "nbytes": 8, "shape": [2]}, 0),
    "nbytes not the shape's": ({"offset": 0, "nbytes": 8, "shape": [3]}, 0),
    "header beyond the file": ({"offset": 0, "nbytes": 8, "shape": [2]}, 2**32 - 16),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_tensor_container_is_an_internal_error_in_python(
    case: str, tmp_path: Path
) -> None:
    from onnxgate.errors import InternalError

    fields, length = BROKEN[case]
    path = _container(tmp_path, {"name": "a", "dtype": "float32", **fields}, length=length)
    with pytest.raises(InternalError, match="not a valid onnxgate tensor container"):
        read_tensors(path)


@needs_js
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_tensor_container_is_an_internal_error_in_javascript(
    case: str, tmp_path: Path
) -> None:
    from onnxgate.runners._js import DRIVER
    from onnxgate.runners._jsenv import node_binary

    fields, length = BROKEN[case]
    path = _container(tmp_path, {"name": "a", "dtype": "float32", **fields}, length=length)
    script = (
        f"import {{ decode }} from {json.dumps((DRIVER.parent / 'core.mjs').as_uri())};\n"
        "import { readFileSync } from 'node:fs';\n"
        f"try {{ decode(new Uint8Array(readFileSync({json.dumps(str(path))}))); "
        "console.log('decoded'); }\n"
        "catch (err) { console.log(err.kind, err.message); }\n"
    )
    done = subprocess.run(
        [str(node_binary()), "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith("InternalError not a valid onnxgate tensor container"), done


def test_the_last_words_of_a_dead_driver_carry_no_javascript_stack() -> None:
    from onnxgate.runners._js import last_words

    stderr = (
        "node:internal/process/promises:289\n"
        "            triggerUncaughtException(err, true /* fromPromise */);\n"
        "            ^\n\n"
        "browserContext.waitForEvent: Target page, context or browser has been closed\n"
        "    at Object.call (/x/driver.mjs:304:33)\n"
        "    at main (/x/driver.mjs:356:35) {\n"
        "  log: []\n"
        "}\n\n"
        "Node.js v20.20.2\n"
    )
    words = last_words(stderr)
    assert "browserContext.waitForEvent: Target page, context or browser has been closed" in words
    assert words == ["browserContext.waitForEvent: Target page, context or browser has been closed"]
