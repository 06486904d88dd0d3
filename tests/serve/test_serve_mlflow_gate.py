"""End to end, as issue 31 asks: a gate run publishes to a real MLflow server (PostgreSQL backend
store, the session's SeaweedFS bucket as artifact root), ``serve mlflow:/models/NAME@champion``
answers tritonclient, and a failed gate leaves the MLflow alias where it was."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient

from models import mlp, save
from onnxgate.gate import run_gate
from onnxgate.serve import resolve

STEPS = "[steps.tune]\nenabled = false\n\n[steps.bench]\nenabled = false\n"


def _gate(folder: Path, name: str, tracking_uri: str, *, broken: bool = False) -> Path:
    """A gate config for tests/models.py's MLP, or for a file that is no model (the export step
    fails the gate)."""
    folder.mkdir(parents=True, exist_ok=True)
    save(mlp(), folder / "mlp.onnx")
    if broken:
        (folder / "mlp.onnx").write_bytes(b"not a model")
    path = folder / "gate.toml"
    head = f'version = 1\n[model]\nname = "{name}"\nsource = "mlp.onnx"\n'
    register = f'\n[register]\nname = "{name}"\nalias = "champion"\nmlflow = "{tracking_uri}"\n'
    path.write_text(head + STEPS + register)
    return path


def test_gate_publishes_serve_answers_and_a_failed_gate_leaves_the_alias(
    mlflow_server, start_server, tmp_path: Path
) -> None:
    import mlflow

    name = f"e2e{uuid.uuid4().hex[:8]}"
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    report = run_gate(_gate(tmp_path / "pass", name, mlflow_server.uri), registry=registry)
    assert report.passed and report.registered is not None
    published = report.registered.mlflow
    assert published is not None and published.alias_moved

    server = start_server(
        f"mlflow:/models/{name}@champion", "--mlflow-tracking-uri", mlflow_server.uri
    )
    client = httpclient.InferenceServerClient(server.http)
    assert client.is_model_ready(name)
    assert client.get_model_metadata(name)["versions"] == [str(published.version)]
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    request = httpclient.InferInput("x", [2, 4], "FP32")
    request.set_data_from_numpy(x)
    answer = client.infer(name, [request]).as_numpy("y")
    expected = ort.InferenceSession(str(tmp_path / "pass" / "mlp.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6)

    # the model served is an object of the bucket the server writes its artifacts to
    served = resolve(f"mlflow:/models/{name}@champion", None, mlflow_tracking_uri=mlflow_server.uri)
    in_bucket = [k for k in mlflow_server.artifact_keys() if k.endswith("/model.onnx")]
    assert served.model.read_bytes() in {mlflow_server.artifact_bytes(k) for k in in_bucket}

    broken = _gate(tmp_path / "fail", name, mlflow_server.uri, broken=True)
    failed = run_gate(broken, registry=registry)
    assert not failed.passed and failed.failed_steps == ["export"] and failed.registered is None
    tracking = mlflow.MlflowClient(tracking_uri=mlflow_server.uri, registry_uri=mlflow_server.uri)
    assert tracking.get_registered_model(name).aliases == {"champion": str(published.version)}
    assert len(tracking.search_model_versions(f"name = '{name}'")) == 1
