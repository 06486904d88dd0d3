"""bench: figures per configuration from timed runs (no timing is asserted, only their shape)."""

from __future__ import annotations

import json

import pytest
from onnx import helper
from typer.testing import CliRunner

from models import mlp, save, value
from models import model as make
from onnxgate.cli import app
from onnxgate.errors import ConfigError
from onnxgate.perf import BenchConfig, bench


@pytest.fixture
def model(tmp_path):
    return save(mlp(), tmp_path / "mlp.onnx")


def test_every_batch_and_thread_count_is_measured_with_consistent_figures(model):
    report = bench(model, BenchConfig(batches=[1, 4], threads=[1, 2], warmup=2, runs=15))
    assert [(r.batch, r.threads) for r in report.results] == [(1, 1), (4, 1), (1, 2), (4, 2)]
    for r in report.results:
        assert r.runs == 15
        assert r.min_ms <= r.p50_ms <= r.p90_ms <= r.p99_ms
        assert r.throughput == pytest.approx(r.batch * 1000.0 / r.mean_ms)
        assert r.noisy == (r.cv > 0.10)
    assert report.providers == ["CPUExecutionProvider"]


def test_a_time_budget_still_gives_the_minimum_number_of_runs(model):
    report = bench(model, BenchConfig(batches=[2], warmup=0, budget=0.001, min_runs=12))
    (result,) = report.results
    assert result.runs >= 12


def test_batch_on_a_model_without_a_symbolic_batch_is_refused(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    fixed = save(
        make(nodes, [value("x", shape=(2, 3))], [value("y", shape=(2, 3))]), tmp_path / "relu.onnx"
    )
    with pytest.raises(ConfigError, match="no symbolic batch dimension"):
        bench(fixed, BenchConfig(batches=[4], runs=1))


def test_cli_json_has_every_figure(model):
    result = CliRunner().invoke(
        app, ["bench", str(model), "--batch", "1,3", "--runs", "5", "--warmup", "1", "-f", "json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    keys = {"batch", "dims", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput", "cv"}
    assert [r["batch"] for r in document["results"]] == [1, 3]
    assert keys <= set(document["results"][0])


@pytest.mark.parametrize("option", [["--batch", "x"], ["--batch", "0"], ["--runs", "0"]])
def test_bad_options_are_exit_2(model, option):
    result = CliRunner().invoke(app, ["bench", str(model), *option])
    assert result.exit_code == 2, result.output


def test_a_batch_asked_for_takes_the_other_sizes_the_contract_proved(tmp_path):
    from models import detector
    from onnxgate.contract import ContractConfig, init_contract
    from onnxgate.settings import FeedSettings

    path = save(detector(), tmp_path / "det.onnx")
    feeds = FeedSettings(dims={"batch": [1, 2], "height": [32], "width": [32]})
    init_contract(path, ContractConfig(feeds=feeds))
    report = bench(path, BenchConfig(batches=(3,), runs=3, warmup=1))
    # 224 (the role's size) is outside what the contract proved, and what tune timed
    assert [r.dims for r in report.results] == [{"batch": 3, "height": 32, "width": 32}]
