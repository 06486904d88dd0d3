"""quantize --to fp16 / bf16: the int8 gate, search and report with the format as a parameter."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import model, save, value
from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.quantize import QuantizeConfig, quantize

SUPER_RESOLUTION = CORPUS / "ext_pytorch_super_resolution.onnx"
BIG = 2048.0
"""Where float16's spacing is 2: a value shifted there and back loses everything below 2."""


def _shifted_model():
    """MatMul, then + (2048 + a per-channel offset of about ±1), - 2048, Tanh and MatMul.

    In fp16 the Add's constant rounds to a multiple of 2 (float16's spacing at 2048), so the
    offsets are lost and the cosine collapses; the MatMul weights lose ~1e-3. ONNX Runtime's CPU
    provider computes Add, Sub, Tanh and MatMul in float32 between casts (it has no float16
    kernels for them), so the drift it shows is the weights' rounding: keeping the Add in fp32
    keeps its constant fp32, and the search must find that node and no other.
    """
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(0, 0.3, (16, 32)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (32, 8)).astype(np.float32),
        "offset": (BIG + rng.normal(0, 1, (32,))).astype(np.float32),
        "big": np.full((1,), BIG, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="layer1"),
        helper.make_node("Add", ["h1", "offset"], ["h2"], name="shift_up"),
        helper.make_node("Sub", ["h2", "big"], ["h3"], name="shift_down"),
        helper.make_node("Tanh", ["h3"], ["a3"], name="tanh"),
        helper.make_node("MatMul", ["a3", "w2"], ["y"], name="layer2"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", 16))],
        [value("y", shape=("batch", 8))],
        initializers=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )


@pytest.fixture
def shifted(tmp_path):
    path = save(_shifted_model(), tmp_path / "shifted.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    return path


@pytest.fixture
def cnn_data(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "eval.npz"
    np.savez(path, input=rng.uniform(0, 1, (2, 1, 224, 224)).astype(np.float32))
    return path


@pytest.fixture(autouse=True)
def _outputs_pass_the_onnx_checker(tmp_path):
    """Every model a test here leaves in its folder (fp16 outputs above all) is valid ONNX."""
    yield
    for path in sorted(tmp_path.rglob("*.onnx")):
        onnx.checker.check_model(str(path), full_check=True)


def _io_types(path):
    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.output]}


def _half_weights(path):
    graph = onnx.load(str(path)).graph
    return [i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT16]


def test_fp16_misses_then_the_search_keeps_the_rounded_node_in_fp32(shifted, tmp_path):
    config = QuantizeConfig(
        to="fp16",
        out=tmp_path / "h.onnx",
        eval=str(tmp_path / "eval.npz"),
        bench=False,
        contract=False,  # float32 itself rounds x + 2048: the second opinion would dispute it
    )
    report = quantize(shifted, config)
    assert report.passed, report.reason
    assert not report.attempts[0].passed  # every node in fp16 misses
    assert [n.node for n in report.excluded] == ["shift_up"]
    assert report.settings.to == "fp16" and report.settings.mode is None
    assert report.quantized_nodes >= 2  # the MatMuls (at least) compute in float16
    assert _io_types(tmp_path / "h.onnx") == {"x": TensorProto.FLOAT, "y": TensorProto.FLOAT}
    assert "w1" in _half_weights(tmp_path / "h.onnx")


