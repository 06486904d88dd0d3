"""quantize: the gate's figures per row, contracts that verify, float nodes that read float."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantize import _config, _outlier_model
from typer.testing import CliRunner

from models import model, save, value
from onnxgate import VerifyConfig, verify
from onnxgate.cli import app
from onnxgate.compare import Criterion
from onnxgate.contract import contract_paths, load_contract
from onnxgate.data import Sample
from onnxgate.errors import ConfigError, HollowContract
from onnxgate.model import Signature
from onnxgate.quantize import QuantizeConfig, _contract, _data, quantize, resolve
from onnxgate.quantize._gate import Judge, Rule
from onnxgate.quantize._ort import preprocess, quantisable


def _matmul(weights: np.ndarray, path, *, name: str = "y"):
    nodes = [helper.make_node("MatMul", ["x", "w"], [name], name="mm")]
    proto = model(
        nodes,
        [value("x", shape=("batch", weights.shape[0]))],
        [value(name, shape=("batch", weights.shape[1]))],
        initializers=[numpy_helper.from_array(weights.astype(np.float32), "w")],
    )
    return save(proto, path)


@pytest.fixture
def outlier(tmp_path):
    path = save(_outlier_model(), tmp_path / "outlier.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    return path


def test_the_gate_gives_the_same_verdict_however_the_rows_are_batched(tmp_path):
    # the candidate negates feature 1: a row [0, 1] flips (cosine -1), rows [10, 0] do not
    float_model = _matmul(np.eye(2), tmp_path / "float.onnx")
    candidate = _matmul(np.diag([1.0, -1.0]), tmp_path / "candidate.onnx")
    signature = Signature.from_graph(onnx.load(str(float_model)).graph)
    x = np.array([[10.0, 0.0]] * 99 + [[0.0, 1.0]], np.float32)
    batches = {
        "one batch": [Sample("all", {"x": x})],
        "one row each": [Sample(f"r{i}", {"x": x[i : i + 1]}) for i in range(100)],
    }
    for metric in ("cosine", "top1"):
        rules = [Rule("y", metric, Criterion(metric, ">=", 0.99))]
        verdicts = {}
        for label, samples in batches.items():
            judge = Judge(float_model, signature, samples, rules, max_drop=0.01)
            (figure,), _ = judge.judge(candidate)
            verdicts[label] = (figure.passed, round(figure.value, 9), figure.worst, figure.rows)
        assert verdicts["one batch"] == verdicts["one row each"], (metric, verdicts)
        passed, found, worst, rows = verdicts["one batch"]
        assert rows == 100 and worst == pytest.approx(-1.0)
        if metric == "cosine":  # the mean row cosine: (99 - 1) / 100
            assert found == pytest.approx(0.98) and not passed
        else:  # 99 of 100 rows agree
            assert found == pytest.approx(0.99) and passed


def test_the_quantised_model_verifies_against_its_own_contract(tmp_path):
    """One output gated, one not: only the gated one is golden, with the gate's rule."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (8, 16)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (16, 4)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
        helper.make_node("MatMul", ["t", "w2"], ["y"], name="mm2"),
    ]
    path = save(
        model(
            nodes,
            [value("x", shape=("batch", 8))],
            [value("y", shape=("batch", 4)), value("h", shape=("batch", 16))],
            initializers=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
        ),
        tmp_path / "two.onnx",
    )
    np.savez(tmp_path / "eval.npz", x=rng.uniform(-1, 1, (16, 8)).astype(np.float32))
    report = quantize(path, _config(tmp_path, outputs=("y",), max_drop=0.05))
    assert report.passed
    golden = load_contract(tmp_path / "q.onnx").golden
    assert [r.output for r in golden.rules] == ["y"]  # h was not judged: not golden
    assert golden.skipped_outputs == ["h"]
    result = verify(tmp_path / "q.onnx")
    assert result.passed, result.results


