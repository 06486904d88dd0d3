"""OpenVINO, a real second execution provider, through onnxruntime-openvino in its environment.

Nothing here is a fake: ``onnxruntime-openvino==1.24.1`` is installed once into an isolated
environment (as older releases are) and every command runs its real provider. What a CPU-only
machine can show: placement per node, a provider that does not start (``precision=BF16`` is
refused for OpenVINO's CPU device), outputs against ONNX Runtime's CPU provider, and doctor's
one-node probe.
"""

from __future__ import annotations

import json
import shutil

import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus
from models import model, save, value
from onnxgate.cli import app

pytestmark = pytest.mark.slow
OPENVINO = "onnxruntime-openvino==1.24.1"
OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
MNIST = CORPUS / "mnist.onnx"
needs_mnist = needs_corpus(MNIST)


def _run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    return result.exit_code, json.loads(result.stdout)


def _mixed() -> onnx.ModelProto:
    """Relu -> ai.onnx.ml Normalizer -> Sigmoid -> Tanh: OpenVINO has no Normalizer."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu_a"),
        helper.make_node("Normalizer", ["a"], ["b"], name="norm", domain="ai.onnx.ml", norm="L2"),
        helper.make_node("Sigmoid", ["b"], ["c"], name="sig_c"),
        helper.make_node("Tanh", ["c"], ["y"], name="tanh_y"),
    ]
    proto = model(
        nodes,
        [value("x", shape=(2, 4))],
        [value("y", shape=(2, 4))],
        opsets={"": 17, "ai.onnx.ml": 3},
    )
    # OpenVINO compiles only what has a known rank
    proto.graph.value_info.extend(value(n, shape=(2, 4)) for n in ("a", "b", "c"))
    return proto


@needs_mnist
def test_openvino_claims_every_compute_node_of_mnist():
    code, report = _run(
        "placement", str(MNIST), "-r", OPENVINO, "--providers", "openvino", "--require", "openvino"
    )
    assert code == 0, report
    assert report["runtime"] == "onnxruntime-openvino 1.24.1"
    assert report["method"] == "assignment"
    assert report["assignments"] == {OV: 8}
    assert report["session_providers"] == [OV, CPU]
    assert report["violations"] == [] and report["fallback"] == []


def test_placement_counts_per_provider_and_require_names_what_fell_back(tmp_path):
    path = save(_mixed(), tmp_path / "mixed.onnx")
    code, report = _run(
        "placement", str(path), "-r", OPENVINO, "--providers", "openvino", "--require", "openvino"
    )
    assert code == 1, report
    claimed = {n["node"] for n in report["nodes"] if n["provider"] == OV}
    on_cpu = {n["node"] for n in report["nodes"] if n["provider"] == CPU}
    assert "norm" in on_cpu and {"sig_c", "tanh_y"} <= claimed
    assert report["assignments"] == {OV: len(claimed), CPU: len(on_cpu)}
    assert {v["node"] for v in report["violations"]} == on_cpu
    assert report["op_types"][CPU]["ai.onnx.ml:Normalizer"] == 1


@needs_mnist
def test_a_provider_that_does_not_start_exits_3_with_onnx_runtimes_reason():
    """precision=BF16 is refused for OpenVINO's CPU device; ONNX Runtime alone would run on CPU."""
    code, error = _run(
        "placement", str(MNIST), "-r", OPENVINO, "--providers", "openvino:precision=BF16"
    )
    assert code == 3, error
    assert error["error"] == "provider-failed"
    assert "OpenVINOExecutionProvider did not start" in error["message"]
    assert "Unsupported inference precision is selected" in error["message"]
    code, error = _run(
        "compare", str(MNIST), "-r", OPENVINO, "--providers", "openvino:foo=bar", "-a", "ort"
    )
    assert code == 3 and "Invalid OpenVINO EP option: foo" in error["message"]


@needs_mnist
def test_compare_runs_the_candidate_on_openvino_and_says_what_ran():
    code, report = _run(
        "compare",
        str(MNIST),
        "-r",
        OPENVINO,
        "--providers",
        "openvino:precision=FP32",
        "--against",
        "ort:disable",
    )
    assert code == 0, report
    ran = report["ran"]["candidate"]
    assert (ran["runtime"], ran["version"]) == ("onnxruntime-openvino", "1.24.1")
    assert ran["settings"]["providers"] == [OV, CPU]
    assert report["ran"]["reference"]["settings"]["providers"] == [CPU]
    assert report["outputs"][0]["max_abs"] < 1e-4


