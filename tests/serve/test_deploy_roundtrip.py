"""A generated Triton repository describes a model that really answers: served, then called."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from onnxgate.deploy import TritonConfig, deploy_triton

from ._serve_helpers import copy_model, reference_logits

NUMPY = {"TYPE_INT64": np.int64, "TYPE_FP32": np.float32}


def test_the_generated_config_matches_what_the_served_model_answers(
    start_server, token_model, tmp_path: Path
):
    model = copy_model(token_model, tmp_path / "m")
    report = deploy_triton(model, TritonConfig(out=tmp_path / "repo", allow_ungated=True))
    assert report.passed, report.findings
    config = model_config_pb2.ModelConfig()
    text_format.Parse((tmp_path / "repo" / "tok" / "config.pbtxt").read_text(), config)
    assert config.max_batch_size == 8  # the contract proves batch 1..8

    # served from the repository's version folder, under the config's name
    version = tmp_path / "repo" / "tok" / str(report.version) / "model.onnx"
    server = start_server(f"{config.name}={version}", "--allow-ungated")
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_model_ready(config.name)
    meta = client.get_model_metadata(config.name)
    batch = [-1] if config.max_batch_size else []
    for listed, served in ((config.input, meta["inputs"]), (config.output, meta["outputs"])):
        assert [t.name for t in listed] == [t["name"] for t in served]
        for tensor, answer in zip(listed, served, strict=True):
            assert model_config_pb2.DataType.Name(tensor.data_type) == "TYPE_" + answer["datatype"]
            assert batch + list(tensor.dims) == answer["shape"]

    # every warm-up, built as Triton builds it (its one row repeated to batch_size), answers as
    # ONNX Runtime does
    assert config.model_warmup
    for warm in config.model_warmup:
        arrays = {}
        for name, data in warm.inputs.items():
            dtype = NUMPY[model_config_pb2.DataType.Name(data.data_type)]
            raw = (tmp_path / "repo" / "tok" / "warmup" / data.input_data_file).read_bytes()
            row = np.frombuffer(raw, dtype).reshape(list(data.dims))
            arrays[name] = np.repeat(row[None], warm.batch_size, axis=0)
        inputs = []
        for name, array in arrays.items():
            tensor = httpclient.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        answer = client.infer(config.name, inputs).as_numpy("logits")
        expected = reference_logits(model, arrays["ids"], arrays["mask"])
        np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6)
