"""``onnxgate serve mlflow:/models/NAME@ALIAS``: a version published to a real MLflow server
(tests/mlflow_server.py), downloaded, checked, proven and served to tritonclient."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from onnxgate.errors import MlflowNotFound
from onnxgate.registry import open_registry, publish_mlflow
from onnxgate.serve import resolve

from ._serve_helpers import copy_model, reference_logits, register


@pytest.fixture
def published(mlflow_server, token_model, tmp_path: Path):
    """The token model registered in onnxgate's registry and published to MLflow as NAME@champion."""
    model = copy_model(token_model, tmp_path / "src")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    version = register(url, model)
    name = f"tok{uuid.uuid4().hex[:8]}"
    with open_registry(url) as reg:
        publication = publish_mlflow(reg, version.ref, mlflow_server.uri, name=name)
    return model, name, publication


def test_serve_an_mlflow_alias_answers_tritonclient(mlflow_server, published, start_server):
    model, name, publication = published
    server = start_server(
        f"mlflow:/models/{name}@champion", "--mlflow-tracking-uri", mlflow_server.uri
    )
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_server_ready() and client.is_model_ready(name)
    meta = client.get_model_metadata(name)
    assert meta["versions"] == [str(publication.version)] and meta["onnxgate"]["ready"] is True
    rng = np.random.default_rng(0)
    ids, mask = rng.integers(0, 50, (2, 6), dtype=np.int64), np.ones((2, 6), np.int64)
    inputs = [httpclient.InferInput("ids", [2, 6], "INT64"),
              httpclient.InferInput("mask", [2, 6], "INT64")]  # fmt: skip
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(mask)
    logits = client.infer(name, inputs).as_numpy("logits")
    np.testing.assert_allclose(logits, reference_logits(model, ids, mask), rtol=1e-5, atol=1e-6)
    assert "serve/mlflow" in server.text() or "fetched from MLflow" in server.text()


def test_an_unknown_alias_or_model_is_a_clean_error(mlflow_server, published, start_server):
    _, name, _ = published
    with pytest.raises(MlflowNotFound, match="no alias 'nosuch'"):
        resolve(f"mlflow:/models/{name}@nosuch", None, mlflow_tracking_uri=mlflow_server.uri)
    with pytest.raises(MlflowNotFound, match="no model named"):
        resolve("mlflow:/models/absent-model@champion", None, mlflow_tracking_uri=mlflow_server.uri)
    server = start_server(
        f"mlflow:/models/{name}@nosuch", "--mlflow-tracking-uri", mlflow_server.uri, "-f", "json",
        live=False,
    )  # fmt: skip
    assert server.process.wait(120) == 2
    assert "no alias 'nosuch'" in server.text() and "Traceback" not in server.text()


def test_a_damaged_cache_is_fetched_again_and_checked(mlflow_server, published, caplog):
    _, name, publication = published
    ref = f"mlflow:/models/{name}/{publication.version}"
    source = resolve(ref, None, mlflow_tracking_uri=mlflow_server.uri)
    assert source.gated and source.version == str(publication.version)
    assert source.model.parent.parent.name == "mlflow"  # the cache's serve/mlflow/NAME@V-HASH
    manifest = json.loads(source.model.with_name("onnxgate.json").read_text())
    assert {f["role"] for f in manifest["files"]} >= {"model", "contract", "golden", "report"}
    good = source.model.read_bytes()
    source.model.write_bytes(good + b"\0")
    again = resolve(ref, None, mlflow_tracking_uri=mlflow_server.uri)
    assert again.model == source.model and again.model.read_bytes() == good
    assert "not the file published" in caplog.text
