"""A gate run with ``[register] mlflow``: the registered version is published to a real MLflow
tracking server (tests/mlflow_server.py), and the report says where."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest

from mlflow_server import require_mlflow
from models import mlp, save
from onnxgate.errors import MlflowUnreachable
from onnxgate.gate import run_gate

QUIET = """
[steps.tune]
enabled = false

[steps.bench]
enabled = false
"""


def _config(folder: Path, register: str) -> Path:
    save(mlp(), folder / "mlp.onnx")
    path = folder / "gate.toml"
    head = 'version = 1\n[model]\nname = "mlp"\nsource = "mlp.onnx"\n'
    path.write_text(head + QUIET + "\n[register]\n" + register)
    return path


def test_a_passing_gate_publishes_to_mlflow(mlflow_server, tmp_path: Path) -> None:
    import mlflow

    name = f"mlp{uuid.uuid4().hex[:8]}"
    uri = mlflow_server.uri.replace("http://", "http://ci:pw-1234@")  # masked in the report
    path = _config(tmp_path, f'name = "{name}"\nalias = "champion"\nmlflow = "{uri}"\n')
    report = run_gate(path, registry=f"sqlite:///{tmp_path / 'registry.db'}")
    assert report.passed and report.registered is not None
    published = report.registered.mlflow
    assert published is not None and (published.name, published.alias_moved) == (name, True)
    assert published.tracking_uri == uri.replace("pw-1234", "***")
    saved = (Path(report.run_dir) / "report.json").read_text()
    assert json.loads(saved)["registered"]["mlflow"]["version"] == published.version
    assert "pw-1234" not in saved + (Path(report.run_dir) / "report.html").read_text()
    client = mlflow.MlflowClient(tracking_uri=mlflow_server.uri, registry_uri=mlflow_server.uri)
    version = client.get_model_version_by_alias(name, "champion")
    assert int(version.version) == published.version
    assert version.tags["onnxgate.ref"] == f"{name}@{report.registered.version}"
    run = client.get_run(published.run_id)
    assert run.data.metrics["gate.passed"] == 1.0
    assert {a.path for a in client.list_artifacts(published.run_id, "onnxgate")} >= {
        "onnxgate/report.json",
        "onnxgate/report.html",
    }


def test_an_unreachable_mlflow_is_exit_3_and_the_version_stays_registered(tmp_path: Path) -> None:
    require_mlflow()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    path = _config(tmp_path, f'mlflow = "http://127.0.0.1:{closed}"\n')
    with pytest.raises(MlflowUnreachable, match=f"127.0.0.1:{closed}") as raised:
        run_gate(path, registry=f"sqlite:///{tmp_path / 'registry.db'}")
    assert raised.value.exit_code == 3
    (run,) = (tmp_path / "gate-runs").iterdir()
    saved = json.loads((run / "report.json").read_text())
    assert saved["registered"]["version"] == 1 and saved["registered"]["mlflow"] is None
