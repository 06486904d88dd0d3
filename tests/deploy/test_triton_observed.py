"""A model that declares one output shape and produces another: deployed as it produces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from models import misdeclared, save
from onnxgate.contract import ContractConfig, init_contract, load_contract, verify
from onnxgate.deploy import TritonConfig, check_repository, deploy_triton


@pytest.fixture
def proven(tmp_path) -> Path:
    """y is declared [1, seqlen]; the golden samples (N = 1 and 7) hold [N, 1, 10]."""
    path = save(misdeclared(), tmp_path / "ocr.onnx")
    init_contract(path, ContractConfig())
    return path


def parse(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def declared(path: Path) -> list:
    (output,) = onnx.load(path).graph.output
    return [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim]


def test_deploy_triton_writes_the_observed_dims_and_a_model_declaring_them(proven, tmp_path):
    report = deploy_triton(proven, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    config = parse(tmp_path / "repo" / "ocr" / "config.pbtxt")
    # axis 0 is N, the inputs' batch: Triton batches it, and the rest is what the model returns
    # the batch the contract proved (the serving range's top), not the declared 1
    assert config.max_batch_size == load_contract(proven).signature.dims["N"].max > 1
    assert [(o.name, list(o.dims)) for o in config.output] == [("y", [1, 10])]
    assert any("declares [1, seqlen] and produces [N, 1, 10]" in n for n in report.notes)
    version = tmp_path / "repo" / "ocr" / "1"
    # Triton's ONNX Runtime backend holds output dims to the declared ones: the copy declares them
    assert declared(version / "model.onnx") == ["N", 1, 10]
    assert declared(proven) == [1, "seqlen"]  # the gated model is left as it was
    contract = load_contract(version / "model.onnx")
    assert [o.shape for o in contract.signature.outputs] == [("N", 1, 10)]
    assert contract.signature.observed == {}
    assert contract.provenance.lineage.step == "deploy"
    assert contract.provenance.lineage.parent_sha256 == load_contract(proven).identity.model.sha256
    assert contract.lineage["declared_outputs"] == {"y": [1, "seqlen"]}
    # the deployed model is the one its contract describes, and still meets the golden outputs
    assert verify(version / "model.onnx").passed
    assert check_repository(tmp_path / "repo").passed


def _declared_repo(proven: Path, repo: Path, output_dims: str) -> Path:
    """The gated model, its contract and golden file, with a config written by hand."""
    version = repo / "ocr" / "1"
    version.mkdir(parents=True)
    shutil.copy(proven, version / "model.onnx")
    shutil.copy(proven.with_name("ocr.contract.json"), version / "model.contract.json")
    shutil.copy(proven.with_name("ocr.golden.npz"), version / "ocr.golden.npz")
    (repo / "ocr" / "config.pbtxt").write_text(
        'name: "ocr"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [-1, 10] }\n'
        f'output {{ name: "y" data_type: TYPE_FP32 dims: {output_dims} }}\n'
    )
    return repo


def test_deploy_check_fails_a_config_written_from_the_declared_dims(proven, tmp_path):
    repo = _declared_repo(proven, tmp_path / "repo", "[1, -1]")
    checked = check_repository(repo)
    assert not checked.passed
    (found,) = [f for f in checked.findings if f.severity == "error"]
    assert found.code == "DPL019" and found.where == "ocr/1 output y"
    assert found.message == (
        "model 'ocr', output 'y': the config gives [1, -1] (dims [1, -1]), the model produced "
        "[1, 1, 10] on golden sample N=1; it declares [1, seqlen], its golden outputs are "
        "[N, 1, 10]"
    )


def test_deploy_check_passes_dims_that_hold_every_golden_output(proven, tmp_path):
    # [-1, 1, 10] holds them; Triton would still refuse it against this model's declaration
    # (rank 3 against 2), which deploy check reports as it always has
    checked = check_repository(_declared_repo(proven, tmp_path / "repo", "[-1, 1, 10]"))
    assert not any(f.code == "DPL019" for f in checked.findings)
    assert {f.code for f in checked.findings if f.severity == "error"} == {"DPL014"}


def test_without_the_golden_file_the_contract_s_observed_shapes_still_judge(proven, tmp_path):
    repo = _declared_repo(proven, tmp_path / "repo", "[1, -1]")
    (repo / "ocr" / "1" / "ocr.golden.npz").unlink()
    checked = check_repository(repo)
    assert [f.code for f in checked.findings if f.severity == "error"] == ["DPL019"]


def test_a_golden_file_changed_since_is_named(proven, tmp_path):
    repo = _declared_repo(proven, tmp_path / "repo", "[1, -1]")
    (repo / "ocr" / "1" / "ocr.golden.npz").write_bytes(b"PK not the golden file")
    checked = check_repository(repo)
    assert [f.code for f in checked.findings if f.severity == "error"] == ["DPL030"]


def test_a_contract_written_before_observed_shapes_is_judged_by_its_golden_file(proven, tmp_path):
    repo = _declared_repo(proven, tmp_path / "repo", "[1, -1]")
    path = repo / "ocr" / "1" / "model.contract.json"
    data = json.loads(path.read_text())
    del data["signature"]["observed"]  # as onnxgate wrote contracts before it recorded them
    path.write_text(json.dumps(data))
    (found,) = [f for f in check_repository(repo).findings if f.severity == "error"]
    assert found.code == "DPL019"
    assert found.message.endswith("on golden sample N=1; it declares [1, seqlen]")
