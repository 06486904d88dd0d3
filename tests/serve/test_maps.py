"""A ZipMap classifier (scikit-learn's default export) served: the Open Inference Protocol has no
map type, so its probabilities are answered as FP32 [N, K] with the class labels in the model's
metadata. The model is ONNX Runtime's own logreg_iris.onnx (seq(map(int64, float)))."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from onnxgate.contract import ContractConfig, init_contract

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
