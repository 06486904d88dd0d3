"""quantize --recipes: the CPU's int8 candidates, each gated where it runs, the fastest kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_speed import _latencies, _mlp_model
from typer.testing import CliRunner

from models import save
from onnxgate.cli import app
from onnxgate.contract import load_contract
from onnxgate.errors import ConfigError
from onnxgate.perf._contention import judge
from onnxgate.quantize import CPU_RECIPES, QuantizeConfig, choose_recipes, quantize
from onnxgate.quantize import _choose as choose_module
from onnxgate.quantize._choose import choose

VNNI = ["avx2", "avx512_vnni"]


def test_a_vnni_cpu_gets_its_list_and_openvino_qdq_needs_calibration():
    recipes, notices = choose_recipes(("auto",), VNNI, calibration=True)
    assert [r.name for r in recipes] == list(CPU_RECIPES["vnni"])
    openvino = [r for r in recipes if r.runtime is not None]
    assert [(r.mode, r.format, r.providers) for r in openvino] == [
        ("static", "qdq", ("OpenVINOExecutionProvider",))
    ]
    assert "avx512_vnni" in notices[0]
    assert openvino[0].calibration_method == "percentile"
    without, notices = choose_recipes(("auto",), VNNI, calibration=False)
    assert all(r.mode == "dynamic" for r in without) and len(without) == len(recipes) - 1
    assert any("skipped" in n and "calibration" in n for n in notices)


def test_avx2_without_vnni_tries_per_channel_and_per_tensor_and_static_s8s8():
    recipes, _ = choose_recipes(("auto",), ["avx2"], calibration=True)
    dynamic = {r.per_channel for r in recipes if r.mode == "dynamic"}
    assert dynamic == {True, False}
    static = [r for r in recipes if r.mode == "static"]
    assert [(r.activation_type, r.weight_type, r.runtime) for r in static] == [
        ("int8", "int8", None)
    ]


def test_recipes_are_refused_by_name_with_options_that_choose_otherwise(tmp_path):
    with pytest.raises(ConfigError, match="no recipe 'fast'"):
        choose_recipes(("fast",), VNNI, calibration=False)
    with pytest.raises(ConfigError, match="auto"):
        choose_recipes(("auto", "dynamic-u8s8"), VNNI, calibration=False)
    config = QuantizeConfig(out=tmp_path / "q.onnx", recipes=("auto",), per_channel=False)
    with pytest.raises(ConfigError, match="per_channel and recipes"):
        quantize(tmp_path / "none.onnx", config)


def test_the_fastest_is_kept_and_a_tie_within_noise_goes_to_the_more_accurate():
    shapes = [{"batch": 1}, {"batch": 32}]
    float_ms = [_latencies(2.0, 0.05), _latencies(40.0, 0.05)]
    clear = choose(
        shapes,
        float_ms,
        {
            "slow": [_latencies(1.8, 0.05, seed=1), _latencies(36.0, 0.05, seed=1)],
            "fast": [_latencies(1.0, 0.05, seed=2), _latencies(20.0, 0.05, seed=2)],
        },
        errors={"slow": 0.001, "fast": 0.005},
        sizes={"slow": 10, "fast": 10},
    )
    assert clear.chosen == "fast" and clear.speedup["fast"] > clear.speedup["slow"]
    assert "slower beyond noise than fast" in clear.why["slow"]
    # a busy machine spoils each verdict against the float model, not the comparison of two
    # candidates interleaved in the same contest: the more accurate but slower one still loses
    busy = choose(
        shapes,
        float_ms,
        {
            "slow": [_latencies(1.8, 0.05, seed=1), _latencies(36.0, 0.05, seed=1)],
            "fast": [_latencies(1.0, 0.05, seed=2), _latencies(20.0, 0.05, seed=2)],
        },
        errors={"slow": 0.001, "fast": 0.005},
        sizes={"slow": 10, "fast": 10},
        unreliable=["other processes took 80% of the CPUs"],
    )
    assert busy.chosen == "fast"
    assert {r.verdict for rows in busy.rows.values() for r in rows} == {"inconclusive"}
    # the same speed within noise: the more accurate wins, though its median may be a hair slower
    tied = choose(
        shapes,
        float_ms,
        {
            "a": [_latencies(1.0, 0.3, seed=3), _latencies(20.0, 0.3, seed=3)],
            "b": [_latencies(1.0, 0.3, seed=4), _latencies(20.0, 0.3, seed=4)],
        },
        errors={"a": 0.009, "b": 0.002},
        sizes={"a": 10, "b": 10},
    )
    assert tied.chosen == "b" and "more accurate" in tied.why["a"]
    # but a tie never keeps one proven slower than the float model over a fastest that is not
    noisy_fast = choose(
        [{"batch": 1}],
        [_latencies(1.0, 0.02)],
        {
            "fast": [_latencies(1.0, 0.9, n=40, seed=5)],  # within noise of the float model
            "tight": [_latencies(1.06, 0.02, seed=6)],  # proven slower than the float model
        },
        errors={"fast": 0.009, "tight": 0.002},
        sizes={"fast": 10, "tight": 10},
    )
    assert noisy_fast.speedup["fast"] > noisy_fast.speedup["tight"]
    assert noisy_fast.chosen == "fast", noisy_fast.why


def _fake_race(monkeypatch, medians: dict[str, float]) -> list[list[str]]:
    """Replace the timing contest: each contender's latencies around its median (by label)."""
    seen: list[list[str]] = []

    def race(contenders, samples, *, budget_s, progress):
        seen.append([c.label for c in contenders])
        conditions = judge(2, 1.0, others=0.01, steal=0.0, baseline_ms=(2.0, 2.0), drifts={})
        timed = [
            (
                s.dims,
                [_latencies(medians[c.label], 0.05, seed=i) for i, c in enumerate(contenders)],
            )
            for s in samples
        ]
        return timed, conditions

    monkeypatch.setattr(choose_module, "race", race)
    return seen


