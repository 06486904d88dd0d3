"""Golden outputs with a second opinion, and node replay on a fault injected into one runtime.

The fault is a real implementation bug planted in the reference evaluator (an Add that adds 0.5
more), the way onnx's BatchNormalization-9 bug really behaved: the model is right, one of the two
implementations is not, and the tools must say so before a wrong golden file exists.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from models import mlp, model, save, value
from onnxgate.cli import app
from onnxgate.compare import CompareConfig, compare
from onnxgate.contract import ContractConfig, contract_paths, init_contract, load_contract
from onnxgate.errors import ParityError
from onnxgate.runners import _reference


def _faulty_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference evaluator, with onnxgate's corrections, plus an Add that is wrong by 0.5."""
    from onnx.reference.op_run import OpRun

    class Add(OpRun):
        op_domain = ""

        def _run(self, a, b):  # type: ignore[no-untyped-def]
            return (a + b + np.asarray(0.5, dtype=a.dtype),)

    fixes = _reference.overrides()
    monkeypatch.setattr(_reference, "overrides", lambda: (*fixes, Add))


def _two_adds():
    """x @ W -> + b -> Relu -> * k: the Add is the second node."""
    rng = np.random.default_rng(1)
    consts = [
        numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(np.ones(3, np.float32), "b"),
        numpy_helper.from_array(np.array(2.0, np.float32), "k"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="bias"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "k"], ["y"], name="scale"),
    ]
    return model(nodes, [value("x")], [value("y", shape=("batch", 3))], initializers=consts)


def test_an_implementation_fault_is_localized_and_replay_says_the_implementations_disagree(
    tmp_path, monkeypatch
):
    path = save(_two_adds(), tmp_path / "two.onnx")
    assert compare(
        path, CompareConfig(against="reference")
    ).passed  # the real evaluator agrees with ONNX Runtime
    _faulty_add(monkeypatch)
    report = compare(path, CompareConfig(against="reference", localize=True))
    assert not report.passed
    divergence = report.first_divergence
    assert divergence.found and divergence.node == "bias" and divergence.op_type == "Add"
    assert divergence.chain == ["relu", "scale"]
    replay = divergence.replay
    assert replay.verdict == "differs on identical inputs" and replay.operator == "Add-14"
    assert replay.output_difference == pytest.approx(0.5, abs=1e-6)
    assert divergence.note.startswith("the two implementations of Add-14 disagree on identical")


def test_contract_init_refuses_goldens_a_second_runner_disputes_and_writes_nothing(
    tmp_path, monkeypatch
):
    path = save(_two_adds(), tmp_path / "two.onnx")
    _faulty_add(monkeypatch)
    with pytest.raises(ParityError) as caught:
        init_contract(path)
    message = str(caught.value)
    assert "disagree with a second opinion, onnxruntime[disable" in message
    assert "First diverging node: bias (Add)" in message
    assert "the two implementations of Add-14 disagree on identical inputs" in message
    assert "reference='ort:disable'" in caught.value.hint  # a Python caller's config field
    assert not any(p.exists() for p in contract_paths(path))
    result = CliRunner().invoke(app, ["contract", "init", str(path), "--format", "json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["error"] == "parity"
    hint = json.loads(result.stdout)["hint"]  # a command's flags
    assert "--reference ort:disable" in hint and "--no-second-opinion keeps" in hint
    assert not any(p.exists() for p in contract_paths(path))


def test_the_contract_records_which_second_opinion_was_taken(tmp_path, monkeypatch):
    path = save(mlp(), tmp_path / "mlp.onnx")
    golden = init_contract(path).golden
    assert golden.produced_by == "reference"
    opinion = golden.second_opinion
    assert opinion.agreed is True and opinion.runner.startswith("onnxruntime[disable")
    assert opinion.detail.startswith("3 sample(s) of y; worst max_abs")
    # from ONNX Runtime, the reference evaluator is the second opinion
    golden = init_contract(path, ContractConfig(reference="ort", force=True)).golden
    assert golden.second_opinion.runner == "reference" and golden.second_opinion.agreed
    # without one, the contract says so, and verify still holds it
    _faulty_add(monkeypatch)
    result = CliRunner().invoke(
        app, ["contract", "init", str(path), "--reference", "ort", "--force", "--no-second-opinion"]
    )
    assert result.exit_code == 0, result.output
    assert "second opinion: not taken: --no-second-opinion" in result.stdout
    opinion = load_contract(path).golden.second_opinion
    assert opinion.agreed is None and opinion.runner is None
    assert CliRunner().invoke(app, ["verify", str(path)]).exit_code == 0


def test_bench_and_profile_use_the_contracts_samples_only_for_the_bytes_it_describes(tmp_path):
    """A contract of a replaced model must not hand its shapes to steps that run the model."""
    from onnxgate.contract import contract_samples
    from onnxgate.perf import BenchConfig, ProfileConfig, bench, profile

    path = save(mlp(), tmp_path / "m.onnx")
    init_contract(path)
    samples = contract_samples(path)
    assert [s.label for s in samples] == [s.label for s in load_contract(path).golden.samples]
    timed = bench(path, BenchConfig(runs=2, warmup=0))
    assert [r.dims for r in timed.results] == [dict(s.dims) for s in samples]
    assert any("golden samples" in w for w in timed.notes)
    assert any("golden sample" in n for n in profile(path, ProfileConfig(runs=1)).notes)
    save(_two_adds(), path)  # replaced: the contract now describes other bytes
    assert contract_samples(path) is None
    assert not any("golden samples" in w for w in bench(path, BenchConfig(runs=2)).warnings)