@needs_mnist
def test_localize_on_openvino_replays_the_first_node_that_differs():
    # at a tolerance no two implementations meet, a convolution differs: the first one with
    # AVX-512, the second on a CPU with AVX2 only, where OpenVINO's first matches bit for bit
    code, report = _run(
        "compare", str(MNIST), "-r", OPENVINO, "--providers", "openvino", "-a", "ort:disable",
        "--atol", "1e-9", "--rtol", "1e-9", "--localize",
    )  # fmt: skip
    assert code == 1
    divergence = report["first_divergence"]
    assert divergence["found"] and divergence["node"] in ("Convolution28", "Convolution110")
    assert divergence["replay"]["verdict"] == "differs on identical inputs"
    assert "the two implementations of Conv-1 disagree" in divergence["note"]


@needs_mnist
def test_verify_on_openvino_with_the_contracts_samples(tmp_path):
    path = tmp_path / "mnist.onnx"
    shutil.copy(MNIST, path)
    code, contract = _run("contract", "init", str(path))
    assert code == 0, contract
    assert contract["golden"]["second_opinion"]["agreed"] is True
    code, report = _run("verify", str(path), "-r", OPENVINO, "--providers", "openvino")
    assert code == 0, report
    (row,) = report["results"]
    assert row["placement"]["reason"].startswith(f"8 node(s) on {OV}")
    assert row["ran"]["runtime"] == "onnxruntime-openvino"


def test_doctor_probes_openvino_with_its_options():
    code, report = _run("doctor", "-r", OPENVINO, "--providers", "openvino")
    assert code == 0, report["findings"]
    assert report["facts"]["runtime"] == OPENVINO
    assert OV in report["working"]
    assert [d["name"] for d in report["facts"]["distributions"]] == ["onnxruntime-openvino"]
    code, report = _run("doctor", "-r", OPENVINO, "--providers", "openvino:precision=BF16")
    assert code == 3
    (probe,) = [p for p in report["facts"]["probes"] if p["provider"] == OV]
    assert probe["status"] == "fails"
    assert any("Unsupported inference precision" in line for line in probe["log"])
    assert probe["options"] == {"precision": "BF16"}
    (finding,) = [f for f in report["findings"] if f["code"] == "PRV002"]
    assert "probed with the options precision=BF16" in finding["fix"]


@needs_mnist
def test_bench_times_the_model_inside_openvinos_environment():
    code, report = _run(
        "bench", str(MNIST), "-r", OPENVINO, "--providers", "openvino", "--runs", "5",
        "--warmup", "1", "--vs", str(MNIST),
    )  # fmt: skip
    assert code == 0, report
    assert report["runtime"] == "onnxruntime-openvino 1.24.1"
    assert report["session"]["providers"] == [OV, CPU]  # read back from the worker's session
    assert report["vs"]["runtime"].startswith("onnxruntime ")  # the contender runs here, on CPU
    assert [r["runs"] for r in report["results"]] == [5]
    assert report["ratio"][0]["ratio"] > 0
    code, error = _run(
        "bench", str(MNIST), "-r", OPENVINO, "--providers", "openvino:precision=BF16", "--runs", "2"
    )
    assert code == 3 and error["error"] == "provider-failed", error
    assert error["message"].startswith("onnxruntime-openvino 1.24.1: OpenVINOExecutionProvider")
    assert "Nothing ran on CPU in its place" in error["hint"]


@needs_mnist
def test_a_provider_that_starts_but_claims_nothing_is_named():
    """device_type=cpu (lower case) is accepted by OpenVINO, which then takes no node at all."""
    code, report = _run(
        "placement", str(MNIST), "-r", OPENVINO, "--providers", "openvino:device_type=cpu",
        "--require", "openvino",
    )  # fmt: skip
    assert code == 1
    assert report["assignments"] == {CPU: 8}
    assert any(f"{OV} started but claimed no compute node" in n for n in report["notes"])
