"""The runner factory: runtime kinds registered once, and the one place a runner is opened."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from models import mlp, save
from onnxgate.compat.runtime import RuntimeSpec
from onnxgate.contract_store import contract_extras, contract_tensorrt
from onnxgate.errors import ConfigError, InternalError
from onnxgate.model import load_model
from onnxgate.runners import OrtRunner, RunExtras, open_runner, runtimes, worker_command
from onnxgate.runners._isolated import IsolatedOrtRunner
from onnxgate.runners._onnxruntime import open_ort, ort_script, ort_worker
from onnxgate.runners._openvino import OPENVINO
from onnxgate.runners.runtimes import (
    Provider,
    Runtime,
    Script,
    no_kernel_registry,
    packages,
    registered,
    run_script,
    runtime_of,
)
from onnxgate.settings import SessionSettings

ECHO = Script("script_echo", "echo", "the echo script", "onnxgate-echo-")


def test_openvino_and_onnx_runtime_s_packages_are_registered_once_in_the_listed_order():
    assert packages() == (
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-openvino",
        "onnxruntime-directml",
        "onnxruntime-qnn",
        "onnxruntime-web",
        "onnxruntime-node",
    )
    assert runtime_of(RuntimeSpec.parse("onnxruntime-openvino==1.24.1")) is OPENVINO
    assert no_kernel_registry() == ("OpenVINOExecutionProvider",)
    assert len({r.name for r in registered()}) == len(registered())


def test_a_package_no_runtime_registered_is_refused_with_the_registered_ones():
    with pytest.raises(ConfigError) as caught:
        RuntimeSpec.parse("onnxruntime-webgpu==1.24.1")
    assert caught.value.hint == f"Use one of: {', '.join(packages())}."


def test_the_installed_runtime_opens_here_and_another_release_in_its_environment(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    here = open_runner(loaded, SessionSettings(opt_level="basic"))
    assert isinstance(here, OrtRunner) and here.settings.opt_level == "basic"
    assert here.tensorrt is None
    extras = contract_extras(progress=print)
    there = open_runner(loaded, None, runtime="onnxruntime==1.20.1", extras=extras)
    assert isinstance(there, IsolatedOrtRunner)
    assert there.spec == RuntimeSpec("onnxruntime", "1.20.1")
    assert there.tensorrt is contract_tensorrt and there.progress is print


def test_a_tensorrt_runner_opened_without_the_contract_s_options_is_refused(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    for providers in (("tensorrt",), ("TensorrtExecutionProvider", "cuda")):
        options = SessionSettings(providers=providers)
        for runtime in ("installed", "onnxruntime-gpu==1.24.1"):
            with pytest.raises(InternalError, match="without the contract's TensorRT options"):
                open_runner(loaded, options, runtime=runtime)
            with pytest.raises(InternalError):
                open_runner(loaded, options, runtime=runtime, extras=RunExtras(samples=()))
    runner = open_runner(loaded, SessionSettings(providers=("tensorrt",)), extras=contract_extras())
    assert runner.tensorrt is contract_tensorrt
    # providers other than TensorRT need no contract
    assert open_runner(loaded, SessionSettings(providers=("cuda",))).tensorrt is None


def test_a_timing_worker_here_runs_onnxgate_s_worker_with_this_path():
    env: dict[str, str] = {}
    command = worker_command("installed", env)
    assert command[1:] == ["-m", "onnxgate.perf._worker"]
    assert "PYTHONPATH" in env


def test_the_probe_skips_the_kernel_registry_of_the_providers_the_parent_names():
    from onnxgate.compat import _probe_script

    class Capi:
        def get_all_opkernel_def(self) -> list:
            raise AssertionError("read the registry of a build that crashes on it")

    available = ["OpenVINOExecutionProvider", "CPUExecutionProvider"]
    assert _probe_script._kernels(Capi(), available, list(no_kernel_registry())) is None
    with pytest.raises(AssertionError):
        _probe_script._kernels(Capi(), available, [])


def test_a_script_runs_here_on_the_installed_runtime():
    answer = run_script(ECHO, {"model": "m.onnx"}, {"x": np.arange(3)})
    assert answer == {
        "request": {"model": "m.onnx"},
        "arrays": {"x": [0, 1, 2]},
        "python": sys.executable,
    }
    assert run_script(ECHO, {"n": 1})["arrays"] == {}


@pytest.mark.slow
def test_a_script_runs_by_path_in_another_release_s_environment():
    from onnxgate.compat.runtime import ensure_env

    answer = run_script(ECHO, {"n": 1}, {"x": np.arange(2)}, runtime="onnxruntime==1.24.4")
    assert answer["request"] == {"n": 1} and answer["arrays"] == {"x": [0, 1]}
    assert answer["python"] == str(ensure_env(runtimes.RuntimeSpec.parse("onnxruntime==1.24.4")))


def test_provider_lists_are_openvino_s_registration_in_the_order_they_always_had(monkeypatch):
    from onnxgate.check._runtime_rules import _provider_hint
    from onnxgate.compat.providers import install_hint, provided_by, provider_packages
    from onnxgate.doctor._diagnose import gpu_providers

    ov = "OpenVINOExecutionProvider"
    listed = list(provider_packages())
    assert listed[3:6] == ["DmlExecutionProvider", ov, "QNNExecutionProvider"]
    assert len(listed) == 11 and provided_by(ov) == "onnxruntime-openvino"
    assert install_hint(ov).startswith("Install onnxruntime-openvino instead of")
    assert "--runtime onnxruntime-openvino==X.Y.Z" in _provider_hint(ov)
    assert ov in gpu_providers()
    # without its registration, nothing outside runners/_openvino.py knows OpenVINO
    monkeypatch.setattr(runtimes, "_REGISTERED", [r for r in registered() if r is not OPENVINO])
    assert ov not in provider_packages() and ov not in gpu_providers()
    assert provided_by(ov) == "a build of ONNX Runtime that includes it"
    assert _provider_hint(ov).startswith("Remove it from --providers")
    assert no_kernel_registry() == ()


def test_a_new_runtime_is_one_registration_every_list_reads(monkeypatch):
    from onnxgate.check._runtime_rules import _provider_hint
    from onnxgate.compat.providers import provided_by, provider_packages
    from onnxgate.doctor._diagnose import gpu_providers

    npu = Provider(
        "NpuExecutionProvider", "onnxruntime-npu", accelerator=True, kernel_registry=False
    )
    kind = Runtime("npu", ("onnxruntime-npu",), open_ort, ort_worker, ort_script, (npu,))
    monkeypatch.setattr(runtimes, "_REGISTERED", list(registered()))
    runtimes.register(kind)
    assert packages()[-1] == "onnxruntime-npu"
    assert runtime_of(RuntimeSpec.parse("onnxruntime-npu==1.0.0")) is kind
    assert list(provider_packages())[-1] == npu.name and provided_by(npu.name) == "onnxruntime-npu"
    assert "--runtime onnxruntime-npu==X.Y.Z" in _provider_hint(npu.name)
    assert npu.name in gpu_providers()
    assert no_kernel_registry() == ("OpenVINOExecutionProvider", npu.name)
    with pytest.raises(ValueError, match="registered twice"):
        runtimes.register(kind)


def test_a_spec_of_no_registered_package_is_a_config_error():
    with pytest.raises(ConfigError, match="not an ONNX Runtime package"):
        runtimes.runtime_of(RuntimeSpec("onnxruntime-npu", "1.0.0"))


def test_files_only_this_process_writes_are_refused_for_another_runtime(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    extras = RunExtras(save_optimized=tmp_path / "opt.onnx")
    with pytest.raises(InternalError, match="installed ONNX Runtime"):
        open_runner(loaded, None, runtime="onnxruntime==1.20.1", extras=extras)


def test_an_ort_spec_names_providers_without_options(tmp_path):
    from onnxgate.runners import make_runner

    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    with pytest.raises(ConfigError, match="'cpu:foo=1' is not an ONNX Runtime execution provider"):
        make_runner("ort:cpu:foo=1", loaded)