def test_an_accuracy_gated_classifier_verifies_against_its_own_contract(tmp_path):
    """Near-tied class scores: int8 flips many argmaxes, labels keep accuracy within budget.

    The gate judges accuracy against the labels; the contract cannot keep labels, so it records
    top-1 agreement with the float model as the golden samples measure it (far below 1 - drop).
    """
    rng = np.random.default_rng(3)
    w = rng.normal(0, 1, (8, 1)).astype(np.float32)
    w = np.concatenate([w, w + rng.normal(0, 1e-3, (8, 1)).astype(np.float32)], axis=1)
    path = _matmul(w, tmp_path / "cls.onnx", name="logits")
    x = rng.uniform(-1, 1, (64, 8)).astype(np.float32)
    np.savez(tmp_path / "eval.npz", x=x)
    np.save(tmp_path / "labels.npy", rng.integers(0, 2, 64).astype(np.int64))
    report = quantize(
        path, _config(tmp_path, labels=tmp_path / "labels.npy", max_drop=0.25, search=False)
    )
    (figure,) = report.gate
    assert figure.metric == "accuracy" and report.passed
    rule = load_contract(tmp_path / "q.onnx").golden.rules[0]
    assert rule.metric.startswith("top1>=")
    assert float(rule.metric.removeprefix("top1>=")) < 0.75  # the gate's 1 - drop is not met
    assert any("contract rule for logits" in n for n in report.notices)
    assert any(n.startswith("CON006") and "allow_weak_rules=True" in n for n in report.notices)
    # weaker than verify's floor (top1>=0.9): admitted only knowingly, and reported
    with pytest.raises(HollowContract, match="CON006"):
        verify(tmp_path / "q.onnx")
    result = verify(tmp_path / "q.onnx", VerifyConfig(allow_weak_rules=True))
    assert result.passed and [f.code for f in result.findings] == ["CON006"]


def test_static_qdq_nodes_kept_in_float_read_float_tensors(outlier, tmp_path):
    report = quantize(
        outlier, _config(tmp_path, mode="static", calibration=str(tmp_path / "calib.npz"))
    )
    assert report.passed and [n.node for n in report.excluded] == ["layer2"]
    assert report.float_ops == {"MatMul": 1}
    assert load_contract(tmp_path / "q.onnx").lineage["excluded_nodes"] == ["layer2"]
    proto = onnx.load(str(tmp_path / "q.onnx"))
    producers = {o: n.op_type for n in proto.graph.node for o in n.output}
    layer2 = next(n for n in proto.graph.node if n.name == "layer2")
    # ONNX Runtime rewires every reader of h1 to its DequantizeLinear output unless told apart
    assert [producers.get(i, "initializer") for i in layer2.input] == ["MatMul", "initializer"]
    assert report.ranked_on == "calibration"  # ranked on calibration, not on the eval data
    assert not any("chosen on the evaluation data" in w for w in report.warnings)


def test_dynamic_search_says_the_float_nodes_were_chosen_on_the_evaluation_data(outlier, tmp_path):
    report = quantize(outlier, _config(tmp_path))
    assert report.passed and report.ranked_on == "evaluation"
    assert any("chosen on the evaluation data" in w for w in report.warnings)


def _run(args):
    return CliRunner().invoke(app, ["quantize", *map(str, args), "--no-bench"])


def test_max_excluded_below_zero_is_refused_and_zero_means_no_search(outlier, tmp_path):
    base = [outlier, "-o", tmp_path / "q.onnx", "--eval", tmp_path / "eval.npz"]
    result = _run([*base, "--max-excluded", "-1"])
    assert result.exit_code == 2, result.output
    assert "--max-excluded" in result.stderr and "0 or more" in result.stderr
    report = quantize(outlier, _config(tmp_path, max_excluded=0))
    assert not report.passed and report.ranking == [] and len(report.attempts) == 1
    assert "max_excluded=0" in report.reason  # a Python caller reads the config field
    assert report.gate == report.attempts[0].figures  # the all-int8 model, not a scratch one
    assert not (tmp_path / "q.onnx").exists()


