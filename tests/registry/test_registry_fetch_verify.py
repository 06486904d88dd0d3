"""A fetched version verifies as it lies: ``onnxgate verify OUT/<name>.onnx`` passes."""

from __future__ import annotations

from models import mlp, save
from onnxgate.contract import init_contract, verify
from onnxgate.errors import GateError
from onnxgate.registry import open_registry

from ._registry_helpers import gate_report


def test_fetch_under_another_name_then_verify(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    model = save(mlp(), run / "exported.onnx")
    init_contract(model)
    files = {
        "model": model,
        "contract": run / "exported.contract.json",
        "golden": run / "exported.golden.npz",
    }
    with open_registry(f"sqlite:///{tmp_path}/r.db") as reg:
        reg.register("classifier", files, gate_report(files), alias="champion")
        result = reg.fetch("classifier@champion", tmp_path / "deploy")
    report = verify(result.model_path)
    assert report.passed, report
    assert report.identity.passed
    # the contract names its golden file by the exported name: without that copy, no verify
    (tmp_path / "deploy" / "exported.golden.npz").unlink()
    try:
        again = verify(result.model_path)
    except GateError:
        return
    assert not again.passed
