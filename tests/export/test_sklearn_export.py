"""``export sklearn``: a pipeline on sklearn's digits, proved on every row, or refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxgate.cli import app
from onnxgate.contract import VerifyConfig, contract_paths, load_contract, read_golden, verify
from onnxgate.errors import ConfigError, FeedError
from onnxgate.export import SklearnExportConfig, export_sklearn, read_matrix

pytestmark = pytest.mark.sklearn
runner = CliRunner()

ROWS = 1797  # sklearn's digits: 1,797 images of 8 x 8 pixels, 10 classes


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    assert x.shape == (ROWS, 64)
    return x, y


@pytest.fixture(scope="module")
def pipeline(digits):
    pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(*digits)


@pytest.fixture
def data(tmp_path, digits):
    path = tmp_path / "X.npy"
    np.save(path, digits[0])
    return path


@pytest.fixture
def pickled(tmp_path, pipeline):
    joblib = pytest.importorskip("joblib")
    path = tmp_path / "pipe.joblib"
    joblib.dump(pipeline, path)
    return path


def onnx_predict(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return dict(
        zip(
            [o.name for o in session.get_outputs()],
            session.run(None, {name: x.astype(np.float32)}),
            strict=True,
        )
    )


def check_digits_export(result, path, pipeline, x):
    assert result.path == path and path.is_file()
    assert result.dtype == "float32"
    assert any("ZipMap is off" in n for n in result.notices)
    by_name = {o.name: o for o in result.parity.outputs}
    assert set(by_name) == {"label", "probabilities"}
    label, probabilities = by_name["label"], by_name["probabilities"]
    assert label.passed and label.mismatches == 0 and label.elements == ROWS
    assert probabilities.passed and probabilities.elements == ROWS * 10
    assert probabilities.max_abs < probabilities.atol + probabilities.rtol

    # independently of the parity report: ONNX Runtime on the written file, every row
    outputs = onnx_predict(path, x)
    assert np.array_equal(outputs["label"], pipeline.predict(x.astype(np.float32)))
    np.testing.assert_allclose(
        outputs["probabilities"], pipeline.predict_proba(x.astype(np.float32)), atol=1e-4
    )

    contract = load_contract(path)
    assert contract == result.contract
    assert contract.provenance.framework.startswith("scikit-learn ")
    assert contract.provenance.exporter.startswith("skl2onnx ")
    assert contract.provenance.options["zipmap"] is False
    lineage = contract.provenance.lineage
    assert lineage.step == "export" and lineage.parent_sha256 is None
    assert len(lineage.config_hash) == 64
    # the batch sizes of the data it was given: 1 row, 7 rows, every row
    assert [s.dims for s in contract.golden.samples] == [
        {"batch": 1},
        {"batch": 7},
        {"batch": ROWS},
    ]
    assert (contract.signature.dims["batch"].min, contract.signature.dims["batch"].max) == (1, ROWS)
    sample = contract.golden.samples[-1]
    feeds = read_golden(contract, path)[-1][0].feeds
    np.testing.assert_array_equal(feeds[sample.inputs[0]], x.astype(np.float32))
    rules = {r.output: (r.atol, r.rtol) for r in contract.golden.rules}
    assert rules["label"] == (0.0, 0.0)
    assert verify(path).passed


def test_pipeline_from_a_joblib_file(pickled, data, tmp_path, pipeline, digits):
    path = tmp_path / "out" / "digits.onnx"
    result = export_sklearn(pickled, SklearnExportConfig(out=path, data=data), trust_pickle=True)
    check_digits_export(result, path, pipeline, digits[0])


def test_pipeline_from_the_object(data, tmp_path, pipeline, digits):
    path = tmp_path / "digits.onnx"
    result = export_sklearn(pipeline, SklearnExportConfig(out=path, data=data))
    check_digits_export(result, path, pipeline, digits[0])


def test_a_pickle_is_not_loaded_without_trust(pickled, data, tmp_path):
    path = tmp_path / "out" / "digits.onnx"
    with pytest.raises(ConfigError) as caught:
        export_sklearn(pickled, SklearnExportConfig(out=path, data=data))
    assert "trust_pickle" in caught.value.hint and caught.value.field == "trust_pickle"
    assert not path.exists()


def test_a_forest_after_a_scaler_fails_parity(digits, data, tmp_path):
    pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    forest = make_pipeline(
        StandardScaler(), RandomForestClassifier(n_estimators=50, random_state=0)
    ).fit(*digits)
    out = tmp_path / "out"
    report = export_sklearn(forest, SklearnExportConfig(out=out / "forest.onnx", data=data))
    assert not report.passed and report.contract is None
    assert [o.name for o in report.parity.outputs if not o.passed] == ["probabilities"]
    assert "probabilities" in report.reason
    assert "not written" in report.reason
    assert "float32 thresholds" in report.hint
    assert list(out.iterdir()) == []  # neither the model, its contract, nor a temporary file

    joblib = pytest.importorskip("joblib")
    joblib.dump(forest, tmp_path / "forest.joblib")
    args = ["export", "sklearn", str(tmp_path / "forest.joblib"), "--trust-pickle"]
    result = runner.invoke(app, [*args, "--out", str(out / "forest.onnx"), "--data", str(data)])
    assert result.exit_code == 1  # the same diagnosis as the report's, as an error on stderr
    assert "error: the exported model disagrees" in " ".join(result.stderr.split())
    assert "float32 thresholds" in " ".join(result.stderr.split())
    assert list(out.iterdir()) == []


def test_cli_export_sklearn(pickled, data, tmp_path):
    path = tmp_path / "cli.onnx"
    args = ["export", "sklearn", str(pickled), "--out", str(path), "--data", str(data)]
    refused = runner.invoke(app, [*args, "--format", "json"])
    assert refused.exit_code == 2, refused.output
    assert json.loads(refused.stdout)["error"] == "config"
    assert not path.exists()

    result = runner.invoke(app, [*args, "--trust-pickle", "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True and document["path"] == str(path)
    assert document["dtype"] == "float32" and isinstance(document["opset"], int)
    assert document["parity"]["passed"] is True
    assert document["contract"] == str(contract_paths(path)[0])


@pytest.mark.slow
def test_export_for_an_old_release_loads_and_verifies_there(data, tmp_path, pipeline):
    old = "onnxruntime==1.16.3"
    path = tmp_path / "old.onnx"
    result = export_sklearn(pipeline, SklearnExportConfig(out=path, data=data, runtime=old))
    assert result.opset <= 19
    assert any(old in n for n in result.notices)
    contract = load_contract(path)
    assert contract.requirements.ir_version <= 9
    assert contract.requirements.opsets["ai.onnx"] <= 19
    report = verify(path, VerifyConfig(runtimes=[old, "installed"]))
    assert report.passed, report.model_dump()
    assert report.results[0].runtime == old


def test_read_matrix_accepts_npy_and_npz(tmp_path):
    matrix = np.arange(6, dtype=np.float64).reshape(3, 2)
    np.save(tmp_path / "m.npy", matrix)
    np.savez(tmp_path / "one.npz", anything=matrix)
    np.savez(tmp_path / "named.npz", X=matrix, y=np.arange(3))
    for name in ("m.npy", "one.npz", "named.npz"):
        np.testing.assert_array_equal(read_matrix(tmp_path / name), matrix)


def test_read_matrix_errors(tmp_path):
    np.save(tmp_path / "cube.npy", np.zeros((2, 3, 4)))
    with pytest.raises(FeedError, match=r"2-D numeric matrix; got float64 \[2, 3, 4\]"):
        read_matrix(tmp_path / "cube.npy")
    np.save(tmp_path / "empty.npy", np.zeros((0, 4)))
    with pytest.raises(FeedError, match="no rows"):
        read_matrix(tmp_path / "empty.npy")
    with pytest.raises(FeedError, match="cannot be read"):
        read_matrix(tmp_path / "missing.npy")
    np.save(tmp_path / "text.npy", np.array([["a", "b"]]))
    with pytest.raises(FeedError, match="2-D numeric"):
        read_matrix(tmp_path / "text.npy")
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 2)), b=np.zeros((2, 2)))
    with pytest.raises(FeedError, match="name the feature matrix X"):
        read_matrix(tmp_path / "two.npz")


def test_data_with_another_column_count_is_an_input_error(pipeline, tmp_path, digits):
    narrow = tmp_path / "narrow.npy"
    np.save(narrow, digits[0][:, :10])
    with pytest.raises(FeedError, match="10 column"):
        export_sklearn(pipeline, SklearnExportConfig(out=tmp_path / "m.onnx", data=narrow))
    assert not (tmp_path / "m.onnx").exists()


def test_a_regressor_exports_without_zipmap_options(digits, data, tmp_path):
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ridge = make_pipeline(StandardScaler(), Ridge()).fit(*digits)
    result = export_sklearn(ridge, SklearnExportConfig(out=tmp_path / "ridge.onnx", data=data))
    assert result.parity.passed
    assert verify(tmp_path / "ridge.onnx").passed


def test_an_export_with_a_library_records_it_in_the_contract(pickled, data, tmp_path):
    path = tmp_path / "lib.onnx"
    args = ["export", "sklearn", str(pickled), "--out", str(path), "--data", str(data)]
    ops = ["--ops-library", "onnxruntime-extensions"]
    result = runner.invoke(app, [*args, "--trust-pickle", *ops, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["parity"]["ran"]["candidate"]["settings"]["ops_libraries"] == [
        "onnxruntime-extensions"
    ]
    recorded = load_contract(path).requirements.ops_libraries
    assert [lib.name for lib in recorded] == ["onnxruntime-extensions"]