def test_a_failed_search_reports_its_last_attempt(outlier, tmp_path):
    report = quantize(outlier, _config(tmp_path, max_drop=0.0, max_excluded=2))
    assert not report.passed and "max_excluded=2" in report.reason
    assert report.gate == report.attempts[-1].figures
    assert [n.node for n in report.excluded] == report.attempts[-1].excluded
    assert len(report.excluded) == 2


def _gemm_model(path):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm")]
    return save(
        model(nodes, [value("x", shape=("batch", 4))], [value("y", shape=("batch", 3))],
              initializers=[w]),
        path,
    )  # fmt: skip


def test_op_types_follow_what_the_mode_can_quantise(tmp_path):
    dynamic, _ = resolve(QuantizeConfig(out="q.onnx"), ["avx2"], quantisable=quantisable)
    assert dynamic.op_types == ("Conv", "MatMul", "Gather")
    qoperator, _ = resolve(
        QuantizeConfig(out="q.onnx", mode="static", calibration="c.npz", format="qoperator"),
        ["avx2"],
        quantisable=quantisable,
    )
    assert qoperator.op_types == ("Conv", "Gemm", "MatMul", "Gather")
    with pytest.raises(ConfigError, match="Gemm is quantised only statically: use mode='static'"):
        resolve(QuantizeConfig(out="q.onnx", op_types=("Gemm",)), quantisable=quantisable)
    result = _run([_gemm_model(tmp_path / "gemm.onnx"), "-o", tmp_path / "q.onnx"])
    assert result.exit_code == 2, result.output
    assert "Gemm is quantised only statically: use --mode static" in result.stderr
    assert "ONNX Runtime quantised none" not in result.stderr  # refused before quantising
    assert not (tmp_path / "q.onnx").exists()


def test_no_contract_removes_an_older_contract_beside_the_model(outlier, tmp_path):
    quantize(outlier, _config(tmp_path))
    contract, golden = contract_paths(tmp_path / "q.onnx")
    assert contract.is_file() and golden.is_file()
    report = quantize(outlier, _config(tmp_path, contract=False))
    assert report.passed and report.contract is None
    assert not contract.exists() and not golden.exists()
    assert any("removed" in n for n in report.notices)