@pytest.fixture
def mlp(tmp_path):
    path = save(_mlp_model(), tmp_path / "mlp.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "eval.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (64, 16)).astype(np.float32))
    return path


def _cli(*args) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["quantize", *map(str, args), "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


RECIPES = "dynamic-u8s8-pc,static-s8s8-qdq"


def test_the_fastest_passing_recipe_is_written_and_records_where_it_runs(
    mlp, tmp_path, monkeypatch
):
    seen = _fake_race(
        monkeypatch,
        {"float model": 2.0, "dynamic-u8s8-pc model": 1.5, "static-s8s8-qdq model": 1.0},
    )
    out = tmp_path / "q.onnx"
    code, report = _cli(
        mlp, "-o", out, "--eval", tmp_path / "eval.npz", "--calibration", tmp_path / "calib.npz",
        "--recipes", RECIPES, "--max-drop", "0.05",
    )  # fmt: skip
    assert code == 0, report
    assert seen[0][0] == "float model" and len(seen[0]) == 3  # one contest, float first
    assert report["settings"]["recipe"] == "static-s8s8-qdq"
    assert report["settings"]["mode"] == "static" and report["settings"]["format"] == "qdq"
    rows = {c["recipe"]: c for c in report["candidates"]}
    assert rows["static-s8s8-qdq"]["chosen"] and not rows["dynamic-u8s8-pc"]["chosen"]
    assert all(c["passed_accuracy"] and c["latency"] for c in rows.values())
    assert "slower beyond noise than static-s8s8-qdq" in rows["dynamic-u8s8-pc"]["why"]
    contract = load_contract(out)
    assert contract.lineage["runs_on"] == {"providers": [], "runtime": None}
    assert contract.lineage["settings"]["recipe"] == "static-s8s8-qdq"


def test_when_no_recipe_beats_float_the_verdict_says_so_and_nothing_is_written(
    mlp, tmp_path, monkeypatch
):
    _fake_race(
        monkeypatch,
        {"float model": 1.0, "dynamic-u8s8-pc model": 3.0, "static-s8s8-qdq model": 2.0},
    )
    out = tmp_path / "q.onnx"
    code, report = _cli(
        mlp, "-o", out, "--eval", tmp_path / "eval.npz", "--calibration", tmp_path / "calib.npz",
        "--recipes", RECIPES, "--max-drop", "0.05",
    )  # fmt: skip
    assert code == 1 and not out.exists()
    assert report["reason"].startswith("no int8 recipe beats the float model on this CPU")
    assert "static-s8s8-qdq" in report["reason"] and "--allow-slower" in report["reason"]
    assert {c["recipe"] for c in report["candidates"]} == {"dynamic-u8s8-pc", "static-s8s8-qdq"}
    assert not any(c["chosen"] for c in report["candidates"])
    assert all(c["verdict"] == "slower" for c in report["candidates"])
    text = CliRunner().invoke(
        app,
        ["quantize", str(mlp), "-o", str(out), "--eval", str(tmp_path / "eval.npz"),
         "--calibration", str(tmp_path / "calib.npz"), "--recipes", RECIPES, "--max-drop", "0.05"],
        terminal_width=200,
    )  # fmt: skip
    assert text.exit_code == 1
    flat = " ".join(text.output.split())
    assert "int8 recipes tried" in flat and "no int8 recipe beats the float model" in flat
    assert "dynamic-u8s8-pc (CPU provider): met the budget, cosine" in flat


def test_two_recipes_through_the_real_pipeline_and_a_real_contest(mlp, tmp_path):
    config = QuantizeConfig(
        out=tmp_path / "q.onnx",
        eval=str(tmp_path / "eval.npz"),
        recipes=("dynamic-u8s8-pc", "dynamic-u8s8"),
        max_drop=0.05,
        bench_budget_s=0.05,
        allow_slower=True,  # two tiny MatMuls: whether int8 pays here is not the subject
    )
    report = quantize(mlp, config)
    assert report.passed, report.reason
    assert [c.recipe for c in report.candidates] == ["dynamic-u8s8-pc", "dynamic-u8s8"]
    assert [c.settings.per_channel for c in report.candidates] == [True, False]
    for c in report.candidates:
        assert c.passed_accuracy and c.worst_cosine is not None and c.size_ratio is not None
        assert len(c.latency) == len(report.latency) and c.speedup is not None
    (kept,) = [c for c in report.candidates if c.chosen]
    assert report.settings.recipe == kept.recipe
    assert report.latency == kept.latency
    assert load_contract(tmp_path / "q.onnx").lineage["settings"]["recipe"] == kept.recipe


@pytest.mark.slow
def test_a_static_qdq_recipe_is_judged_and_timed_on_openvino(mlp, tmp_path):
    config = QuantizeConfig(
        out=tmp_path / "q.onnx",
        eval=str(tmp_path / "eval.npz"),
        calibration=str(tmp_path / "calib.npz"),
        recipes=("dynamic-u8s8-pc", "static-u8s8-qdq-openvino"),
        max_drop=0.05,
        bench_budget_s=0.05,
        allow_slower=True,
    )
    report = quantize(mlp, config)
    assert report.passed, report.reason
    rows = {c.recipe: c for c in report.candidates}
    openvino = rows["static-u8s8-qdq-openvino"]
    assert openvino.where == "OpenVINOExecutionProvider on onnxruntime-openvino==1.24.1"
    assert openvino.passed_accuracy and openvino.latency and openvino.speedup is not None
    assert openvino.settings.runtime == "onnxruntime-openvino==1.24.1"
    assert openvino.settings.calibration_method == "percentile"
    runs_on = load_contract(tmp_path / "q.onnx").lineage["runs_on"]
    assert runs_on == {
        "providers": list(report.settings.providers),
        "runtime": report.settings.runtime,
    }


@pytest.mark.slow
def test_a_model_kept_on_openvino_gets_its_contract_measured_there_and_verifies_there(
    mlp, tmp_path
):
    from onnxgate.contract import verify

    config = QuantizeConfig(
        out=tmp_path / "q.onnx",
        eval=str(tmp_path / "eval.npz"),
        calibration=str(tmp_path / "calib.npz"),
        recipes=("static-u8s8-qdq-openvino",),
        max_drop=0.05,
        bench_budget_s=0.05,
        allow_slower=True,
    )
    report = quantize(mlp, config)
    assert report.passed, report.reason
    assert load_contract(tmp_path / "q.onnx").lineage["runs_on"] == {
        "providers": ["OpenVINOExecutionProvider"],
        "runtime": "onnxruntime-openvino==1.24.1",
    }
    verified = verify(tmp_path / "q.onnx")
    assert verified.passed


def test_a_matmul_kept_in_float_can_store_its_weight_in_int8(tmp_path):
    import onnx
    import onnxruntime as ort

    from onnxgate.quantize._ort import WEIGHT_ONLY, weight_only_inputs

    proto = _mlp_model()
    x = np.random.default_rng(3).uniform(0, 1, (8, 16)).astype(np.float32)
    before = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    assert weight_only_inputs(proto, {"layer1"}) == 1
    (dq,) = [n for n in proto.graph.node if n.op_type == "DequantizeLinear"]
    assert dq.name.startswith(WEIGHT_ONLY)
    layer1 = next(n for n in proto.graph.node if n.name == "layer1")
    assert layer1.op_type == "MatMul" and layer1.input[1] == dq.output[0]
    stored = {i.name: i for i in proto.graph.initializer}
    assert stored[dq.input[0]].data_type == onnx.TensorProto.INT8 and "w1" not in stored
    after = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    cosine = float((before * after).sum() / np.linalg.norm(before) / np.linalg.norm(after))
    assert 0.999 < cosine < 1.0  # rounded, not unchanged
