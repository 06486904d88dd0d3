"""deploy triton and deploy check with a custom operator library the contract requires.

The real onnxruntime-extensions library: its file is copied into the version folder, named in
``model_operations``, and held to the contract's sha256 by ``deploy check``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from typer.testing import CliRunner

from models import negpos, save
from onnxgate._opslib import EXTENSIONS, resolve_ops_library
from onnxgate.cli import app
from onnxgate.contract import SIDECAR, golden_samples, write_contract
from onnxgate.contract_store import OpsLibraryRequirement, SecondOpinion, sha256_file
from onnxgate.deploy import TritonConfig, check_repository, deploy_triton
from onnxgate.errors import ConfigError
from onnxgate.model import load_model
from onnxgate.runners import OrtRunner
from onnxgate.settings import SessionSettings

runner = CliRunner()
LIBRARY = resolve_ops_library(EXTENSIONS)


def _contract(path: Path, requirement: OpsLibraryRequirement) -> Path:
    loaded = load_model(path)
    source = OrtRunner(loaded, SessionSettings(ops_libraries=(EXTENSIONS,)))
    none = SecondOpinion(detail="none taken")
    contract = write_contract(
        loaded, source, golden_samples(loaded), second_opinion=none, force=True
    )
    needs = contract.requirements.model_copy(update={"ops_libraries": [requirement]})
    SIDECAR.write(path, contract.model_copy(update={"requirements": needs}))
    return path


@pytest.fixture(scope="module")
def gated(tmp_path_factory) -> Path:
    """The NegPos model with a contract that requires onnxruntime-extensions."""
    path = save(negpos(), tmp_path_factory.mktemp("negpos") / "negpos.onnx")
    return _contract(path, OpsLibraryRequirement(**LIBRARY.requirement()))


def parse(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def codes(report) -> dict[str, str]:
    """Each error code with its messages."""
    found: dict[str, str] = {}
    for f in report.findings:
        if f.severity == "error":
            found[f.code] = f"{found.get(f.code, '')}{f.message}\n"
    return found


def test_the_library_is_copied_beside_the_model_and_named_in_model_operations(gated, tmp_path):
    report = deploy_triton(gated, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    copied = tmp_path / "repo" / "negpos" / "1" / LIBRARY.path.name
    assert sha256_file(copied) == LIBRARY.sha256
    config = parse(tmp_path / "repo" / "negpos" / "config.pbtxt")
    assert list(config.model_operations.op_library_filename) == [str(copied.absolute())]
    assert f"negpos/1/{LIBRARY.path.name}" in report.files


def test_the_library_is_named_where_the_server_mounts_the_repository(gated, tmp_path):
    config = TritonConfig(out=tmp_path / "repo", allow_ungated=True, repository_path="/models")
    report = deploy_triton(gated, config)
    assert report.passed, report.findings
    named = parse(tmp_path / "repo" / "negpos" / "config.pbtxt").model_operations
    assert list(named.op_library_filename) == [f"/models/negpos/1/{LIBRARY.path.name}"]


@pytest.fixture
def repo(gated, tmp_path) -> Path:
    deploy_triton(gated, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    return tmp_path / "repo"


def test_deploy_check_finds_the_library_removed(repo):
    (repo / "negpos" / "1" / LIBRARY.path.name).unlink()
    found = codes(check_repository(repo))
    assert "is missing" in found["DPL027"]
    assert "DPL028" not in found  # the library is named, its file is what is wrong


def test_deploy_check_finds_the_library_changed(repo):
    (repo / "negpos" / "1" / LIBRARY.path.name).write_bytes(b"another build")
    found = codes(check_repository(repo))
    assert LIBRARY.sha256 in found["DPL027"]
    assert "DPL028" not in found


def test_deploy_check_finds_a_required_library_the_config_does_not_name(repo):
    config_file = repo / "negpos" / "config.pbtxt"
    config = parse(config_file)
    config.ClearField("model_operations")
    config_file.write_text(text_format.MessageToString(config))
    found = codes(check_repository(repo))
    assert "onnxruntime-extensions" in found["DPL028"]


def test_a_library_file_other_than_the_gated_one_is_refused(tmp_path):
    path = save(negpos(), tmp_path / "negpos.onnx")
    other = LIBRARY.requirement() | {"sha256": "0" * 64}
    _contract(path, OpsLibraryRequirement(**other))
    with pytest.raises(ConfigError, match="another build or release"):
        deploy_triton(path, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert not (tmp_path / "repo" / "negpos" / "1").exists()


def test_a_bare_library_file_the_contract_requires_must_be_named(tmp_path):
    path = save(negpos(), tmp_path / "negpos.onnx")
    bare = tmp_path / "libmy_ops.so"
    bare.write_bytes(LIBRARY.path.read_bytes())
    _contract(path, OpsLibraryRequirement(**resolve_ops_library(bare).requirement()))
    with pytest.raises(ConfigError, match="libmy_ops.so"):
        deploy_triton(path, TritonConfig(out=tmp_path / "a", allow_ungated=True))
    result = runner.invoke(
        app,
        ["deploy", "triton", str(path), "-o", str(tmp_path / "b"), "--allow-ungated"]
        + ["--ops-library", str(bare), "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "negpos" / "1" / "libmy_ops.so").is_file()


def test_kserve_says_where_the_repository_must_name_the_library(gated):
    from onnxgate.deploy._kserve import KServeConfig, deploy_kserve

    config = KServeConfig(storage_uri="s3://bucket/models", allow_ungated=True)
    notes = " ".join(deploy_kserve(gated, config).notes)
    assert "custom operator libraries onnxruntime-extensions" in notes
    assert "repository_path='/mnt/models'" in notes  # in a Python caller's words


def test_a_python_extension_module_is_flagged_for_the_server(repo, tmp_path):
    # onnxruntime-extensions' pip library is a Python extension module: a tritonserver process
    # has no Python C API to resolve its Py* symbols, so Triton fails to load it
    found = [f for f in check_repository(repo).findings if f.code == "DPL027"]
    assert [f.severity for f in found] == ["warning"], found
    assert LIBRARY.path.name in found[0].message
    assert "Python extension module" in found[0].message
    assert "libortextensions" in (found[0].hint or "")
    # a renamed copy is still one
    renamed = repo / "negpos" / "1" / "libortextensions.so"
    (repo / "negpos" / "1" / LIBRARY.path.name).rename(renamed)
    config_file = repo / "negpos" / "config.pbtxt"
    config_file.write_text(config_file.read_text().replace(LIBRARY.path.name, renamed.name))
    assert any(
        f.code == "DPL027" and "libortextensions.so" in f.message and f.severity == "warning"
        for f in check_repository(repo).findings
    )
