"""Placement audit against the real ONNX Runtime: recorded partition, profiled run, requirements."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from conftest import CORPUS
from models import save
from onnxgate.cli import app
from onnxgate.errors import ProviderUnavailable
from onnxgate.placement import placement

MNIST = CORPUS / "mnist.onnx"
needs_mnist = pytest.mark.skipif(not MNIST.exists(), reason="../shared/corpus is absent")


def _gelu_model() -> onnx.ModelProto:
    """MatMul, then ONNX Runtime's own com.microsoft Gelu: a custom-domain node."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.1] * 16)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Gelu", ["h"], ["y"], name="contrib_gelu", domain="com.microsoft"),
        ],
        "g",
        [x],
        [y],
        [w],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@needs_mnist
def test_every_node_is_counted_on_cpu():
    report = placement(MNIST)
    assert report.method == "assignment"
    assert report.assignments == {"CPUExecutionProvider": len(report.nodes)}
    assert report.fallback == [] and report.passed
    assert report.op_types["CPUExecutionProvider"]["Conv"] == 2


@needs_mnist
def test_profiling_sees_the_same_providers_as_the_recorded_partition():
    profiled = placement(MNIST, method="profiling", opt_level="basic")
    recorded = placement(MNIST, method="assignment", opt_level="basic")
    assert (profiled.method, recorded.method) == ("profiling", "assignment")
    assert sorted(n.node for n in recorded.nodes) == sorted(n.node for n in profiled.nodes)
    assert {n.provider for n in profiled.nodes} == {"CPUExecutionProvider"}


@needs_mnist
def test_a_provider_that_claims_nothing_shows_every_node_falling_back():
    report = placement(MNIST, "azure", require="azure")
    assert report.requested == ["AzureExecutionProvider", "CPUExecutionProvider"]
    assert len(report.fallback) == len(report.nodes) > 0
    assert not report.passed and len(report.violations) == len(report.nodes)
    allowed = placement(
        MNIST, "azure", require="azure", allow_ops={n.op_type for n in report.nodes}
    )
    assert allowed.passed


def test_a_custom_domain_node_is_shown_where_it_ran(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    report = placement(path, opt_level="disable")
    gelu = next(n for n in report.nodes if n.node == "contrib_gelu")
    assert (gelu.domain, gelu.op_type, gelu.provider) == (
        "com.microsoft",
        "Gelu",
        "CPUExecutionProvider",
    )


def test_a_missing_gpu_provider_is_an_environment_error(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    with pytest.raises(ProviderUnavailable, match="onnxruntime-gpu"):
        placement(path, require="CUDAExecutionProvider")


def test_cli_require_cuda_exits_3_with_the_package_to_install(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    result = CliRunner().invoke(
        app, ["placement", str(path), "--require", "CUDAExecutionProvider", "-f", "json"]
    )
    assert result.exit_code == 3
    error = json.loads(result.stdout)
    assert error["error"] == "provider-unavailable"
    assert "CUDAExecutionProvider" in error["message"] and "onnxruntime-gpu" in error["hint"]


@needs_mnist
def test_cli_json_has_the_documented_keys():
    result = CliRunner().invoke(app, ["placement", str(MNIST), "-p", "azure", "-f", "json"])
    assert result.exit_code == 0, result.output  # no --require: a report, not a verdict
    doc = json.loads(result.stdout)
    assert {"passed", "requested", "available", "assignments", "fallback"} <= set(doc)
    assert doc["fallback"][0].keys() >= {"node", "op_type", "provider"}


@needs_mnist
def test_cli_require_fails_on_fallback():
    result = CliRunner().invoke(app, ["placement", str(MNIST), "-p", "azure", "--require", "azure"])
    assert result.exit_code == 1
    assert "not on AzureExecutionProvider" in result.stdout


@pytest.mark.slow
@needs_mnist
def test_an_older_runtime_is_audited_by_a_profiled_run():
    report = placement(MNIST, runtime="onnxruntime==1.16.3")
    assert report.runtime == "onnxruntime 1.16.3"
    assert report.method == "profiling"
    assert sum(report.assignments.values()) == len(report.nodes) > 0
