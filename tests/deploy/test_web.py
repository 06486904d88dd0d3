"""``deploy web``: the model, its input spec and the proof, run in a real headless Chromium.

The browser tests need Node.js, npm (the first run installs onnxruntime-web into the shared
environment folder) and Chromium; without them they skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from conftest import CORPUS, needs_corpus, needs_js
from models import mlp, save
from onnxgate.cli import app
from onnxgate.contract import SIDECAR, ContractConfig, init_contract
from onnxgate.deploy import WebConfig, deploy_web
from onnxgate.errors import ConfigError, SessionFailed
from onnxgate.settings import FeedSettings
from web_proof import before_proof, perturb

MNIST = CORPUS / "mnist.onnx"


@pytest.fixture
def mnist(tmp_path: Path) -> Path:
    """The corpus' mnist with its contract, in a folder of the test's own."""
    path = tmp_path / "src" / "mnist.onnx"
    path.parent.mkdir()
    shutil.copyfile(MNIST, path)
    init_contract(path, ContractConfig())
    return path


@pytest.fixture
def batched(tmp_path: Path) -> Path:
    """An MLP whose batch the contract proves from 1 to 7."""
    (tmp_path / "src").mkdir()
    path = save(mlp(), tmp_path / "src" / "mlp.onnx")
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 7]})))
    return path


@needs_js
@needs_corpus(MNIST)
def test_mnist_is_written_with_its_spec_and_proven_in_the_browser(mnist, tmp_path) -> None:
    out = tmp_path / "web"
    report = deploy_web(mnist, WebConfig(out=out, allow_ungated=True))
    assert report.passed and report.written
    assert sorted(p.name for p in out.iterdir()) == [
        "mnist.inputs.json",
        "mnist.onnx",
        "mnist.proof.json",
    ]
    assert (out / "mnist.onnx").read_bytes() == mnist.read_bytes()
    contract = SIDECAR.read(mnist)
    spec = json.loads((out / "mnist.inputs.json").read_text())
    assert spec["format"] == "onnxgate.web-inputs/1"
    assert spec["sha256"] == contract.identity.model.sha256
    assert [(i["name"], i["dtype"], i["shape"]) for i in spec["inputs"]] == [
        (s.name, s.dtype, list(s.shape)) for s in contract.signature.inputs
    ]
    assert [o["name"] for o in spec["outputs"]] == [o.name for o in contract.signature.outputs]
    proof = json.loads((out / "mnist.proof.json").read_text())
    assert proof["passed"] and proof["format"] == "onnxgate.web-proof/1"
    assert proof["runtime"] == "onnxruntime-web 1.30.0"
    assert (proof["backend"], proof["threads"]) == ("wasm", 1)
    assert proof["samples"] == len(contract.golden.samples)
    assert proof["outputs"][0]["max_abs"] < 1e-4
    assert proof["size_mb"] == pytest.approx(mnist.stat().st_size / 1e6, abs=1e-6)


@needs_js
def test_the_ort_format_with_two_threads_and_the_proven_ranges_from_the_cli(
    batched, tmp_path
) -> None:
    out = tmp_path / "web"
    result = CliRunner().invoke(
        app,
        ["deploy", "web", str(batched), "-o", str(out), "--ort", "--threads", "2"]
        + ["--allow-ungated", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model_file"] == "mlp.ort" and report["model_format"] == "ort"
    assert (report["backend"], report["threads"]) == ("wasm", 2)
    assert report["cross_origin_isolated"] is True
    assert {"mlp.ort", "mlp.required_operators.config"} <= {p.name for p in out.iterdir()}
    # the config names the model by file name, as mobile's does: not the gone staging folder
    config = (out / "mlp.required_operators.config").read_text()
    assert "# - mlp.ort\n" in config and str(tmp_path) not in config
    spec = json.loads((out / "mlp.inputs.json").read_text())
    (entry,) = spec["inputs"]
    assert entry["shape"][0] == "batch"
    assert entry["dims"] == {"batch": {"min": 1, "max": 7}}


@needs_js
@needs_corpus(MNIST)
def test_a_model_the_browser_runs_differently_fails_naming_the_output_and_writes_nothing(
    mnist, tmp_path, monkeypatch
) -> None:
    before_proof(monkeypatch, perturb)
    out = tmp_path / "web"
    result = CliRunner().invoke(
        app, ["deploy", "web", str(mnist), "-o", str(out), "--allow-ungated"]
    )
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    assert re.search(
        r"Plus214_Output_0: \d+ of 10 element\(s\) outside allclose.* \(max_abs \d", text
    )
    assert "nothing was written" in text
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if "onnxgate-web" in p.name]  # no staging left


@needs_js
@needs_corpus(MNIST)
def test_a_model_the_browser_cannot_load_names_the_runtime_and_its_error(
    mnist, tmp_path, monkeypatch
) -> None:
    before_proof(monkeypatch, lambda path: path.write_bytes(b"not a model"))
    with pytest.raises(SessionFailed, match=r"onnxruntime-web==1\.30\.0 cannot load mnist\.onnx"):
        deploy_web(mnist, WebConfig(out=tmp_path / "web", allow_ungated=True))
    assert not (tmp_path / "web").exists()


@needs_js
def test_weights_in_external_data_are_embedded_in_the_one_file_a_page_fetches(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "mlp.onnx"
    onnx.save(mlp(), path, save_as_external_data=True, location="mlp.weights", size_threshold=0)
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 3]})))
    out = tmp_path / "web"
    report = deploy_web(path, WebConfig(out=out, allow_ungated=True))
    assert report.passed, report.parity
    assert sorted(p.name for p in out.iterdir()) == [
        "mlp.inputs.json",
        "mlp.onnx",
        "mlp.proof.json",
    ]
    written = onnx.load(out / "mlp.onnx", load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in written.graph.initializer)
    assert any("embedded" in note for note in report.notes)


def test_a_folder_that_is_not_empty_and_a_runtime_that_is_no_browser_are_refused(
    batched, tmp_path
) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        deploy_web(batched, WebConfig(out=full, allow_ungated=True))
    result = CliRunner().invoke(
        app,
        ["deploy", "web", str(batched), "-o", str(tmp_path / "w"), "--allow-ungated"]
        + ["-r", "onnxruntime-node==1.30.0", "--format", "json"],
    )
    assert result.exit_code == 2, result.output
    assert "is not a release of onnxruntime-web" in json.loads(result.stdout)["message"]


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_js
def test_into_the_callers_empty_working_folder_past_a_killed_runs_staging(
    batched, tmp_path, monkeypatch
) -> None:
    import os

    here = tmp_path / "here"
    left = here / ".onnxgate-web-999999999-abc123"  # a killed run's: a pid that cannot run
    left.mkdir(parents=True)
    (left / "mlp.onnx").write_bytes(b"half")
    monkeypatch.chdir(here)
    inode = os.stat(here).st_ino
    result = CliRunner().invoke(
        app,
        ["deploy", "web", str(batched), "-o", ".", "--ort", "--allow-ungated", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    assert os.stat(here).st_ino == inode  # the folder is the caller's, not replaced
    names = sorted(p.name for p in here.iterdir())
    assert names == sorted(json.loads(result.stdout)["files"])
    assert not [p for p in tmp_path.iterdir() if "onnxgate-web" in p.name]
    # the files say what stdout says, with no path outside the folder, and the written file's hash
    proof = json.loads((here / "mlp.proof.json").read_text())
    said = json.loads(result.stdout)
    assert proof["gate"] == said["gate"] and proof["source"] == said["source"] == str(batched)
    assert "out" not in proof and str(tmp_path) not in json.dumps(proof).replace(str(batched), "")
    spec = json.loads((here / "mlp.inputs.json").read_text())
    assert spec["sha256"] == proof["sha256"] == _sha256(here / "mlp.ort")
    assert spec["contract_sha256"] == SIDECAR.read(batched).identity.model.sha256
    assert spec["contract_sha256"] != spec["sha256"]


@pytest.mark.parametrize("command", ["web", "mobile"])
def test_an_out_folder_under_a_file_or_named_out_is_said_as_given(
    batched, tmp_path, monkeypatch, command
) -> None:
    (tmp_path / "afile").write_text("x")
    full = tmp_path / "out" / "mnist"
    full.mkdir(parents=True)
    (full / "x").write_text("x")
    monkeypatch.chdir(tmp_path / "src")
    for out, said in [
        ("../afile/sub", "../afile/sub: ../afile is a file, not a folder"),
        ("../out/mnist", "../out/mnist exists and is not empty"),
    ]:
        args = ["deploy", command, str(batched), "-o", out, "--allow-ungated"]
        result = CliRunner().invoke(app, args)
        text = " ".join(result.output.split())
        assert result.exit_code == 2, text
        assert said in text and "--out/" not in text, text
    assert not (tmp_path / "src" / ".onnxgate-web").exists()


def test_the_input_spec_gives_integer_bounds_as_integers_high_excluded(tmp_path) -> None:
    from types import SimpleNamespace as NS

    from onnxgate.web import input_spec

    ids = NS(name="ids", dtype="int64", type=None, shape=[1, "seq"])
    x = NS(name="x", dtype="float32", type=None, shape=[2])
    signature = NS(
        inputs=[ids, x],
        dims={},
        values={"ids": NS(low=0.0, high=30522.0), "x": NS(low=-1.0, high=1.0)},
        served_outputs=lambda: [],
    )
    contract = NS(signature=signature, identity=NS(model=NS(sha256="c" * 64)))
    (tmp_path / "m.onnx").write_bytes(b"model")
    spec = input_spec(contract, "m", tmp_path / "m.onnx")
    values = [entry["values"] for entry in spec["inputs"]]
    assert values == [
        {"low": 0, "high": 30522, "high_exclusive": True},
        {"low": -1.0, "high": 1.0, "high_exclusive": True},
    ]
    assert all(type(v) is int for v in values[0].values() if v is not True)
    assert spec["sha256"] == _sha256(tmp_path / "m.onnx") and spec["contract_sha256"] == "c" * 64
