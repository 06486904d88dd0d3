"""profile: ONNX Runtime's trace as tables (no timing is asserted, only what the figures cover)."""

from __future__ import annotations

import json
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import mlp, save
from onnxgate.cli import app
from onnxgate.errors import RunFailed
from onnxgate.model import load_model
from onnxgate.perf import ProfileConfig, ProfileReport, profile
from onnxgate.perf._profile import bridge, report_from_trace
from onnxgate.runners import OrtRunner
from onnxgate.settings import FeedSettings, SessionSettings, invalid

MNIST = CORPUS / "mnist.onnx"
needs_mnist = needs_corpus(MNIST)
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


def _optimised(path, tmp_path, level: str = "all") -> onnx.ModelProto:
    """The graph ONNX Runtime runs at ``level``, saved by the session itself."""
    saved = tmp_path / f"optimised-{level}.onnx"
    with OrtRunner(load_model(path), SessionSettings(opt_level=level), save_optimized=saved):
        pass
    return onnx.load(saved)


@needs_mnist
def test_mnist_tables_cover_the_optimised_graph_and_only_the_counted_runs(tmp_path):
    report = profile(MNIST, ProfileConfig(warmup=3, runs=4, top=0))
    graph = _optimised(MNIST, tmp_path).graph
    assert {n.node for n in report.nodes} == {n.name for n in graph.node}
    assert Counter(n.op_type for n in report.nodes) == Counter(n.op_type for n in graph.node)
    assert {r.name for r in report.op_types} == {n.op_type for n in graph.node}
    assert report.node_count == len(graph.node)
    # warm-up dropped: each node ran 7 times, 4 of them count
    assert report.runs == 4 and report.warmup == 3
    assert all(n.calls == 4 for n in report.nodes)
    assert sum(r.calls for r in report.op_types) == report.node_count * 4
    assert sum(r.share for r in report.op_types) == pytest.approx(1.0)
    assert sum(n.share for n in report.nodes) == pytest.approx(1.0)
    assert sum(r.ms for r in report.op_types) == pytest.approx(report.node_ms)
    assert [(r.name, r.nodes) for r in report.by_provider] == [(CPU, report.node_count)]
    assert [n.ms for n in report.nodes] == sorted((n.ms for n in report.nodes), reverse=True)
    assert report.memcpy == [] and report.trace is None
    assert report.shapes == {"Input3": [1, 1, 28, 28]}
    assert report.providers == [CPU] and report.runtime == f"onnxruntime {ort.__version__}"


