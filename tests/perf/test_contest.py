"""The contest behind `bench --vs` and tune's final round: worker processes, interleaving, failures."""

from __future__ import annotations

import io
import json
import signal
import textwrap

import numpy as np
import pytest
from onnx import helper
from typer.testing import CliRunner

from models import mlp, save, value
from models import model as make
from onnxgate.cli import app
from onnxgate.errors import ConfigError, ExitCode, InternalError, RunFailed
from onnxgate.perf import BenchConfig, bench
from onnxgate.perf._contest import Contender, Contest, _death, _Process
from onnxgate.perf._worker import serve


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


def _corrupt_feeds(monkeypatch):
    """The parent writes feeds the worker cannot read: onnxgate's bug, not the model's."""

    def not_an_npz(path, arrays):
        path.write_bytes(b"this is not an .npz archive")

    monkeypatch.setattr("onnxgate.perf._contest.save_arrays", not_an_npz)


def test_an_exception_in_the_workers_own_code_is_an_internal_error(model, monkeypatch):
    _corrupt_feeds(monkeypatch)
    with Contest([Contender("a", onnx=model)]) as contest:
        with pytest.raises(InternalError) as caught:
            contest.race([_feeds()], warmup=0, runs=1)
    assert not isinstance(caught.value, RunFailed)
    assert caught.value.exit_code == ExitCode.INTERNAL == 4
    message = caught.value.message
    # the exception's type and where in onnxgate it was raised
    assert "during 'feeds': ValueError: " in message, message
    assert "onnxgate/perf/_worker.py:" in message and "in set_feeds, inside numpy/" in message


def test_bench_vs_exits_4_when_onnxgate_fails_inside_a_worker(model, monkeypatch):
    _corrupt_feeds(monkeypatch)
    result = CliRunner().invoke(
        app, ["bench", str(model), "--batch", "1", "--runs", "2", "--vs", str(model), "-f", "json"]
    )
    assert result.exit_code == 4, result.output
    document = json.loads(result.stdout)
    assert document["error"] == "internal" and "in set_feeds" in document["message"]


def test_serve_answers_internal_error_for_garbled_and_unknown_requests(tmp_path):
    requests = io.StringIO(
        "not json\n"
        '{"op": "teleport"}\n'
        '{"op": "run", "count": 1}\n'
        f'{{"op": "feeds", "path": "{tmp_path / "missing.npz"}"}}\n'
    )
    answers = io.StringIO()
    serve(requests, answers)
    got = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert [a["error"] for a in got] == ["InternalError"] * 4
    assert "while reading a request: JSONDecodeError" in got[0]["message"]
    assert "unknown request 'teleport'" in got[1]["message"]
    assert "run before anything was loaded" in got[2]["message"]
    assert "FileNotFoundError" in got[3]["message"] and "in set_feeds" in got[3]["message"]


def _kill_before(monkeypatch, op: str):
    """SIGKILL the worker just before it is sent ``op``: a death during that request."""
    ask = _Process.ask

    def killing_ask(self, request, timeout_s=None):
        if request.get("op") == op:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        return ask(self, request, timeout_s)

    monkeypatch.setattr(_Process, "ask", killing_ask)


def test_a_worker_killed_by_a_signal_while_running_the_model_is_a_run_failure(model, monkeypatch):
    _kill_before(monkeypatch, "run")
    with Contest([Contender("a", onnx=model)]) as contest:
        with pytest.raises(RunFailed, match=r"killed by SIGKILL during 'run'"):
            contest.race([_feeds()], warmup=0, runs=1)


def test_a_worker_that_dies_while_only_onnxgate_code_runs_is_an_internal_error(model, monkeypatch):
    _kill_before(monkeypatch, "feeds")
    with Contest([Contender("a", onnx=model)]) as contest:
        with pytest.raises(InternalError, match=r"killed by SIGKILL during 'feeds'"):
            contest.race([_feeds()], warmup=0, runs=1)


def test_a_python_traceback_on_the_workers_death_is_an_internal_error():
    stderr = textwrap.dedent(
        """\
        some library chatter
        Traceback (most recent call last):
          File "/x/onnxgate/perf/_worker.py", line 170, in main
            serve(sys.stdin, answers)
        UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff
        """
    )
    error = _death("a", "run", 1, stderr)
    assert isinstance(error, InternalError)
    assert 'File "/x/onnxgate/perf/_worker.py", line 170, in main' in error.message
    assert error.message.endswith("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff")
    # the same exit code without a traceback is the module ending the process (sys.exit(1))
    assert type(_death("a", "run", 1, "bye")) is RunFailed
    assert type(_death("a", "load", -11, "")) is RunFailed
    assert "SIGSEGV" in _death("a", "load", -11, "").message


def test_string_feeds_cross_to_workers_unchanged_or_are_refused(tmp_path):
    from onnxgate.errors import FeedError
    from onnxgate.perf import save_arrays

    path = tmp_path / "feeds.npz"
    save_arrays(path, {"text": np.array(["héllo", ""], dtype=object)})
    with np.load(path, allow_pickle=False) as archive:
        assert archive["text"].tolist() == ["héllo", ""]
    # a unicode array drops trailing NULs and cannot hold bytes: refused, not changed silently
    for element in ("end\0", b"raw"):
        with pytest.raises(FeedError, match="input 'text'"):
            save_arrays(path, {"text": np.array(["a", element], dtype=object)})
