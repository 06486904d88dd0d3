"""Placement audit against the real ONNX Runtime: recorded partition, profiled run, requirements."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper
from pydantic import ValidationError
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import relu, save
from onnxgate.cli import app
from onnxgate.errors import ConfigError, FeedError, ProviderUnavailable
from onnxgate.placement import PlacementConfig, placement
from onnxgate.settings import SessionSettings, invalid

MNIST = CORPUS / "mnist.onnx"
needs_mnist = needs_corpus(MNIST)


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


def _if_model() -> onnx.ModelProto:
    """An If whose condition, sum(x * x) >= 0, always holds: the else branch never runs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])

    def branch(name: str, op: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, ["batch", 4])
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{name}_out"], name=f"{name}_{op.lower()}")],
            name,
            [],
            [out],
        )

    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
            helper.make_node("ReduceSum", ["sq"], ["total"], keepdims=0, name="total"),
            helper.make_node("GreaterOrEqual", ["total", "zero"], ["cond"], name="nonneg"),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                name="branch",
                then_branch=branch("then", "Relu"),
                else_branch=branch("else", "Neg"),
            ),
        ],
        "g",
        [x],
        [y],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _seq_input_model() -> onnx.ModelProto:
    """A sequence input: no synthetic feeds can be made for it."""
    seq = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["parts"], ["y"], axis=0, name="concat")],
        "g",
        [seq],
        [y],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@needs_mnist
def test_every_node_is_counted_on_cpu():
    report = placement(MNIST)
    assert report.method == "assignment"
    assert report.assignments == {"CPUExecutionProvider": len(report.nodes)}
    assert report.fallback == [] and report.passed
    assert report.op_types["CPUExecutionProvider"]["Conv"] == 2


@needs_mnist
def test_profiling_sees_the_same_providers_as_the_recorded_partition():
    profiled = placement(
        MNIST, PlacementConfig(method="profiling", session=SessionSettings(opt_level="basic"))
    )
    recorded = placement(
        MNIST, PlacementConfig(method="assignment", session=SessionSettings(opt_level="basic"))
    )
    assert (profiled.method, recorded.method) == ("profiling", "assignment")
    assert sorted(n.node for n in recorded.nodes) == sorted(n.node for n in profiled.nodes)
    assert {n.provider for n in profiled.nodes} == {"CPUExecutionProvider"}


@needs_mnist
def test_a_provider_that_claims_nothing_shows_every_node_falling_back():
    report = placement(
        MNIST, PlacementConfig(require="azure", session=SessionSettings(providers=("azure",)))
    )
    assert report.requested == ["AzureExecutionProvider", "CPUExecutionProvider"]
    assert len(report.fallback) == len(report.nodes) > 0
    assert not report.passed and len(report.violations) == len(report.nodes)
    allowed = placement(
        MNIST,
        PlacementConfig(
            require="azure",
            allow_ops={n.op_type for n in report.nodes},
            session=SessionSettings(providers=("azure",)),
        ),
    )
    assert allowed.passed


