"""The one settings applier: every setting reaches ONNX Runtime, and what ran is read back."""

from __future__ import annotations

import numpy as np
import pytest

from models import mlp, save
from onnxgate.compat.providers import parse_providers
from onnxgate.errors import ConfigError, ProviderFailed, ProviderUnavailable
from onnxgate.model import load_model
from onnxgate.runners import OrtRunner, _ortlog, _session
from onnxgate.runners._refusal import refusal
from onnxgate.settings import SessionSettings

# ONNX Runtime's own words, as onnxruntime-openvino 1.24.1 logged and raised them here
BF16_LOG = [
    "/onnxruntime/onnxruntime/core/providers/openvino/openvino_parser_utils.cc:101 static "
    "std::string onnxruntime::openvino_ep::OpenVINOParserUtils::ParsePrecision(const "
    "onnxruntime::ProviderOptions&, std::string&, const std::string&) [ERROR] [OpenVINO] "
    "Unsupported inference precision is selected. CPU only supports FP32, ACCURACY.",
    "Failed to create OpenVINOExecutionProvider. Please refer https://onnxruntime.ai/docs/"
    "execution-providers/OpenVINO-ExecutionProvider.html#requirements to ensure all "
    "dependencies are met.",
]
BAD_OPTION = (
    "/onnxruntime/onnxruntime/python/onnxruntime_pybind_state.cc:1053 "
    "std::shared_ptr<onnxruntime::IExecutionProviderFactory> onnxruntime::python::"
    "CreateExecutionProviderFactoryInstance(const onnxruntime::SessionOptions&, const "
    "std::string&, const onnxruntime::ProviderOptionsMap&) Invalid OpenVINO EP option: foo"
)
OV, CPU = "OpenVINOExecutionProvider", "CPUExecutionProvider"


def test_every_setting_reaches_the_session_and_is_read_back(tmp_path):
    loaded = load_model(save(mlp(), tmp_path / "mlp.onnx"))
    options = SessionSettings(
        opt_level="basic",
        threads=1,
        inter_op_threads=2,  # with one inter-op thread ONNX Runtime runs sequential anyway
        parallel=True,
        cpu_mem_arena=False,
        mem_pattern=False,
        session_config={"session.intra_op.allow_spinning": "0"},
    )
    with OrtRunner(loaded, options) as runner:
        runner.infer({"x": np.ones((2, 4), np.float32)})
        ran = runner.info()
    assert ran.runtime == "onnxruntime" and ran.version
    applied = ran.settings
    assert applied["providers"] == [CPU]
    assert applied["optimization"] == "basic"
    assert (applied["intra_op_threads"], applied["inter_op_threads"]) == (1, 2)
    assert applied["parallel"] is True
    assert applied["cpu_mem_arena"] is False and applied["mem_pattern"] is False
    assert applied["config"] == {"session.intra_op.allow_spinning": "0"}


def test_the_defaults_are_onnx_runtimes_own(tmp_path):
    session = _session.create(str(save(mlp(), tmp_path / "mlp.onnx")), {"providers": [CPU]})
    applied = _session.applied(session, {})
    assert applied["optimization"] == "all" and applied["intra_op_threads"] == 0
    assert applied["parallel"] is False and applied["config"] == {}


def test_an_unknown_level_and_a_missing_provider_are_refused(tmp_path):
    path = str(save(mlp(), tmp_path / "mlp.onnx"))
    with pytest.raises(_session.Refused) as level:
        _session.create(path, {"optimization": "max"})
    assert level.value.kind == "level" and "'max'" in level.value.message
    with pytest.raises(_session.Refused) as missing:
        _session.create(path, {"providers": ["CUDAExecutionProvider"]})
    assert missing.value.kind == "unavailable"
    assert missing.value.provider == "CUDAExecutionProvider"
    error = refusal(missing.value.to_dict(), runtime="onnxruntime 1.32.0")
    assert isinstance(error, ProviderUnavailable) and "onnxruntime-gpu" in error.message


def test_a_refused_model_is_a_session_refusal(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a model")
    with pytest.raises(_session.Refused) as caught:
        _session.create(str(path), {})
    assert caught.value.kind == "session"


def test_a_provider_that_did_not_start_is_named_with_onnx_runtimes_reason():
    assert _session._why(_ortlog.clean("\n".join(BF16_LOG)), OV) == (
        "[OpenVINO] Unsupported inference precision is selected. CPU only supports FP32, "
        "ACCURACY. | " + BF16_LOG[1]
    )
    error = refusal(
        {"error": "provider", "message": "x did not start", "provider": OV},
        runtime="onnxruntime-openvino 1.24.1",
    )
    assert isinstance(error, ProviderFailed) and int(error.exit_code) == 3
    assert "Nothing ran on CPU in its place" in error.hint


def test_a_provider_factory_error_is_the_providers_not_the_models():
    assert _session._failed_provider(BAD_OPTION, [OV, CPU]) == OV
    assert (
        _session._failed_provider("Load model from x failed: Protobuf parsing", [OV, CPU]) is None
    )
    assert _session._after_source(BAD_OPTION) == "Invalid OpenVINO EP option: foo"
    assert _session._after_source("plain words") == "plain words"


def test_log_lines_lose_colour_and_prefix():
    def write():
        import os

        os.write(
            2,
            b"\x1b[0;93m2026-11-24 13:51:35.05 [W:onnxruntime:Default, x.cc:10 F] "
            b"Failed to create X.\x1b[m\n",
        )

    _, lines = _ortlog.captured(write)
    assert lines == ["Failed to create X."]


def test_only_onnx_runtimes_lines_are_kept_when_asked_and_captures_do_not_overlap():
    """A progress display writing to stderr meanwhile must not become ONNX Runtime's reason."""
    import os
    import threading

    def write(text: bytes):
        return lambda: os.write(2, text)

    spinner = b"\x1b[2K working: placing m.onnx on OpenVINOExecutionProvider ...\n"
    line = b"2026-11-24 13:51:35.05 [E:onnxruntime:Default, x.cc:1 F] [ERROR] [OpenVINO] No.\n"
    _, lines = _ortlog.captured(write(spinner + line), ort_only=True)
    assert lines == ["[OpenVINO] No."]
    before = os.readlink("/proc/self/fd/2")
    threads = [
        threading.Thread(target=_ortlog.captured, args=(write(b"x\n" * 1000),)) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert os.readlink("/proc/self/fd/2") == before  # stderr is where it was


def test_providers_take_their_options_inline():
    assert parse_providers(["openvino:precision=FP32,num_of_threads=2,cpu"]) == (
        ["openvino", "cpu"],
        {"openvino": {"precision": "FP32", "num_of_threads": "2"}},
    )
    assert parse_providers(["cuda", "cpu"]) == (["cuda", "cpu"], {})
    for bad in ("precision=FP32", "openvino:", "openvino:x"):
        with pytest.raises(ConfigError, match="--providers item"):
            parse_providers([bad])
