"""The deployment contract: written atomically beside the model, strict, and checked by ``verify``."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from models import mlp, relu, save, value
from onnxgate.cli import app
from onnxgate.contract import (
    ContractConfig,
    FileDigest,
    VerifyConfig,
    contract_paths,
    golden_samples,
    init_contract,
    load_contract,
    read_golden,
    verify,
    write_contract,
)
from onnxgate.errors import ConfigError, ModelLoadError, ResourceExhausted, RunFailed
from onnxgate.model import load_model
from onnxgate.runners import Inference, ReferenceRunner
from onnxgate.settings import FeedSettings

runner = CliRunner()


def mlp_weights() -> tuple[np.ndarray, np.ndarray]:
    proto = mlp()
    arrays = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    return arrays["W"], arrays["b"]


@pytest.fixture
def model(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    return save(mlp(), folder / "mlp.onnx")


@pytest.fixture
def contracted(model):
    init_contract(model)
    return model


@pytest.fixture
def external(tmp_path):
    """The mlp with both initializers in one side file, ``mlp.data``."""
    folder = tmp_path / "ext"
    folder.mkdir()
    path = folder / "mlp.onnx"
    onnx.save_model(
        mlp(),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mlp.data",
        size_threshold=0,
    )
    assert (folder / "mlp.data").stat().st_size == 4 * 3 * 4 + 3 * 4
    return path


def cli_json(*args: str):
    result = runner.invoke(app, [*args, "--format", "json"])
    return result, json.loads(result.stdout)


def test_init_writes_the_contract_and_golden_file_beside_the_model(model):
    contract = init_contract(model)
    contract_path, golden_path = contract_paths(model)
    assert (contract_path.name, golden_path.name) == ("mlp.contract.json", "mlp.golden.npz")
    # both files, and no temporary file left next to them
    assert sorted(p.name for p in model.parent.iterdir()) == [
        "mlp.contract.json",
        "mlp.golden.npz",
        "mlp.onnx",
    ]
    assert load_contract(model) == contract
    raw = json.loads(contract_path.read_text())
    assert raw["format"] == 1 and raw["model"] == "mlp.onnx"

    data = model.read_bytes()
    assert contract.identity.model == FileDigest(
        path="mlp.onnx", size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    assert contract.identity.external_data == []
    assert contract.requirements.ir_version == 10
    assert contract.requirements.opsets == {"ai.onnx": 17}
    assert [s.name for s in contract.signature.inputs] == ["x"]
    assert [s.name for s in contract.signature.outputs] == ["y"]
    assert contract.signature.dims["batch"].min == 1
    assert contract.signature.dims["batch"].max == 32  # a batch's starter range: 1 to 32

    golden = contract.golden
    assert golden is not None and golden.file == "mlp.golden.npz"
    assert golden.sha256 == hashlib.sha256(golden_path.read_bytes()).hexdigest()
    assert golden.produced_by == "reference"
    assert [s.dims for s in golden.samples] == [{"batch": 1}, {"batch": 32}, {"batch": 7}]
    assert [s.label for s in golden.samples] == ["batch=1", "batch=32", "batch=7"]
    assert all(s.inputs == ["x"] and s.outputs == ["y"] for s in golden.samples)
    (rule,) = golden.rules
    assert rule.output == "y" and rule.metric is None
    assert 0 < rule.atol < 1e-3 and 0 < rule.rtol < 1e-2
    assert golden.skipped_outputs == []


def test_golden_outputs_are_the_models_outputs_on_the_stored_inputs(contracted):
    w, b = mlp_weights()
    expected = read_golden(load_contract(contracted), contracted)
    assert [sample.feeds["x"].shape for sample, _ in expected] == [(1, 4), (32, 4), (7, 4)]
    for sample, outputs in expected:
        x = sample.feeds["x"]
        assert x.dtype == np.float32 and np.ptp(x) > 0  # real values, not zeros
        np.testing.assert_allclose(outputs["y"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_golden_samples_of_a_fixed_shape_model_are_one_sample(tmp_path):
    fixed = load_model(save(_fixed_relu(), tmp_path / "f.onnx"))
    samples = golden_samples(fixed)
    assert len(samples) == 1 and samples[0].feeds["x"].shape == (2, 4)
    symbolic = golden_samples(load_model(save(relu(), tmp_path / "r.onnx")))
    assert [s.feeds["x"].shape for s in symbolic] == [(1, 4), (32, 4), (7, 4)]


def _fixed_relu() -> onnx.ModelProto:
    proto = relu()
    proto.graph.input[0].CopyFrom(value("x", shape=(2, 4)))
    proto.graph.output[0].CopyFrom(value("y", shape=(2, 4)))
    return proto


def test_an_unknown_field_in_the_contract_is_rejected(contracted):
    contract_path, _ = contract_paths(contracted)
    raw = json.loads(contract_path.read_text())
    raw["identity"]["model"]["colour"] = "blue"
    contract_path.write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError, match="colour"):
        load_contract(contracted)


def test_a_contract_of_another_format_is_rejected(contracted):
    contract_path, _ = contract_paths(contracted)
    raw = json.loads(contract_path.read_text())
    raw["format"] = 2
    contract_path.write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError, match="format 2"):
        load_contract(contracted)


def test_an_existing_contract_is_replaced_only_with_force(contracted):
    contract_path, golden_path = contract_paths(contracted)
    before = contract_path.read_bytes(), golden_path.read_bytes()
    with pytest.raises(ConfigError) as caught:
        init_contract(contracted, ContractConfig(feeds=FeedSettings(seed=1)))
    assert str(contract_path) in caught.value.message
    assert "force" in (caught.value.hint or "") and caught.value.field == "force"
    assert (contract_path.read_bytes(), golden_path.read_bytes()) == before

    replaced = init_contract(contracted, ContractConfig(force=True, feeds=FeedSettings(seed=1)))
    assert golden_path.read_bytes() != before[1]
    assert replaced.golden.sha256 == hashlib.sha256(golden_path.read_bytes()).hexdigest()
    assert verify(contracted).passed


def test_a_contract_that_cannot_be_renamed_into_place_is_not_left_half_written(model, monkeypatch):
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(".contract.json"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    # the user's condition (exit 3, naming the file), not a bug of onnxgate
    with pytest.raises(ResourceExhausted, match="no space left on the device holding"):
        init_contract(model)
    names = sorted(p.name for p in model.parent.iterdir())
    # the golden file is written first and whole; the contract is not there at all
    assert names == ["mlp.golden.npz", "mlp.onnx"]


class _FailsOnSecond:
    """A reference runner that fails on its second sample."""

    name = "flaky"

    def __init__(self, loaded):
        self._inner = ReferenceRunner(loaded)
        self.calls = 0

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def input_specs(self):
        return self._inner.input_specs()

    def infer(self, feeds) -> Inference:
        self.calls += 1
        if self.calls == 2:
            raise RunFailed("flaky failed on purpose")
        return self._inner.infer(feeds)

    def info(self):
        return self._inner.info()


def test_a_reference_failing_midway_leaves_the_old_contract_intact(contracted):
    contract_path, golden_path = contract_paths(contracted)
    before = contract_path.read_bytes(), golden_path.read_bytes()
    loaded = load_model(contracted)
    with pytest.raises(RunFailed):
        write_contract(loaded, _FailsOnSecond(loaded), golden_samples(loaded), force=True)
    assert (contract_path.read_bytes(), golden_path.read_bytes()) == before
    assert verify(contracted).passed


def test_verify_passes_on_the_model_it_was_written_for(contracted):
    report = verify(contracted)
    assert report.passed
    assert report.identity.passed is True
    assert report.providers == ["CPUExecutionProvider"]
    (result,) = report.results
    assert result.runtime.endswith("(installed)")
    assert result.loads.passed and result.placement.passed and result.parity.passed
    assert "3 sample(s)" in result.parity.reason


def test_verify_fails_when_the_model_bytes_change(contracted):
    proto = onnx.load(contracted)
    proto.producer_name = "someone-else"  # same computation, other bytes
    onnx.save_model(proto, contracted)
    report = verify(contracted)
    assert report.passed is False
    assert report.identity.passed is False
    assert "mlp.onnx differs" in report.identity.reason
    # nothing runs on bytes the contract does not describe
    assert report.results[0].loads.passed is None
    assert "not run" in report.results[0].loads.reason

    result, document = cli_json("verify", str(contracted))
    assert result.exit_code == 1, result.output
    assert document["passed"] is False
    assert document["identity"]["passed"] is False


def test_changed_weights_fail_identity_before_anything_runs(contracted):
    proto = onnx.load(contracted)
    w = numpy_helper.to_array(proto.graph.initializer[0]).copy()
    w[:, 0] += 1.0
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    onnx.save_model(proto, contracted)
    report = verify(contracted)
    assert not report.passed and not report.identity.passed
    (result,) = report.results
    assert result.loads.passed is None and result.parity.passed is None


def test_a_changed_golden_file_fails_identity(contracted):
    _, golden_path = contract_paths(contracted)
    with np.load(golden_path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays["s0/out/y"] = arrays["s0/out/y"] + 1.0
    with golden_path.open("wb") as handle:
        np.savez(handle, **arrays)
    report = verify(contracted)
    assert not report.passed
    assert "golden file mlp.golden.npz changed" in report.identity.reason

    result, document = cli_json("verify", str(contracted))
    assert result.exit_code == 1, result.output
    assert document["identity"]["passed"] is False


def test_a_missing_golden_file_fails_identity(contracted):
    contract_paths(contracted)[1].unlink()
    report = verify(contracted)
    assert not report.passed and "missing" in report.identity.reason


def test_verify_without_a_contract_is_exit_2_with_a_hint(model):
    result, document = cli_json("verify", str(model))
    assert result.exit_code == 2, result.output
    assert document["error"] == "model-load"
    assert "no contract beside mlp.onnx" in document["message"]
    assert "onnxgate contract init" in document["hint"]

    text = runner.invoke(app, ["verify", str(model)])
    assert text.exit_code == 2
    assert "Traceback" not in text.output
    assert "contract init" in text.stderr


def test_cli_contract_init_then_verify(model):
    result, document = cli_json("contract", "init", str(model))
    assert result.exit_code == 0, result.output
    assert document["model"] == "mlp.onnx"
    assert [s["dims"] for s in document["golden"]["samples"]] == [
        {"batch": 1},
        {"batch": 32},
        {"batch": 7},
    ]
    assert contract_paths(model)[0].is_file()

    again = runner.invoke(app, ["contract", "init", str(model)])
    assert again.exit_code == 2 and "--force" in again.stderr

    result, document = cli_json("verify", str(model))
    assert result.exit_code == 0, result.output
    assert document["passed"] is True
    assert [r["parity"]["passed"] for r in document["results"]] == [True]


def test_cli_contract_init_records_tolerances(model):
    result = runner.invoke(app, ["contract", "init", str(model), "--tol", "y:0.005,0"])
    assert result.exit_code == 0, result.output
    (rule,) = load_contract(model).golden.rules
    assert (rule.output, rule.atol, rule.rtol) == ("y", 0.005, 0.0)


def test_external_data_is_part_of_the_identity(external):
    contract = init_contract(external)
    side = external.with_name("mlp.data")
    assert contract.identity.external_data == [
        FileDigest(
            path="mlp.data",
            size=side.stat().st_size,
            sha256=hashlib.sha256(side.read_bytes()).hexdigest(),
        )
    ]
    assert verify(external).passed

    data = bytearray(side.read_bytes())
    data[:4] = np.float32(123.0).tobytes()  # W[0, 0], same size
    side.write_bytes(bytes(data))
    report = verify(external)
    assert report.passed is False
    assert report.identity.passed is False
    assert "external data mlp.data is changed" in report.identity.reason
    assert "mlp.onnx differs" not in report.identity.reason


def test_a_golden_file_outside_the_models_folder_is_refused(contracted):
    contract_path, _ = contract_paths(contracted)
    document = json.loads(contract_path.read_text())
    document["golden"]["file"] = "../../etc/passwd"
    contract_path.write_text(json.dumps(document))
    with pytest.raises(ModelLoadError, match="not a valid contract"):
        verify(contracted)


def test_external_data_contracts_work_from_a_relative_path(external, monkeypatch):
    monkeypatch.chdir(external.parent.parent)
    relative = os.path.join(external.parent.name, external.name)
    contract = init_contract(relative)
    assert [f.path for f in contract.identity.external_data] == ["mlp.data"]
    assert verify(relative).passed


def test_a_runtime_that_cannot_be_had_is_one_failed_row(contracted):
    report = verify(contracted, VerifyConfig(runtimes=["installed", "onnxruntime==0.0.1"]))
    installed, missing = report.results
    assert installed.passed and not report.passed
    assert missing.loads.passed is False and missing.parity.passed is None


def test_string_outputs_are_golden_as_unicode_arrays_read_without_pickle(tmp_path):
    from models import text_labels

    path = save(text_labels(), tmp_path / "text.onnx")
    feeds = tmp_path / "text.npz"
    np.savez(feeds, text=np.array(["rain", "goal", "a long sentence"]))
    contract = init_contract(path, ContractConfig(feeds=FeedSettings(inputs=feeds)))
    assert contract.golden.samples[0].outputs == ["label", "score"]
    (rule,) = [r for r in contract.golden.rules if r.output == "label"]
    assert (rule.atol, rule.rtol) == (0.0, 0.0)  # labels agree exactly
    with np.load(tmp_path / "text.golden.npz", allow_pickle=False) as golden:
        assert golden["s0/in/text"].dtype.kind == "U"
        assert golden["s0/out/label"].tolist() == ["weather", "sport", "other"]
    report = verify(path)
    assert report.passed, report
