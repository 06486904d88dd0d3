"""The contest behind `bench --vs` and tune's final round: worker processes, interleaving, failures."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from onnx import helper
from typer.testing import CliRunner

from models import mlp, save, value
from models import model as make
from onnxgate.cli import app
from onnxgate.errors import ConfigError, RunFailed
from onnxgate.perf import BenchConfig, bench
from onnxgate.perf._contest import Contender, Contest


@pytest.fixture
def model(tmp_path):
    return save(mlp(), tmp_path / "mlp.onnx")


def _feeds(batch: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.ones((batch, 4), np.float32)}


def test_slices_alternate_and_the_order_flips_every_round(model):
    sides = [
        Contender("a", onnx=model),
        Contender("b", onnx=model, settings={"intra_op_threads": 1}),
    ]
    with Contest(sides) as contest:
        assert [s["providers"] for s in contest.loaded] == [["CPUExecutionProvider"]] * 2
        # a slice always holds one run; slices this short hold exactly one: 6 rounds
        ms = contest.race([_feeds(), _feeds()], warmup=2, runs=6, slice_s=1e-9)
    assert [len(side) for side in ms] == [6, 6]
    assert contest.schedule == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0]


def test_a_time_budget_gives_both_sides_their_minimum_runs(model):
    with Contest([Contender("a", onnx=model), Contender("b", onnx=model)]) as contest:
        ms = contest.race([_feeds(), _feeds()], warmup=0, budget_s=0.01, min_runs=25)
    assert all(len(side) >= 25 for side in ms)
    assert all(v > 0 for side in ms for v in side)


def test_an_input_named_like_a_savez_parameter_reaches_the_worker(tmp_path):
    nodes = [helper.make_node("Relu", ["file"], ["y"], name="relu")]
    path = save(make(nodes, [value("file")], [value("y")]), tmp_path / "file.onnx")
    with Contest([Contender("a", onnx=path)]) as contest:
        (ms,) = contest.race([{"file": np.ones((2, 4), np.float32)}], warmup=0, runs=3)
    assert len(ms) == 3


def test_bad_settings_come_back_as_the_same_error_class(model):
    with pytest.raises(ConfigError, match="unknown session settings: threads"):
        with Contest([Contender("a", onnx=model, settings={"threads": 2})]):
            pass


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """A module of torch factories that die, hang or build nothing, importable from the cwd."""
    (tmp_path / "badfactories.py").write_text(
        textwrap.dedent(
            """
            import os, time

            def dies():
                os._exit(7)

            def hangs():
                time.sleep(120)

            def raises():
                raise ValueError("no weights here")

            def linear():
                import torch

                return torch.nn.Linear(4, 3).eval()
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


@pytest.mark.torch
def test_a_worker_that_dies_is_reported_with_its_exit_code(model, factories):
    pytest.importorskip("torch")
    side = Contender("crash", torch="badfactories:dies", signature=model)
    with pytest.raises(RunFailed, match=r"died \(exit code 7\) during 'load'"):
        with Contest([side]):
            pass


@pytest.mark.torch
def test_a_worker_that_hangs_is_stopped_after_the_timeout(model, factories):
    pytest.importorskip("torch")
    side = Contender("hang", torch="badfactories:hangs", signature=model)
    with pytest.raises(RunFailed, match="did not answer 'load' within 3 s"):
        with Contest([side], timeout_s=3):
            pass


@pytest.mark.torch
def test_a_factory_that_raises_is_a_config_error(model, factories):
    pytest.importorskip("torch")
    side = Contender("raises", torch="badfactories:raises", signature=model)
    with pytest.raises(ConfigError, match="no weights here"):
        with Contest([side]):
            pass


def test_a_contender_names_one_thing_to_run(model):
    with pytest.raises(ConfigError, match="needs an ONNX model or a torch module"):
        Contender("neither")
    with pytest.raises(ConfigError, match="needs the ONNX model's signature"):
        Contender("t", torch="pkg:f")


def test_bench_vs_another_model_adapts_inputs_and_gives_a_ratio_per_configuration(tmp_path):
    ours = save(mlp(), tmp_path / "mlp.onnx")
    nodes = [
        helper.make_node("Add", ["x", "extra"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    other = save(make(nodes, [value("x"), value("extra")], [value("y")]), tmp_path / "other.onnx")
    report = bench(ours, BenchConfig(batches=[1, 4], warmup=1, runs=5, vs=str(other)))
    assert report.vs is not None and report.vs.name == str(other)
    assert [(r.batch, r.runs) for r in report.vs.results] == [(1, 5), (4, 5)]
    assert [r.batch for r in report.ratio] == [1, 4]
    for ratio, mine, theirs in zip(report.ratio, report.results, report.vs.results, strict=True):
        assert ratio.ratio == pytest.approx(theirs.p50_ms / mine.p50_ms)
    assert any("takes 'extra'" in w for w in report.warnings)
    assert "worker process" in report.method


def test_bench_vs_a_model_whose_inputs_do_not_fit_is_a_feed_error(tmp_path):
    ours = save(mlp(), tmp_path / "mlp.onnx")
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    fixed = save(
        make(nodes, [value("x", shape=(5, 4))], [value("y", shape=(5, 4))]), tmp_path / "f.onnx"
    )
    result = CliRunner().invoke(
        app, ["bench", str(ours), "--batch", "2", "--runs", "2", "--vs", str(fixed), "-f", "json"]
    )
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"] == "feed"


@pytest.mark.torch
@pytest.mark.slow
def test_bench_vs_torch_on_minilm(minilm_onnx):
    result = CliRunner().invoke(
        app,
        [
            "bench",
            str(minilm_onnx),
            "--batch",
            "1",
            "--dim",
            "seq=16",
            "--runs",
            "5",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--vs",
            "torch:onnxgate.examples.minilm:served",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["vs"]["runtime"].startswith("torch ")
    assert document["vs"]["results"][0]["runs"] == 5
    (ratio,) = document["ratio"]
    assert ratio["threads"] == 1 and ratio["ratio"] > 0


@pytest.mark.torch
def test_a_torch_thread_count_does_not_leak_into_the_next_configuration(model, factories):
    torch = pytest.importorskip("torch")
    default = torch.get_num_threads()
    side = Contender("t", torch="badfactories:linear", signature=model, threads=1)
    with Contest([side]) as contest:
        assert contest.loaded[0]["threads"] == 1
        (loaded,) = contest.load([Contender("t", torch="badfactories:linear", signature=model)])
        assert loaded["threads"] == default


def test_bench_vs_text_keeps_every_figure_on_a_narrow_terminal(tmp_path, monkeypatch):
    model = save(mlp(), tmp_path / "mlp.onnx")
    monkeypatch.setattr("onnxgate.cli._common.out.width", 60)
    result = CliRunner().invoke(
        app, ["bench", str(model), "--batch", "1", "--runs", "3", "--vs", str(model)]
    )
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert "samples/s" in result.stdout and "ratio" in result.stdout
