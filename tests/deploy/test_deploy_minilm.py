"""all-MiniLM-L6-v2, exported from its real weights, deployed to Triton and KServe and checked."""

from __future__ import annotations

import shutil

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from onnxgate.contract import ContractConfig, init_contract
from onnxgate.deploy import (
    KServeConfig,
    TritonConfig,
    check_repository,
    deploy_kserve,
    deploy_triton,
)
from onnxgate.settings import FeedSettings

pytestmark = pytest.mark.torch


def test_minilm_deploys_checks_and_gets_its_inferenceservice(minilm_onnx, tmp_path):
    model = tmp_path / "all-MiniLM-L6-v2.onnx"
    shutil.copy(minilm_onnx, model)
    contract = init_contract(
        model,
        ContractConfig(reference="ort", feeds=FeedSettings(dims={"batch": [1, 4], "seq": [8, 16]})),
    )
    report = deploy_triton(
        model, TritonConfig(out=tmp_path / "repo", name="minilm", allow_ungated=True, gpu=True)
    )
    assert report.passed, report.findings
    config = model_config_pb2.ModelConfig()
    text_format.Parse((tmp_path / "repo" / "minilm" / "config.pbtxt").read_text(), config)
    assert config.max_batch_size == 4
    assert {i.name: list(i.dims) for i in config.input} == {
        name: [-1] for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    assert {o.name: list(o.dims) for o in config.output} == {
        "last_hidden_state": [-1, 384],
        "sentence_embedding": [384],
    }
    (trt,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.parameters["trt_profile_min_shapes"].startswith("input_ids:1x8,")
    assert trt.parameters["trt_profile_max_shapes"].startswith("input_ids:4x16,")
    # one warm-up per golden sample (batch 1 and 4 × seq 8 and 16), at its batch size
    assert [w.batch_size for w in config.model_warmup] == [
        s.dims["batch"] for s in contract.golden.samples
    ]
    assert check_repository(tmp_path / "repo").passed
    manifest = deploy_kserve(
        model,
        KServeConfig(storage_uri="s3://b/models", model_name="minilm", allow_ungated=True),
    ).manifest
    probe = manifest["spec"]["predictor"]["model"]["readinessProbe"]["httpGet"]
    assert probe["path"] == "/v2/models/minilm/ready"
