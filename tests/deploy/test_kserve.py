"""``deploy kserve``: an InferenceService built with KServe's own types, for the Triton repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from models import mlp, save
from onnxgate.cli import app
from onnxgate.contract import ContractConfig, init_contract
from onnxgate.deploy._kserve import KServeConfig, deploy_kserve
from onnxgate.errors import ConfigError, ExtraMissing, NotGated

runner = CliRunner()


@pytest.fixture
def proven(tmp_path) -> Path:
    path = save(mlp(), tmp_path / "mlp.onnx")
    init_contract(path, ContractConfig())
    return path


def test_the_manifest_serves_the_repository_on_triton_and_waits_for_warm_ups(proven, tmp_path):
    out = tmp_path / "isvc.yaml"
    config = KServeConfig(
        storage_uri="s3://bucket/models", out=out, allow_ungated=True, gpus=1, namespace="ml"
    )
    report = deploy_kserve(proven, config)
    assert report.kserve and yaml.safe_load(out.read_text()) == report.manifest
    manifest = report.manifest
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1"
    assert manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["name"] == "mlp" and manifest["metadata"]["namespace"] == "ml"
    model = manifest["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "triton"} and model["protocolVersion"] == "v2"
    assert model["runtime"] == "kserve-tritonserver"
    assert model["storageUri"] == "s3://bucket/models"
    assert model["readinessProbe"]["httpGet"] == {"path": "/v2/models/mlp/ready", "port": 8080}
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # camelCase, as Kubernetes reads it, and no nulls
    assert "storage_uri" not in model and None not in model.values()
    annotations = manifest["metadata"]["annotations"]
    assert len(annotations["onnxgate/model-sha256"]) == 64


def test_names_that_are_not_dns_labels_and_ungated_models_are_refused(proven, tmp_path):
    with pytest.raises(NotGated):
        deploy_kserve(proven, KServeConfig(storage_uri="s3://b/m"))
    with pytest.raises(ConfigError, match="DNS-1123"):
        deploy_kserve(
            proven, KServeConfig(storage_uri="s3://b/m", name="Bad_Name", allow_ungated=True)
        )
    # a model name that is not a label is lowercased and dashed for the service, kept for Triton
    report = deploy_kserve(
        proven, KServeConfig(storage_uri="s3://b/m", model_name="My_Model", allow_ungated=True)
    )
    assert report.name == "my-model"
    path = report.manifest["spec"]["predictor"]["model"]["readinessProbe"]["httpGet"]["path"]
    assert path == "/v2/models/My_Model/ready"


def test_without_kserve_the_extra_is_named(proven, tmp_path, monkeypatch):
    fake = tmp_path / "fake" / "kserve"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named kserve')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    with pytest.raises(ExtraMissing, match="kserve") as caught:
        deploy_kserve(proven, KServeConfig(storage_uri="s3://b/m", allow_ungated=True))
    assert "[kserve]'" in (caught.value.hint or "") and caught.value.extras == ["kserve"]


def test_the_cli_prints_yaml_and_json(proven, tmp_path):
    result = runner.invoke(
        app,
        ["deploy", "kserve", str(proven), "--storage-uri", "pvc://models", "--allow-ungated"],
    )
    assert result.exit_code == 0, result.output
    assert "storageUri: pvc://models" in result.stdout
    result = runner.invoke(
        app,
        [
            "deploy",
            "kserve",
            str(proven),
            "--storage-uri",
            "pvc://m",
            "--allow-ungated",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout)["manifest"]["kind"] == "InferenceService"