def test_a_custom_domain_node_is_shown_where_it_ran(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    report = placement(path, PlacementConfig(session=SessionSettings(opt_level="disable")))
    gelu = next(n for n in report.nodes if n.node == "contrib_gelu")
    assert (gelu.domain, gelu.op_type, gelu.provider) == (
        "com.microsoft",
        "Gelu",
        "CPUExecutionProvider",
    )
    assert report.op_types["CPUExecutionProvider"] == {"MatMul": 1, "com.microsoft:Gelu": 1}


def test_profiling_sees_only_the_if_branch_that_ran(tmp_path):
    path = save(_if_model(), tmp_path / "if.onnx")
    recorded = placement(
        path, PlacementConfig(method="assignment", session=SessionSettings(opt_level="disable"))
    )
    profiled = placement(
        path, PlacementConfig(method="profiling", session=SessionSettings(opt_level="disable"))
    )
    recorded_names = {n.node for n in recorded.nodes}
    profiled_names = {n.node for n in profiled.nodes}
    assert {"then_relu", "else_neg"} <= recorded_names
    assert "then_relu" in profiled_names and "else_neg" not in profiled_names
    assert len(profiled.nodes) < len(recorded.nodes)
    assert any("ran on these feeds" in note for note in profiled.notes)
    assert not any("ran on these feeds" in note for note in recorded.notes)


def test_cli_pass_line_says_profiling_covers_what_ran(tmp_path):
    path = save(_if_model(), tmp_path / "if.onnx")
    args = ["placement", str(path), "--require", "cpu"]
    profiled = CliRunner().invoke(app, [*args, "--method", "profiling"])
    recorded = CliRunner().invoke(app, [*args, "--method", "assignment"])
    assert (profiled.exit_code, recorded.exit_code) == (0, 0), profiled.output
    assert "every compute node that ran on these feeds is on CPUExecutionProvider" in (
        profiled.stdout
    )
    assert "every compute node is on CPUExecutionProvider" in recorded.stdout


def test_an_unknown_method_is_a_config_error(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    with pytest.raises(ValidationError) as caught:
        placement(path, PlacementConfig(method="recorded"))  # type: ignore[arg-type]
    error = invalid(caught.value)
    assert error.field == "method"
    assert "method 'recorded' is not one of 'auto', 'assignment'" in error.message
    result = CliRunner().invoke(app, ["placement", str(path), "--method", "recorded"])
    assert result.exit_code == 2
    assert "--method 'recorded' is not one of" in result.stderr  # the CLI names its flag


def test_cli_pass_line_counts_what_allow_op_exempted(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    args = ["placement", str(path), "-p", "azure", "--require", "azure", "--allow-op", "MatMul"]
    result = CliRunner().invoke(app, [*args, "--allow-op", "com.microsoft:Gelu"])
    assert result.exit_code == 0, result.output
    assert "every compute node" not in result.stdout
    assert (
        "0 compute node(s) on AzureExecutionProvider; 2 exempted by --allow-op "
        "(op types MatMul, com.microsoft:Gelu)" in " ".join(result.stdout.split())
    )
    doc = json.loads(CliRunner().invoke(app, [*args, "--allow-op", "Gelu", "-f", "json"]).stdout)
    assert doc["passed"] and {n["node"] for n in doc["exempted"]} == {"mm", "contrib_gelu"}
    only_matmul = placement(
        path,
        PlacementConfig(
            require="azure", allow_ops={"MatMul"}, session=SessionSettings(providers=("azure",))
        ),
    )
    assert [n.node for n in only_matmul.violations] == ["contrib_gelu"]
    assert [n.node for n in only_matmul.exempted] == ["mm"]


def test_text_names_unnamed_nodes_and_custom_domains(tmp_path):
    proto = _gelu_model()
    proto.graph.node[0].name = ""
    path = save(proto, tmp_path / "gelu.onnx")
    result = CliRunner().invoke(
        app, ["placement", str(path), "-p", "azure", "--opt-level", "disable"]
    )
    assert result.exit_code == 0, result.output
    assert "(unnamed) (MatMul) → CPUExecutionProvider" in result.stdout
    assert "contrib_gelu (Gelu, com.microsoft) → CPUExecutionProvider" in result.stdout
    assert "MatMul 1, com.microsoft:Gelu 1" in result.stdout


def test_a_missing_gpu_provider_is_an_environment_error(tmp_path):
    path = save(_gelu_model(), tmp_path / "gelu.onnx")
    with pytest.raises(ProviderUnavailable, match="onnxruntime-gpu"):
        placement(path, PlacementConfig(require="CUDAExecutionProvider"))


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
def test_an_older_runtime_refuses_the_assignment_method_and_layout_level(tmp_path):
    path = save(relu(ir=8), tmp_path / "relu.onnx")
    with pytest.raises(ConfigError, match="needs ONNX Runtime 1.24 or later") as caught:
        placement(path, PlacementConfig(runtime="onnxruntime==1.16.3", method="assignment"))
    assert "method profiling" in str(caught.value) and caught.value.field == "method"
    with pytest.raises(ConfigError, match="has no optimisation level 'layout'") as caught:
        placement(
            path,
            PlacementConfig(
                runtime="onnxruntime==1.16.3",
                method="profiling",
                session=SessionSettings(opt_level="layout"),
            ),
        )
    assert "onnxruntime 1.16.3" in str(caught.value)
    result = CliRunner().invoke(
        app, ["placement", str(path), "-r", "onnxruntime==1.16.3", "--method", "assignment"]
    )
    assert result.exit_code == 2
    assert "Use --method profiling" in " ".join(result.stderr.split())  # the flag, in the CLI


@pytest.mark.slow
def test_auto_on_a_recording_runtime_builds_no_feeds(tmp_path):
    path = save(_seq_input_model(), tmp_path / "seq.onnx")
    with pytest.raises(FeedError):  # profiling needs feeds, and none can be made here
        placement(path, PlacementConfig(method="profiling"))
    report = placement(path, PlacementConfig(runtime="onnxruntime==1.24.4"))
    assert report.method == "assignment"
    assert [n.node for n in report.nodes] == ["concat"]


@pytest.mark.slow
@needs_mnist
def test_an_older_runtime_is_audited_by_a_profiled_run():
    report = placement(MNIST, PlacementConfig(runtime="onnxruntime==1.16.3"))
    assert report.runtime == "onnxruntime 1.16.3"
    assert report.method == "profiling"
    assert sum(report.assignments.values()) == len(report.nodes) > 0