def test_top_nodes_carry_the_shapes_they_ran_with(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    everything = profile(
        path, ProfileConfig(batch=5, session=SessionSettings(opt_level="disable"), warmup=1, runs=2)
    )
    by_name = {n.node: n for n in everything.nodes}
    assert set(by_name) == {"mm", "add", "relu"}  # no fusion at level disable
    mm = by_name["mm"]
    # MatMul pre-packs its constant weight, and a pre-packed input is not in the trace
    assert [(t.dtype, t.shape) for t in mm.inputs] == [("float", [5, 4])]
    assert [(t.dtype, t.shape) for t in mm.outputs] == [("float", [5, 3])]
    assert [t.shape for t in by_name["add"].inputs] == [[5, 3], [3]]
    assert str(mm.outputs[0]) == "float[5,3]"
    assert [t.shape for t in by_name["relu"].inputs] == [[5, 3]]
    two = profile(
        path,
        ProfileConfig(
            batch=5, session=SessionSettings(opt_level="disable"), warmup=1, runs=2, top=2
        ),
    )
    assert len(two.nodes) == 2 and two.node_count == 3
    assert two.nodes[0].ms >= two.nodes[1].ms
    assert len(two.op_types) == 3  # the tables still cover every node


def test_fusion_shows_under_the_fused_graph(tmp_path):
    """At level all, MatMul + Add run as one Gemm: the profile lists what ran, not the file."""
    path = save(mlp(), tmp_path / "mlp.onnx")
    report = profile(path, ProfileConfig(warmup=0, runs=1, top=0))
    graph = _optimised(path, tmp_path).graph
    assert {r.name for r in report.op_types} == {n.op_type for n in graph.node}
    assert "MatMul" not in {r.name for r in report.op_types}


def test_trace_is_kept_only_when_asked(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = save(mlp(), tmp_path / "mlp.onnx")
    report = profile(path, ProfileConfig(warmup=2, runs=3))
    assert report.trace is None and list(scratch.iterdir()) == []
    kept = tmp_path / "trace.json"
    report = profile(path, ProfileConfig(warmup=2, runs=3, trace=kept))
    assert report.trace == str(kept) and list(scratch.iterdir()) == []
    events = json.loads(kept.read_text())
    assert sum(e.get("name") == "model_run" for e in events) == 5  # warm-up runs are in the file


def test_inputs_file_is_profiled(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    data = tmp_path / "x.npz"
    np.savez(data, x=np.ones((6, 4), np.float32))
    report = profile(
        path,
        ProfileConfig(
            feeds=FeedSettings(inputs=data),
            session=SessionSettings(opt_level="disable"),
            warmup=0,
            runs=1,
        ),
    )
    assert report.shapes == {"x": [6, 4]}
    assert {n.node: n.inputs[0].shape for n in report.nodes}["mm"] == [6, 4]


@pytest.mark.parametrize(
    "config",
    [
        {"runs": 0},
        {"warmup": -1},
        {"top": -1},
        {"batch": 0},
        {"feeds": "x.npz", "batch": 2},
    ],
)
def test_bad_configs_are_refused(config, tmp_path):
    if "feeds" in config:
        config["feeds"] = FeedSettings(inputs=tmp_path / config["feeds"])
    with pytest.raises(ValidationError) as refused:
        ProfileConfig(**config)
    assert invalid(refused.value).field in config


def test_a_trace_path_in_a_missing_folder_is_refused_before_running(tmp_path):
    with pytest.raises(ValidationError, match="does not exist") as refused:
        ProfileConfig(trace=tmp_path / "missing" / "trace.json")
    assert invalid(refused.value).field == "trace"


# --- the trace itself: constructed events, as ONNX Runtime writes them ---------------------


def _run(ts: int, dur: int) -> dict:
    return {"cat": "Session", "name": "model_run", "ph": "X", "ts": ts, "dur": dur, "args": {}}


def _node(name, op, provider, ts, dur, shape=(2, 3)) -> dict:
    return {
        "cat": "Node",
        "name": f"{name}_kernel_time",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "args": {
            "op_name": op,
            "provider": provider,
            "input_type_shape": [{"float": list(shape)}],
            "output_type_shape": [{"float": list(shape)}],
        },
    }


def _gpu_trace(runs: int, warmup: int) -> list[dict]:
    """Input copied to the GPU, a Conv there, a Shape left on CPU, the result copied back."""
    events: list[dict] = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 50}]
    for index in range(warmup + runs):
        start = 1000 * (index + 1)
        slow = 100 if index < warmup else 1  # warm-up calls are slow: they must not count
        events += [
            _node("copy_in", "MemcpyFromHost", CUDA, start + 1, 4 * slow),
            _node("conv", "Conv", CUDA, start + 10, 10 * slow),
            _node("shape", "Shape", CPU, start + 30, 2 * slow),
            _node("copy_out", "MemcpyToHost", CUDA, start + 40, 4 * slow),
            {"cat": "Node", "name": "conv_fence_before", "ts": start + 9, "dur": 1, "args": {}},
            _run(start, 100),
        ]
    return events


def test_memcpy_nodes_name_the_providers_they_bridge():
    report = report_from_trace(_gpu_trace(runs=3, warmup=2), warmup=2, runs=3)
    copies = {m.node: (m.op_type, m.source, m.target) for m in report.memcpy}
    assert copies == {
        "copy_in": ("MemcpyFromHost", CPU, CUDA),
        "copy_out": ("MemcpyToHost", CUDA, CPU),
    }
    assert bridge("MemcpyToHost", "ROCMExecutionProvider") == ("ROCMExecutionProvider", CPU)
    providers = {r.name: (r.nodes, r.calls) for r in report.by_provider}
    assert providers == {CUDA: (3, 9), CPU: (1, 3)}
    assert report.memcpy[0].outputs[0].shape == [2, 3]


def test_warmup_windows_are_dropped_from_a_trace():
    report = report_from_trace(_gpu_trace(runs=3, warmup=2), warmup=2, runs=3, top=0)
    assert report.runs == 3 and report.node_count == 4
    assert {n.node: n.calls for n in report.nodes} == dict.fromkeys(
        ["copy_in", "conv", "shape", "copy_out"], 3
    )
    # only the 1x durations: 4 + 10 + 2 + 4 microseconds per run
    assert report.node_ms == pytest.approx(0.020)
    assert {r.name: r.share for r in report.op_types} == pytest.approx(
        {"Conv": 0.5, "MemcpyFromHost": 0.2, "MemcpyToHost": 0.2, "Shape": 0.1}
    )
    assert report.run_ms == pytest.approx(0.1)


def test_a_run_far_slower_than_the_median_earns_a_note():
    events = _gpu_trace(runs=3, warmup=2)
    assert not report_from_trace(events, warmup=2, runs=3).notes
    conv_of_last_run = [e for e in events if e["name"] == "conv_kernel_time"][-1]
    conv_of_last_run["dur"] = 1000
    (note,) = report_from_trace(events, warmup=2, runs=3).notes
    assert "the machine was busy" in note and "1.010 ms in kernels" in note
    events[-1]["dur"] = 900  # the last model_run event: the whole run was slow too
    notes = report_from_trace(events, warmup=2, runs=3).notes
    assert len(notes) == 2 and "0.900 ms in all" in notes[0]


def test_a_trace_missing_its_last_runs_counts_what_follows_the_warmup():
    events = _gpu_trace(runs=3, warmup=2)
    short = events[: len(events) - 6]  # the last run was never recorded
    report = report_from_trace(short, warmup=2, runs=3)
    assert report.runs == 2
    assert {n.calls for n in report.nodes} == {2}
    assert any("4 of the 5 runs" in note for note in report.notes)
    with pytest.raises(RunFailed, match="none after the 2 warm-up"):
        report_from_trace(events[:12], warmup=2, runs=3)


def test_report_round_trips_through_json():
    report = report_from_trace(_gpu_trace(runs=1, warmup=0), warmup=0, runs=1, model="m.onnx")
    assert ProfileReport.model_validate_json(report.model_dump_json()) == report
    with pytest.raises(ValueError):
        ProfileReport.model_validate({**report.model_dump(), "typo": 1})


# --- the command -----------------------------------------------------------------------------

cli = CliRunner()


def test_cli_json_document(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    result = cli.invoke(
        app,
        ["profile", str(path), "-f", "json", "--runs", "2", "--warmup", "1", "--top", "1"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["runs"] == 2 and len(document["nodes"]) == 1
    assert sum(r["calls"] for r in document["op_types"]) == document["node_count"] * 2
    assert document["by_provider"][0]["name"] == CPU


def test_cli_text_tables_and_trace(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    trace = tmp_path / "t.json"
    args = ["profile", str(path), "--opt-level", "disable", "-b", "2", "--runs", "1"]
    result = cli.invoke(app, [*args, "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "MatMul" in result.stdout and "mm: float[2,4] → float[2,3]" in result.stdout
    assert "no Memcpy node" in result.stdout
    assert trace.exists() and str(trace) in result.stdout


def test_cli_errors_have_exit_codes_and_no_traceback(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    several = cli.invoke(app, ["profile", str(path), "--dim", "batch=1,2", "-f", "json"])
    assert several.exit_code == 2
    assert json.loads(several.stdout)["error"] == "config"
    missing = cli.invoke(app, ["profile", str(tmp_path / "none.onnx")])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    if CUDA not in ort.get_available_providers():
        gpu = cli.invoke(app, ["profile", str(path), "-p", "cuda", "-f", "json"])
        assert gpu.exit_code == 3
        assert json.loads(gpu.stdout)["error"] == "provider-unavailable"


def test_help_teaches_warmup_and_memcpy():
    result = cli.invoke(app, ["profile", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "MemcpyFromHost" in text and "warm" in text.lower()


def test_an_if_node_counts_only_its_own_time_beside_its_body(tmp_path):
    from onnx import TensorProto, helper

    from models import model as make
    from models import value

    w = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    then = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="body_mm"),
            helper.make_node("Relu", ["h"], ["t"], name="body_relu"),
        ],
        "then",
        [],
        [value("t", shape=(64, 64))],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="else_id")],
        "else",
        [],
        [value("e", shape=(64, 64))],
    )
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)
    inputs = [value("c", TensorProto.BOOL, shape=()), value("x", shape=(64, 64))]
    path = save(
        make([node], inputs, [value("y", shape=(64, 64))], initializers=[w]), tmp_path / "if.onnx"
    )
    data = tmp_path / "in.npz"
    np.savez(data, c=np.array(True), x=np.ones((64, 64), np.float32))
    report = profile(
        path,
        ProfileConfig(
            feeds=FeedSettings(inputs=data),
            session=SessionSettings(opt_level="disable"),
            warmup=1,
            runs=3,
        ),
    )
    ops = {row.name for row in report.op_types}
    assert {"If", "MatMul", "Relu"} <= ops
    assert report.node_ms <= report.run_ms
    assert sum(row.share for row in report.op_types) == pytest.approx(1.0)
    assert any("own time only" in note for note in report.notes)
