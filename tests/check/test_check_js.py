"""check against ONNX Runtime's JavaScript packages: kernels probed with one-node models.

These run the real packages: Node.js with onnxruntime-node, and onnxruntime-web in a headless
Chromium (WebGPU on Chromium's SwiftShader adapter). Without Node.js, npm or Chromium they skip,
except under CI, where they fail.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import CORPUS, needs_corpus, needs_js
from onnxgate.check import CheckConfig, check_model

WEB = "onnxruntime-web==1.30.0"
NODE = "onnxruntime-node==1.30.0"


def _one_node(
    tmp_path: Path, name: str, op: str, elem: int, *, out: int | None = None, **attrs
) -> Path:
    inputs = [
        helper.make_tensor_value_info(f"x{i}", elem, ["n", 3])
        for i in range(2 if op == "Add" else 1)
    ]
    y = helper.make_tensor_value_info("y", out or elem, ["n", 3])
    graph = helper.make_graph(
        [helper.make_node(op, [i.name for i in inputs], ["y"], name=f"the_{op.lower()}", **attrs)],
        name,
        inputs,
        [y],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _codes(report) -> dict[str, str]:
    return {f.code: f.message for f in report.findings}


@needs_js
@needs_corpus(CORPUS / "mnist.onnx")
@pytest.mark.parametrize("runtime", [WEB, NODE])
def test_a_corpus_model_has_every_kernel_on_the_javascript_builds(runtime: str) -> None:
    report = check_model(CORPUS / "mnist.onnx", CheckConfig(runtime=runtime))
    assert report.passed and report.predicted_load
    assert not [f for f in report.findings if f.code.startswith("OP")], report.findings


@needs_js
@needs_corpus(CORPUS / "superres_prepost_op18.onnx")
def test_a_custom_operator_the_runtime_lacks_is_op003_even_when_its_output_types_are_unknown() -> (
    None
):
    report = check_model(CORPUS / "superres_prepost_op18.onnx", CheckConfig(runtime=WEB))
    unknown = [f.message for f in report.findings if f.code == "OP003"]
    assert len(unknown) == 2, report.findings  # DecodeImage and EncodeImage
    assert "DecodeImage(-1) is not a registered function/op" in unknown[0] + unknown[1]
    assert not report.predicted_load


@needs_js
@pytest.mark.parametrize("runtime", [WEB, NODE])
def test_a_type_with_no_kernel_is_op001_with_the_runtimes_own_line(
    tmp_path: Path, runtime: str
) -> None:
    path = _one_node(tmp_path, "bf16", "Relu", TensorProto.BFLOAT16)
    report = check_model(path, CheckConfig(runtime=runtime))
    codes = _codes(report)
    assert "OP001" in codes, report.findings
    assert codes["OP001"].startswith("node the_relu: Relu-14")
    assert "Could not find an implementation for Relu(14)" in codes["OP001"]
    assert not report.predicted_load


@needs_js
@pytest.mark.parametrize("runtime", [WEB, NODE])
def test_a_float8_node_is_probed_inside_float32_casts_as_it_loads_inside_a_model(
    tmp_path: Path, runtime: str
) -> None:
    """The JavaScript API has no float8 tensors: a session with float8 outputs is refused
    ("unsupported data type: 17"), but the node loads inside a model, so that is no finding."""
    path = _one_node(
        tmp_path, "f8", "Cast", TensorProto.FLOAT, out=TensorProto.FLOAT8E4M3FN,
        to=TensorProto.FLOAT8E4M3FN,
    )  # fmt: skip
    report = check_model(path, CheckConfig(runtime=runtime))
    assert not [f for f in report.findings if f.code.startswith("OP")], report.findings


@needs_js
def test_a_load_refused_for_another_reason_is_op010_not_a_kernel_gap(tmp_path: Path) -> None:
    path = _one_node(tmp_path, "attr", "Relu", TensorProto.FLOAT, bogus=1)
    codes = _codes(check_model(path, CheckConfig(runtime=WEB)))
    assert "OP001" not in codes
    assert "Relu-14 (ai.onnx) alone does not load on onnxruntime-web==1.30.0" in codes["OP010"]
    assert "bogus" in codes["OP010"]


@needs_js
def test_a_node_webgpu_lacks_falls_back_to_wasm_as_op002(tmp_path: Path) -> None:
    path = _one_node(tmp_path, "double", "Add", TensorProto.DOUBLE)
    on_wasm = check_model(path, CheckConfig(runtime=WEB))
    assert not [f for f in on_wasm.findings if f.code.startswith("OP")], on_wasm.findings
    report = check_model(path, CheckConfig(runtime=WEB, providers=("webgpu",)))
    codes = _codes(report)
    assert report.providers == ["WebGpuExecutionProvider", "CPUExecutionProvider"]
    assert "Add-14 does not run on WebGpuExecutionProvider" in codes["OP002"]
    assert "falls back to CPUExecutionProvider" in codes["OP002"]
    assert "fallback to CPU EP has been explicitly disabled" in codes["OP002"]
    assert "OP001" not in codes


@needs_js
def test_a_second_check_answers_from_the_cache_without_starting_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnxgate.runners import _js

    path = _one_node(tmp_path, "cached", "Relu", TensorProto.BFLOAT16)
    first = check_model(path, CheckConfig(runtime=NODE))
    started = []
    real = _js.Driver

    def counting(*args, **kwargs):
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(_js, "Driver", counting)
    second = check_model(path, CheckConfig(runtime=NODE))
    assert started == []
    assert _codes(second) == _codes(first)
    assert "OP001" in _codes(second)


def test_a_provider_that_cannot_run_a_relu_is_refused_not_reported_as_kernel_gaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime-node's WebGPU with no adapter fails every load; that is no coverage claim."""
    from types import SimpleNamespace

    from onnxgate.compat import probed
    from onnxgate.errors import ProviderUnavailable

    no_adapter = "Failed to get a WebGPU adapter: No supported adapters"

    def prober(spec, models, progress, *, backends):
        return {
            "backends": [
                {label: (no_adapter if "providers" in b else None) for label in models}
                for b in backends
            ]
        }

    monkeypatch.setattr(probed, "runtime_of", lambda spec: SimpleNamespace(probe=prober))
    monkeypatch.setenv("ONNXGATE_CACHE_DIR", str(tmp_path))
    path = _one_node(tmp_path, "plain", "Relu", TensorProto.FLOAT)
    with pytest.raises(ProviderUnavailable, match=no_adapter):
        check_model(path, CheckConfig(runtime=NODE, providers=("webgpu",)))
    assert not list((tmp_path / "kernels").rglob("*.json"))  # nothing cached from it
