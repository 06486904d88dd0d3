"""``verify`` on several ONNX Runtime releases: an opset too new for 1.16.3, then one that fits."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import export_nets
from onnxgate.cli import app
from onnxgate.contract import VerifyConfig, load_contract, verify
from onnxgate.export import TorchExportConfig, export_torch, parse_dynamic

pytestmark = [pytest.mark.slow, pytest.mark.torch]
runner = CliRunner()

OLD, MIDDLE = "onnxruntime==1.16.3", "onnxruntime==1.20.1"
RUNTIMES = [OLD, MIDDLE, "installed"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The test net exported at opset 20, and for onnxruntime 1.16.3; dynamic batch both times."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("matrix")
    with pytest.MonkeyPatch.context() as mp:
        nets = export_nets.install(folder, mp)
        made = {}
        for key, options in (("opset20", {"opset": 20}), ("old", {"runtime": OLD})):
            made[key] = export_torch(
                f"{nets}:net",
                TorchExportConfig(
                    out=folder / f"{key}.onnx",
                    dynamic=parse_dynamic(["x:0=batch"]),
                    **options,
                ),
            )
    return made


def test_opset_20_does_not_load_on_1_16_and_passes_elsewhere(exported):
    result = exported["opset20"]
    assert result.opset == 20
    report = verify(result.path, VerifyConfig(runtimes=RUNTIMES))
    assert report.passed is False
    assert report.identity.passed is True
    old, middle, installed = report.results
    assert old.runtime == OLD and middle.runtime == MIDDLE
    assert installed.runtime.endswith("(installed)")

    assert old.loads.passed is False
    assert "VER003" in old.loads.reason and "opset 20" in old.loads.reason
    assert "1.16.3" in old.loads.reason
    assert old.placement.passed is None and old.parity.passed is None

    for other in (middle, installed):
        assert other.passed, other.model_dump()
        assert other.parity.reason.startswith("3 sample(s)")
        assert "on CPUExecutionProvider" in other.placement.reason


def test_cli_verify_matrix_exit_codes(exported):
    too_new = exported["opset20"].path
    args = ["verify", str(too_new), "-r", f"{OLD},{MIDDLE}", "-r", "installed", "--format", "json"]
    failed = runner.invoke(app, args)
    assert failed.exit_code == 1, failed.output
    document = json.loads(failed.stdout)
    assert document["passed"] is False
    assert [r["loads"]["passed"] for r in document["results"]] == [False, True, True]

    fits = exported["old"].path
    passed = runner.invoke(app, [args[0], str(fits), *args[2:]])
    assert passed.exit_code == 0, passed.output
    document = json.loads(passed.stdout)
    assert document["passed"] is True
    assert len(document["results"]) == 3
    assert all(r["parity"]["passed"] for r in document["results"])


def test_export_for_1_16_writes_what_1_16_loads(exported):
    result = exported["old"]
    assert result.opset == 19 and result.ir_version == 9
    assert any("exporting at opset 19" in n for n in result.notices)
    assert any("IR stamped down from 10 to 9" in n for n in result.notices)
    contract = load_contract(result.path)
    assert contract.requirements.opsets["ai.onnx"] == 19
    assert contract.requirements.ir_version == 9
    assert contract.provenance.options["runtime"] == OLD
    report = verify(result.path, VerifyConfig(runtimes=RUNTIMES))
    assert report.passed, report.model_dump()


def test_placement_on_an_older_release_runs_the_contracts_samples(tmp_path):
    """Before 1.24 placement must run the model; it runs the golden samples, not made-up shapes.

    The input's length is unnamed; the Reshape needs it even. Synthetic feeds give unnamed dims 3
    (odd), so a placement run on them fails where the model works at its proven shape.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from models import model, save, value

    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    proto = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="pairs")],
        [value("x", shape=(None,))],
        [value("y", TensorProto.FLOAT, shape=(2, None))],
        initializers=[shape],
    )
    path = save(proto, tmp_path / "pairs.onnx")
    np.savez(tmp_path / "x.npz", x=np.arange(4, dtype=np.float32))
    made = runner.invoke(app, ["contract", "init", str(path), "--inputs", str(tmp_path / "x.npz")])
    assert made.exit_code == 0, made.output
    report = verify(path, VerifyConfig(runtimes=[MIDDLE]))
    assert report.passed, report.results[0]
    assert report.results[0].placement.reason == "1 node(s) on CPUExecutionProvider (profiling)"
