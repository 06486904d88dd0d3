"""A ZipMap classifier (scikit-learn's default export) served: the Open Inference Protocol has no
map type, so its probabilities are answered as FP32 [N, K] with the class labels in the model's
metadata. The model is ONNX Runtime's own logreg_iris.onnx (seq(map(int64, float)))."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.settings import FeedSettings

IRIS = Path(ort.__file__).parent / "datasets" / "logreg_iris.onnx"


@pytest.fixture
def iris(tmp_path: Path) -> Path:
    path = tmp_path / "m" / "iris.onnx"
    path.parent.mkdir()
    shutil.copy2(IRIS, path)
    # the reference evaluator has no ZipMap: gate init writes the same (gate/_probe.py)
    init_contract(path, ContractConfig(reference="ort:disable", second_opinion=False))
    return path


def test_a_zipmap_output_is_served_as_a_float_matrix_with_its_labels(start_server, iris):
    features = np.array([[5.1, 3.5], [6.2, 2.9], [7.7, 3.0]], np.float32)
    session = ort.InferenceSession(str(iris), providers=["CPUExecutionProvider"])
    label, maps = session.run(None, {"float_input": features})
    server = start_server(str(iris), "--allow-ungated")
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_model_ready("iris"), server.text()
    meta = client.get_model_metadata("iris")
    labels = meta["onnxgate"]["labels"]["probabilities"]
    assert labels == [0, 1, 2]
    (probs,) = [o for o in meta["outputs"] if o["name"] == "probabilities"]
    assert probs["datatype"] == "FP32" and probs["shape"] == [-1, 3]
    expected = np.array([[m[k] for k in labels] for m in maps], np.float32)
    given = httpclient.InferInput("float_input", list(features.shape), "FP32")
    given.set_data_from_numpy(features)
    for binary in (False, True):
        asked = [
            httpclient.InferRequestedOutput(n, binary_data=binary)
            for n in ("label", "probabilities")
        ]
        result = client.infer("iris", [given], outputs=asked)
        np.testing.assert_array_equal(result.as_numpy("probabilities"), expected)
        np.testing.assert_array_equal(result.as_numpy("label"), label)
        # the column of the largest probability is the label the model gives
        assert [labels[i] for i in result.as_numpy("probabilities").argmax(1)] == list(label)
    g = grpcclient.InferenceServerClient(server.grpc)
    given = grpcclient.InferInput("float_input", list(features.shape), "FP32")
    given.set_data_from_numpy(features)
    result = g.infer("iris", [given])
    np.testing.assert_array_equal(result.as_numpy("probabilities"), expected)
    meta = g.get_model_metadata("iris")
    (probs,) = [o for o in meta.outputs if o.name == "probabilities"]
    assert probs.datatype == "FP32" and list(probs.shape) == [-1, 3]


def test_the_metadata_gives_the_shape_an_output_really_has(start_server, tmp_path: Path):
    # onnxmltools declares a classifier's label int64[1] and returns [N] (the field trial's
    # LightGBM model): the metadata says what the contract observed, not the declaration
    from onnx import TensorProto, helper

    path = tmp_path / "m" / "sums.onnx"
    path.parent.mkdir()
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        "sums",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [axes],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path
    )
    init_contract(path, ContractConfig(feeds=FeedSettings(dims={"batch": [1, 8]})))
    server = start_server(str(path), "--allow-ungated")
    meta = httpclient.InferenceServerClient(server.http).get_model_metadata("sums")
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1]}]


def test_deploy_triton_gives_the_matrix_serve_answers_for_the_same_zipmap(start_server, iris):
    # Triton refuses sequences and maps: deploy writes a copy whose output is the ZipMap's input.
    # A client must get the same FP32 [N, K] from either server, and the same labels.
    from onnxgate.deploy import TritonConfig, deploy_triton

    repo = iris.parent.parent / "repo"
    report = deploy_triton(iris, TritonConfig(out=repo, allow_ungated=True))
    assert report.passed, report.findings
    features = np.array([[5.1, 3.5], [6.2, 2.9], [4.9, 3.1]], np.float32)  # [3, 2], fixed
    copy = ort.InferenceSession(str(repo / "iris" / "1" / "model.onnx"))
    (deployed,) = copy.run(["probabilities"], {"float_input": features})
    server = start_server(str(iris), "--allow-ungated")
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_model_ready("iris"), server.text()
    given = httpclient.InferInput("float_input", list(features.shape), "FP32")
    given.set_data_from_numpy(features)
    asked = [httpclient.InferRequestedOutput("probabilities", binary_data=True)]
    served = client.infer("iris", [given], outputs=asked).as_numpy("probabilities")
    assert served.dtype == deployed.dtype == np.float32
    np.testing.assert_array_equal(served, deployed)
    labels = client.get_model_metadata("iris")["onnxgate"]["labels"]["probabilities"]
    file = repo / "iris" / "v1.probabilities.labels.txt"
    assert file.read_text().splitlines() == [str(label) for label in labels]
