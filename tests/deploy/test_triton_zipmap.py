"""A scikit-learn classifier with skl2onnx's default ZipMap output, deployed to Triton.

Triton's ONNX Runtime backend refuses a model with any output that is not a tensor, so the model
deployed is a copy without the ZipMap: the output, under its own name, is the FP32 [N, K] matrix
the ZipMap was given, which is what ``onnxgate serve`` answers for it (``serve/_maps.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2

from models import model, save, value
from onnxgate.contract import ContractConfig, init_contract, load_contract, verify
from onnxgate.deploy import TritonConfig, check_repository, deploy_triton
from onnxgate.errors import ConfigError
from onnxgate.serve._maps import map_labels, tensors_of
from onnxgate.settings import FeedSettings

pytestmark = pytest.mark.sklearn


def iris_classifier(path: Path, *, batch: str | None = None) -> Path:
    """LogisticRegression on iris, converted by skl2onnx with its defaults (ZipMap on).

    ``batch`` names the rows' axis of the input and the label (skl2onnx leaves it unnamed).
    """
    datasets = pytest.importorskip("sklearn.datasets")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression

    x, y = datasets.load_iris(return_X_y=True)
    x = x.astype(np.float32)
    estimator = LogisticRegression(max_iter=500).fit(x, y)
    proto = skl2onnx.to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    if batch is not None:
        for value_ in (proto.graph.input[0], proto.graph.output[0]):
            value_.type.tensor_type.shape.dim[0].dim_param = batch
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path)
    np.savez(path.with_name("rows.npz"), X=x[::10])
    # the reference evaluator has no ZipMap: gate init writes the same (gate/_probe.py)
    init_contract(
        path,
        ContractConfig(
            reference="ort:disable",
            second_opinion=False,
            feeds=FeedSettings(inputs=path.with_name("rows.npz")),
        ),
    )
    return path


def parse(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def test_a_zipmap_classifier_deploys_as_the_float_matrix_serve_answers(tmp_path):
    gated = iris_classifier(tmp_path / "m" / "iris.onnx")
    assert load_contract(gated).signature.outputs[1].type.startswith("seq(map(")
    report = deploy_triton(gated, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    assert any("ZipMap" in note and "FP32 [?, 3]" in note for note in report.notes)
    config = parse(tmp_path / "repo" / "iris" / "config.pbtxt")
    assert config.max_batch_size == 0  # skl2onnx names no axis: no batch axis to batch along
    outputs = {o.name: o for o in config.output}
    probabilities = outputs["output_probability"]
    assert probabilities.data_type == model_config_pb2.TYPE_FP32
    assert list(probabilities.dims) == [-1, 3]
    labels = tmp_path / "repo" / "iris" / probabilities.label_filename
    assert labels.read_text() == "0\n1\n2\n"
    deployed = tmp_path / "repo" / "iris" / "1" / "model.onnx"
    proto = onnx.load(deployed)
    assert not any(node.op_type == "ZipMap" for node in proto.graph.node)
    # the same rows: the deployed model's matrix is, bit for bit, what serve answers for the maps
    rows = np.load(gated.with_name("rows.npz"))["X"]
    original = ort.InferenceSession(str(gated), providers=["CPUExecutionProvider"])
    names = [o.name for o in original.get_outputs()]
    maps = dict(zip(names, original.run(None, {"X": rows}), strict=True))
    served = tensors_of(
        maps, map_labels(onnx.load(gated).graph, load_contract(gated).signature.outputs)
    )
    copy = ort.InferenceSession(str(deployed), providers=["CPUExecutionProvider"])
    label, matrix = copy.run(["output_label", "output_probability"], {"X": rows})
    assert matrix.dtype == np.float32 and matrix.shape == (len(rows), 3)
    np.testing.assert_array_equal(matrix, served["output_probability"])
    np.testing.assert_array_equal(label, maps["output_label"])
    # the copy's contract: its own bytes, the new output type, the gated model as its parent
    contract = load_contract(deployed)
    assert contract.signature.outputs[1].type == "tensor(float)"
    assert contract.provenance.lineage.step == "deploy"
    assert contract.provenance.lineage.parent_sha256 == load_contract(gated).identity.model.sha256
    assert contract.lineage["unzipped_outputs"] == {"output_probability": [0, 1, 2]}
    assert verify(deployed).passed
    assert onnx.load(gated).graph.node[-1].op_type == "ZipMap"  # the gated model is untouched


def test_a_named_batch_axis_is_batched_and_the_matrix_follows_it(tmp_path):
    gated = iris_classifier(tmp_path / "m" / "iris.onnx", batch="N")
    report = deploy_triton(gated, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    config = parse(tmp_path / "repo" / "iris" / "config.pbtxt")
    assert config.max_batch_size == load_contract(gated).signature.dims["N"].max
    probabilities = next(o for o in config.output if o.name == "output_probability")
    assert list(probabilities.dims) == [3]  # the batch is Triton's, then the classes
    declared = onnx.load(tmp_path / "repo" / "iris" / "1" / "model.onnx").graph.output[1]
    assert [d.dim_param or d.dim_value for d in declared.type.tensor_type.shape.dim] == ["N", 3]


def _by_hand(gated: Path, repo: Path, probabilities: str) -> Path:
    """The gated model (ZipMap and all) with a config written by hand."""
    version = repo / "iris" / "1"
    version.mkdir(parents=True)
    shutil.copy(gated, version / "model.onnx")
    (repo / "iris" / "config.pbtxt").write_text(
        'name: "iris"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP32 dims: [-1, 4] }\n'
        'output { name: "output_label" data_type: TYPE_INT64 dims: [-1] }\n'
        f"output {{ {probabilities} }}\n"
    )
    return repo


def test_deploy_check_fails_a_model_that_keeps_its_zipmap(tmp_path):
    gated = iris_classifier(tmp_path / "m" / "iris.onnx")
    repo = _by_hand(
        gated, tmp_path / "repo", 'name: "output_probability" data_type: TYPE_FP32 dims: [-1, 3]'
    )
    checked = check_repository(repo)
    assert not checked.passed
    (finding,) = [f for f in checked.findings if f.code == "DPL025"]
    assert finding.severity == "error" and "output_probability" in finding.message
    assert "seq(map(int64,tensor(float)))" in finding.message and "zipmap" in finding.hint
    # leaving the output out of the config does not help: the backend reads every output
    (repo / "iris" / "config.pbtxt").write_text(
        (repo / "iris" / "config.pbtxt")
        .read_text()
        .replace('output { name: "output_probability" data_type: TYPE_FP32 dims: [-1, 3] }\n', "")
    )
    assert "DPL025" in {f.code for f in check_repository(repo).findings}


def test_deploy_check_holds_a_label_file_to_the_classes(tmp_path):
    gated = iris_classifier(tmp_path / "m" / "iris.onnx")
    repo = tmp_path / "repo"
    assert deploy_triton(gated, TritonConfig(out=repo, allow_ungated=True)).passed
    labels = repo / "iris" / "v1.output_probability.labels.txt"
    labels.write_text("setosa\nversicolor\n")
    found = [f for f in check_repository(repo).findings if f.code == "DPL026"]
    assert found and "holds 2 label(s), the output has 3 classes" in found[0].message
    labels.unlink()
    found = [f for f in check_repository(repo).findings if f.code == "DPL026"]
    assert found and "fails to load the model" in found[0].message


def test_a_sequence_output_no_zipmap_writes_is_refused_with_what_to_do(tmp_path):
    proto = model(
        [
            helper.make_node("Identity", ["x"], ["y"], name="copy"),
            helper.make_node("SequenceConstruct", ["x"], ["parts"], name="seq"),
        ],
        [value("x")],
        [
            value("y"),
            helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None),
        ],
    )
    (tmp_path / "m").mkdir()
    path = save(proto, tmp_path / "m" / "parts.onnx")
    init_contract(path, ContractConfig())
    with pytest.raises(ConfigError) as caught:
        deploy_triton(path, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert "output 'parts' is a seq(tensor(float))" in caught.value.message
    assert "onnxgate serve" in caught.value.hint
    assert not (tmp_path / "repo" / "parts").exists()  # refused before anything is written


def test_labels_are_counted_as_triton_reads_them(tmp_path):
    """Lines end at a newline only (std::getline): a form feed inside a label is no break."""
    gated = iris_classifier(tmp_path / "m" / "iris.onnx")
    repo = tmp_path / "repo"
    assert deploy_triton(gated, TritonConfig(out=repo, allow_ungated=True)).passed
    labels = repo / "iris" / "v1.output_probability.labels.txt"
    labels.write_bytes(b"set\x0cosa\r\nversicolor\nvirginica")  # 3 lines, none final
    assert not [f for f in check_repository(repo).findings if f.code == "DPL026"]
    labels.write_bytes(b"")
    found = [f for f in check_repository(repo).findings if f.code == "DPL026"]
    assert found and "holds 0 label(s)" in found[0].message