def test_a_contract_that_cannot_be_written_leaves_no_model(outlier, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(_contract, "write_contract", broken)
    with pytest.raises(OSError, match="disk full"):
        quantize(outlier, _config(tmp_path))
    assert not (tmp_path / "q.onnx").exists()
    assert not any(p.exists() for p in contract_paths(tmp_path / "q.onnx"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--quant-format", "qdq"], "--quant-format qdq applies to static"),
        (["--calibration-method", "guess"], "--calibration-method 'guess' is not one of"),
        (["--max-drop", "2"], "--max-drop 2.0: must be a number in [0, 1)"),
        (["--labels", "labels.npy"], "--labels names the true class"),
    ],
)
def test_cli_errors_name_the_options(tmp_path, options, message):
    path = _matmul(np.eye(4), tmp_path / "mm.onnx")
    result = _run([path, "-o", tmp_path / "q.onnx", *options])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_row_digests_are_the_feeds_digests_of_row_slices():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.arange(3, dtype=np.int64)
    digests = _data.row_digests([Sample("a", {"x": x, "ids": ids})])
    assert digests == [_data.feeds_digest({"x": x[i], "ids": ids[i]}) for i in range(3)]
    assert len(set(digests)) == 3


def test_preprocess_takes_relative_paths(outlier, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    notices = preprocess(outlier.relative_to(tmp_path), tmp_path.relative_to(tmp_path) / "p.onnx")
    assert not any("quantising the model as it was given" in n for n in notices)
    assert (tmp_path / "p.onnx").is_file()


def test_a_metric_rule_is_judged_by_compare_and_kept_in_the_contract(outlier, tmp_path):
    report = quantize(outlier, _config(tmp_path, metrics=("y:max_abs<=1000",), search=False))
    (figure,) = report.gate
    assert figure.metric == "max_abs" and figure.rule == "max_abs<=1000" and report.passed
    assert figure.worst is not None and figure.rows == 64  # the row cosine is reported too
    assert load_contract(tmp_path / "q.onnx").golden.rules[0].metric == "max_abs<=1000"
    # vacuous on outputs this small (verify's floor is 10% of the largest |y|): admitted knowingly
    with pytest.raises(HollowContract, match="CON006"):
        verify(tmp_path / "q.onnx")
    assert verify(tmp_path / "q.onnx", VerifyConfig(allow_weak_rules=True)).passed


def test_embedding_tables_are_int8_by_default_and_not_reported_as_float(tmp_path):
    """A Gather on a float table is quantised like the MatMul after it, and counted as int8."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((1000, 32)).astype(np.float32)
    weights = rng.standard_normal((32, 8)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["embedded"], name="embed"),
        helper.make_node("MatMul", ["embedded", "w"], ["y"], name="mm"),
    ]
    proto = model(
        nodes,
        [value("ids", TensorProto.INT64, shape=("batch", 5))],
        [value("y", shape=("batch", 5, 8))],
        initializers=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(weights, "w"),
        ],
    )
    path = save(proto, tmp_path / "embed.onnx")
    np.savez(tmp_path / "eval.npz", ids=rng.integers(0, 1000, (16, 5)).astype(np.int64))
    report = quantize(path, _config(tmp_path, contract=False))
    assert report.passed, report.reason
    assert "Gather" in report.settings.op_types
    assert report.float_ops == {}, report.float_ops
    out = onnx.load(tmp_path / "q.onnx")
    tables = {t.name: t for t in out.graph.initializer}
    gather = next(n for n in out.graph.node if n.op_type == "Gather")
    assert tables[gather.input[0]].data_type in (TensorProto.INT8, TensorProto.UINT8)
    assert report.size_after < report.size_before / 3  # the 128 kB table is now 32 kB


@pytest.mark.parametrize("per_channel", [True, False])
def test_a_quantiser_crash_suggests_per_tensor_first_when_weights_were_per_channel(
    outlier, tmp_path, monkeypatch, per_channel
):
    from onnxruntime import quantization

    from onnxgate.errors import RunFailed

    def crash(*args, **kwargs):
        raise ValueError("The truth value of an array with more than one element is ambiguous.")

    monkeypatch.setattr(quantization, "quantize_dynamic", crash)
    with pytest.raises(RunFailed, match="truth value of an array") as caught:
        quantize(outlier, _config(tmp_path, per_channel=per_channel))
    hint = caught.value.hint or ""
    assert hint.startswith("Try per_channel=False") == per_channel
    assert "op_types" in hint and "-vv" in hint


def _squeezed_classifier() -> onnx.ModelProto:
    """Conv → GlobalAveragePool → Softmax over channels → Squeeze(axes=[3, 2]) → ``y[N, 6]``:
    a classifier head whose scores come out of a Squeeze, listed in the descending order the
    ONNX reference evaluator mishandles (opset 11), under a name that says nothing."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"], name="pool"),
        helper.make_node("Softmax", ["g"], ["p"], name="softmax", axis=1),
        helper.make_node("Squeeze", ["p"], ["y"], name="squeeze", axes=[3, 2]),
    ]
    return model(
        nodes,
        [value("x", shape=("N", 3, 8, 8))],
        [value("y", shape=("N", 6))],
        initializers=[w],
        opsets={"": 11},
        ir=7,
    )


def test_one_rule_gates_a_classifier_on_top1_even_behind_a_squeeze(tmp_path):
    path = save(_squeezed_classifier(), tmp_path / "head.onnx")
    compared = CliRunner().invoke(app, ["compare", str(path), "--format", "json"])
    assert compared.exit_code == 0, compared.output  # the evaluator's Squeeze bug is corrected
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(0, 1, (16, 3, 8, 8)).astype(np.float32))
    result = CliRunner().invoke(
        app,
        [
            "quantize",
            str(path),
            "-o",
            str(tmp_path / "q.onnx"),
            "--eval",
            str(tmp_path / "eval.npz"),
            "--no-bench",
            "--format",
            "json",
        ],
    )
    report = json.loads(result.stdout)
    assert [(g["output"], g["metric"]) for g in report["gate"]] == [("y", "top1")], report["gate"]
