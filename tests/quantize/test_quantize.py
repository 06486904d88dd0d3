"""quantize: the gate, the search for what to keep in float, and refusals that write nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from models import model, relu, save, value
from onnxgate.cli import app
from onnxgate.contract import load_contract, sha256_file
from onnxgate.errors import ConfigError, FeedError
from onnxgate.quantize import QuantizeConfig, detect_preset, quantize, resolve
from onnxgate.settings import config_hash

WIDTH = 32
OUTLIER = 1e4


def _outlier_model():
    """Four MatMul layers; the first makes one channel of its output 10^4 times the others.

    The second layer ignores that channel (its row of weights is zero), so the float model is
    well behaved, but quantising the second layer quantises its input with one scale per tensor:
    the outlier sets the scale and every other channel rounds to a few levels. The other layers
    see ordinary ranges. Naive int8 misses a cosine budget; keeping layer 2 in float recovers it.
    """
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (16, WIDTH)).astype(np.float32)
    w1[:, 0] = OUTLIER / 16  # channel 0 of h1 reaches ~10^4
    w2 = rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32)
    w2[0, :] = 0.0
    w3 = rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32)
    w4 = rng.normal(0, 0.3, (WIDTH, 8)).astype(np.float32)
    weights = {"w1": w1, "w2": w2, "w3": w3, "w4": w4}
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="layer1"),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="layer2"),
        helper.make_node("Tanh", ["h2"], ["a2"], name="tanh2"),
        helper.make_node("MatMul", ["a2", "w3"], ["h3"], name="layer3"),
        helper.make_node("Tanh", ["h3"], ["a3"], name="tanh3"),
        helper.make_node("MatMul", ["a3", "w4"], ["y"], name="layer4"),
    ]
    return model(
        nodes,
        [value("x", shape=("batch", 16))],
        [value("y", shape=("batch", 8))],
        initializers=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )


@pytest.fixture
def outlier(tmp_path):
    path = save(_outlier_model(), tmp_path / "outlier.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    return path


def _config(tmp_path, **kwargs):
    base = {
        "out": tmp_path / "q.onnx",
        "eval": str(tmp_path / "eval.npz"),
        "bench": False,
        "max_drop": 0.02,  # each ordinary layer costs ~0.005 of cosine; layer 2 costs all of it
    }
    return QuantizeConfig(**(base | kwargs))


def test_naive_int8_misses_and_the_search_recovers_by_keeping_the_outlier_layer_in_float(
    outlier, tmp_path
):
    # four tiny MatMuls: dynamic int8 may well be slower than float here, which is not this
    # test's subject, so the model is written whatever the speed verdict
    config = _config(tmp_path, bench=True, bench_budget_s=0.05, allow_slower=True)
    report = quantize(outlier, config)
    first = report.attempts[0]
    assert first.excluded == [] and not first.passed
    assert first.figures[0].value < 0.99  # the naive model really misses
    assert report.ranking[0].node == "layer2"  # the measured culprit ranks first
    assert report.ranking[0].score > 10 * report.ranking[1].score
    assert report.passed and [n.node for n in report.excluded] == ["layer2"]
    (figure,) = report.gate
    assert figure.metric == "cosine" and figure.value >= 0.98 and figure.passed
    assert report.float_ops == {"MatMul": 1}
    assert report.quantized_nodes > 0
    out = tmp_path / "q.onnx"
    assert out.is_file() and report.out == str(out)
    # the price of the float layer is measured against the all-int8 model
    assert report.latency and report.latency[0].all_int8_ms is not None
    assert report.speed.gated and report.speed.passed and report.speed.allow_slower
    contract = load_contract(out)
    assert contract.lineage["speed"]["verdict"] == report.speed.verdict
    assert len(contract.lineage["speed"]["latency"]) == len(report.latency)
    assert contract.lineage["step"] == "quantize"
    assert contract.lineage["parent"]["model"] == str(outlier)
    assert contract.lineage["excluded_nodes"] == ["layer2"]
    assert contract.lineage["gate"]["passed"] is True
    # the typed link to the parent: the float model's bytes and the config that made this one
    lineage = contract.provenance.lineage
    assert lineage.step == "quantize" and lineage.parent_sha256 == sha256_file(outlier)
    assert lineage.config_hash == config_hash(config)
    # the goldens are the float model's outputs from ONNX Runtime: the reference evaluator agreed
    opinion = contract.golden.second_opinion
    assert opinion.runner == "reference" and opinion.agreed is True
    assert contract.golden.rules[0].metric == "cosine>=0.98"


def test_without_the_search_the_miss_is_reported_and_nothing_is_written(outlier, tmp_path):
    report = quantize(outlier, _config(tmp_path, search=False))
    assert not report.passed and report.out is None
    assert "search=False" in report.reason  # a Python caller reads the config field
    assert not (tmp_path / "q.onnx").exists()


def test_a_budget_that_cannot_be_met_is_exit_1_with_a_table_and_no_file(outlier, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "quantize",
            str(outlier),
            "-o",
            str(tmp_path / "q.onnx"),
            "--eval",
            str(tmp_path / "eval.npz"),
            "--max-drop",
            "0",
            "--no-bench",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "cannot be met" in result.stdout and "nothing written" in result.stdout
    assert "cosine>=1" in result.stdout  # the table of attempts
    assert not (tmp_path / "q.onnx").exists()
    assert not list(tmp_path.glob(".q.onnx*"))


def test_static_qdq_with_calibration_and_json_output(outlier, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "quantize",
            str(outlier),
            "-o",
            str(tmp_path / "q.onnx"),
            "--mode",
            "static",
            "--calibration",
            str(tmp_path / "calib.npz"),
            "--calibration-method",
            "percentile",
            "--eval",
            str(tmp_path / "eval.npz"),
            "--no-bench",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] and document["settings"]["format"] == "qdq"
    assert document["settings"]["calibration_method"] == "percentile"
    assert document["calibration"]["rows"] == 64 and document["overlap_rows"] == 0
    assert document["ops_after"].get("QuantizeLinear", 0) > 0


def test_overlapping_calibration_and_evaluation_rows_are_warned_about(outlier, tmp_path):
    data = np.load(tmp_path / "eval.npz")["x"]
    np.savez(tmp_path / "calib.npz", x=np.concatenate([data[:10], data[:5] + 1]))
    report = quantize(
        outlier,
        _config(tmp_path, mode="static", calibration=str(tmp_path / "calib.npz"), max_drop=0.5),
    )
    assert report.overlap_rows == 10
    assert any("10 of 64 evaluation row(s)" in w for w in report.warnings)


def _run(args):
    return CliRunner().invoke(app, ["quantize", *map(str, args), "--no-bench"])


def test_calibration_with_wrong_input_names_is_exit_2_and_writes_nothing(outlier, tmp_path):
    np.savez(tmp_path / "bad.npz", input=np.zeros((4, 16), np.float32))
    result = _run(
        [outlier, "-o", tmp_path / "q.onnx", "--mode", "static", "--calibration",
         tmp_path / "bad.npz", "--eval", tmp_path / "eval.npz"]
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "'input' in --calibration" in result.stderr and "'x'" in result.stderr
    assert not (tmp_path / "q.onnx").exists()


def test_evaluation_with_the_wrong_dtype_is_refused(outlier, tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 16), np.float64))
    with pytest.raises(FeedError, match="expects float32"):
        quantize(outlier, _config(tmp_path, eval=str(tmp_path / "bad.npz")))
    assert not (tmp_path / "q.onnx").exists()


def test_an_already_quantised_model_is_refused(tmp_path):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant"),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.uint8), "z"),
    ]
    path = save(
        model(nodes, [value("x", shape=("batch", 4))], [value("y")], initializers=inits),
        tmp_path / "qdq.onnx",
    )
    result = _run([path, "-o", tmp_path / "q.onnx"])
    assert result.exit_code == 2
    assert "quantised already" in result.stderr and "QuantizeLinear" in result.stderr
    assert not (tmp_path / "q.onnx").exists()


def test_a_model_with_nothing_to_quantise_is_refused(tmp_path):
    path = save(relu(), tmp_path / "relu.onnx")
    result = _run([path, "-o", tmp_path / "q.onnx"])
    assert result.exit_code == 2
    assert "nothing to quantise" in result.stderr and "Relu" in result.stderr
    assert not (tmp_path / "q.onnx").exists()


def test_a_matmul_of_two_activations_is_nothing_to_quantise_dynamically(tmp_path):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    path = save(
        model(nodes, [value("a", shape=(2, 3)), value("b", shape=(3, 2))], [value("y")]),
        tmp_path / "mm.onnx",
    )
    with pytest.raises(ConfigError, match="with a constant weight"):
        quantize(path, QuantizeConfig(out=tmp_path / "q.onnx", bench=False))


def test_the_same_data_for_calibration_and_evaluation_is_refused(outlier, tmp_path):
    with pytest.raises(ConfigError, match="the same data"):
        quantize(
            outlier,
            _config(tmp_path, mode="static", calibration=str(tmp_path / "eval.npz")),
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--mode", "static"], "needs calibration data (--calibration)"),
        (["--quant-format", "qdq"], "applies to static"),
        (["--max-drop", "2"], "max-drop"),
        (["--mode", "fast"], "mode"),
    ],
)
def test_contradicting_options_are_exit_2(outlier, tmp_path, options, message):
    result = _run([outlier, "-o", tmp_path / "q.onnx", *options])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not (tmp_path / "q.onnx").exists()


def test_presets_follow_the_cpu_flags():
    assert detect_preset(["avx2", "avx512_vnni"])[0].name == "vnni"
    assert detect_preset(["avx2", "amx_int8"])[0].name == "vnni"
    assert detect_preset(["avx2"])[0].name in ("avx2", "arm64")
    settings, notices = resolve(QuantizeConfig(out="q.onnx", preset="arm64", mode="static",
                                               calibration="c.npz"))  # fmt: skip
    assert settings.activation_type == "int8" and settings.format == "qdq"
    settings, notices = resolve(QuantizeConfig(out="q.onnx", reduce_range=True), ["avx512_vnni"])
    assert settings.preset == "vnni" and settings.reduce_range  # stated options win
    assert any(n.startswith("preset vnni") for n in notices)


def test_synthetic_evaluation_is_warned_about(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    w = numpy_helper.from_array(
        np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32), "w"
    )
    path = save(
        model(nodes, [value("x", shape=("batch", 8))], [value("y", TensorProto.FLOAT)],
              initializers=[w]),
        tmp_path / "mm.onnx",
    )  # fmt: skip
    report = quantize(path, QuantizeConfig(out=tmp_path / "q.onnx", bench=False))
    assert report.passed
    assert report.evaluation.source.startswith("synthetic")
    assert any("synthetic" in w for w in report.warnings)