def test_fp16_kept_nodes_are_named_in_the_text_report(shifted, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "quantize",
            str(shifted),
            "--to",
            "fp16",
            "-o",
            str(tmp_path / "h.onnx"),
            "--eval",
            str(tmp_path / "eval.npz"),
            "--no-bench",
            "--no-contract",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "kept in fp32 (1): shift_up (Add)" in result.output.replace("\n", " ")


def _cnn(cnn_data, out, *extra):
    """quantize --to fp16 of the corpus super-resolution CNN, as JSON."""
    return CliRunner().invoke(
        app,
        [
            "quantize",
            str(SUPER_RESOLUTION),
            "--to",
            "fp16",
            "-o",
            str(out),
            "--eval",
            str(cnn_data),
            "--format",
            "json",
            *extra,
        ],
    )


@needs_corpus()
def test_a_corpus_cnn_in_fp16_keeps_float32_io_and_passes_a_sensible_budget(cnn_data, tmp_path):
    out = tmp_path / "sr.fp16.onnx"
    result = _cnn(cnn_data, out, "--bench-budget", "0.2")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and report["out"] == str(out)
    assert report["settings"]["to"] == "fp16"
    assert report["excluded"] == []
    assert set(_io_types(out).values()) == {TensorProto.FLOAT}
    assert _half_weights(out)  # the weights are float16
    assert 0.4 < report["size_ratio"] < 0.6
    # fp16 is never refused for being slower on this CPU; where it pays is stated either way
    assert report["speed"]["gated"] and report["speed"]["passed"]
    assert "GPU" in report["gain"] and f"{report['size_ratio']:.2f}" in report["gain"]
    if report["speed"]["verdict"] == "slower":
        assert "on this CPU" in report["speed"]["note"]


def _tight(cnn_data, out, *extra):
    # every node in fp16 reaches ~5e-4
    return _cnn(cnn_data, out, "--no-bench", "--metric", "output:max_abs<=1e-4", *extra)


@needs_corpus()
def test_a_too_tight_budget_on_a_corpus_cnn_keeps_the_nodes_it_names_in_fp32(cnn_data, tmp_path):
    out = tmp_path / "sr.fp16.onnx"
    result = _tight(cnn_data, out)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert not report["attempts"][0]["passed"] and report["passed"]
    kept = [n["node"] for n in report["excluded"]]
    assert kept and kept in [a["excluded"] for a in report["attempts"] if a["passed"]]
    graph = onnx.load(str(out)).graph
    computed = {n.name for n in graph.node}
    assert set(kept) <= computed
    # a node kept in fp32 reads float32 weights: none of its initializers is float16
    half = set(_half_weights(out))
    assert not any(i in half for n in graph.node if n.name in kept for i in n.input)
    assert report["gate"][0]["passed"] and report["gate"][0]["value"] <= 1e-4


@needs_corpus()
def test_a_budget_no_fp32_choice_meets_fails_naming_the_output_and_figure(cnn_data, tmp_path):
    out = tmp_path / "sr.fp16.onnx"
    result = _tight(cnn_data, out, "--max-excluded", "1")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert not report["passed"] and not out.exists()
    assert len(report["attempts"]) == 2  # every node in fp16, then the worst one in fp32
    assert "kept in fp32" in report["reason"] and "--max-excluded 1" in report["reason"]
    figure = report["gate"][0]
    assert figure["output"] == "output" and figure["rule"] == "max_abs<=0.0001"
    assert figure["value"] > 1e-4 and not figure["passed"]


@needs_corpus()
def test_bf16_is_refused_naming_the_ops_without_a_bf16_cpu_kernel(tmp_path):
    out = tmp_path / "sr.bf16.onnx"
    result = CliRunner().invoke(
        app, ["quantize", str(SUPER_RESOLUTION), "--to", "bf16", "-o", str(out), "--no-bench"]
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "no bfloat16 kernel for Conv (4 nodes), Relu (3 nodes)" in text
    assert "--to bf16 is always refused" in text and "cannot write a bf16 model" in text
    assert "--to fp16" in text
    assert not out.exists()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"mode": "static", "calibration": "c.npz"}, "calibration"),
        ({"per_channel": True}, "per"),
        ({"allow_slower": True}, "allow"),  # fp16 is never refused as slower: nothing to allow
    ],
)
def test_int8_options_with_fp16_are_refused_by_name(shifted, tmp_path, options, named):
    config = QuantizeConfig(to="fp16", out=tmp_path / "h.onnx", bench=False, **options)
    with pytest.raises(ConfigError, match=named):
        quantize(shifted, config)


def test_to_lists_its_values_in_help():
    result = CliRunner().invoke(app, ["quantize", "--help"], env={"COLUMNS": "200"})
    assert "--to" in result.output
    assert all(word in result.output for word in ("int8", "fp16", "bf16"))


def test_the_gates_quantize_step_takes_to_and_int8_hashes_stay_as_they_were():
    from pathlib import Path

    from onnxgate.gate._config import QuantizeStep
    from onnxgate.gate._records import BY_NAME
    from onnxgate.settings import config_hash

    record = BY_NAME["quantize"]
    fp16 = record.library_config(QuantizeStep(to="fp16"), out=Path("m.onnx"))
    assert fp16.to == "fp16"
    int8 = record.library_config(QuantizeStep(), out=Path("m.onnx"))
    assert "to" not in int8.model_dump() and config_hash(QuantizeStep()) != config_hash(
        QuantizeStep(to="fp16")
    )
