"""``registry publish mlflow`` against a real MLflow tracking server (tests/mlflow_server.py)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxgate.cli.registry_cmd import registry_app
from onnxgate.errors import MlflowUnreachable, PromotionRefused
from onnxgate.registry import open_registry, publish_mlflow

from ._registry_helpers import gate_report

runner = CliRunner()


def _gated_files(folder: Path, name: str) -> dict[str, Path]:
    """A small real model with its contract and golden samples (what MLflow's flavour loads)."""
    from models import mlp, save
    from onnxgate.contract import ContractConfig, contract_paths, init_contract

    folder.mkdir(parents=True, exist_ok=True)
    path = save(mlp(), folder / f"{name}.onnx")
    init_contract(path, ContractConfig(reference="ort", second_opinion=False))
    contract, golden = contract_paths(path)
    return {"model": path, "contract": contract, "golden": golden}


@pytest.fixture
def local(tmp_path: Path):
    """onnxgate's registry (SQLite) with a passing version 1 and a failing version 2."""
    url, store = f"sqlite:///{tmp_path / 'registry.db'}", tmp_path / "store"
    name = f"m{uuid.uuid4().hex[:8]}"
    with open_registry(url, store) as reg:
        good = _gated_files(tmp_path / "good", name)
        reg.register(name, good, gate_report(good, name=name), alias="champion")
        bad = _gated_files(tmp_path / "bad", name)
        reg.register(name, bad, gate_report(bad, passed=False, name=name))
    return url, store, name


def _client(server):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=server.uri, registry_uri=server.uri)


def test_publish_logs_an_onnx_model_with_its_contract_figures_and_tags(
    mlflow_server, local, tmp_path
):
    import mlflow.onnx

    url, store, name = local
    with open_registry(url, store) as reg:
        published = publish_mlflow(reg, f"{name}@1", mlflow_server.uri)
        stored = reg.gate_report(f"{name}@1")
        sha = reg.get(f"{name}@1").artefacts["model"]
    assert (published.name, published.created, published.alias_moved) == (name, True, True)
    client = _client(mlflow_server)
    version = client.get_model_version_by_alias(name, "champion")
    assert int(version.version) == published.version
    assert (
        version.tags["onnxgate.ref"] == f"{name}@1" and version.tags["onnxgate.model_sha256"] == sha
    )
    run = client.get_run(published.run_id)
    bench = next(s for s in stored["steps"] if s["name"] == "bench")
    assert run.data.metrics["bench.p50_ms"] == pytest.approx(bench["figures"]["p50_ms"])
    assert run.data.metrics["gate.passed"] == 1.0
    assert run.data.tags["onnxgate.env.fingerprint"] == stored["environment"]["fingerprint"]
    with mlflow_tracking(mlflow_server.uri):
        folder = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=f"models:/{name}/{published.version}", dst_path=str(tmp_path / "dl")
            )
        )
        proto = mlflow.onnx.load_model(f"models:/{name}/{published.version}")
    extra = {p.name for p in (folder / "extra_files").iterdir()}
    assert {f"{name}.contract.json", f"{name}.golden.npz", "report.json", "onnxgate.json"} <= extra
    assert json.loads((folder / "extra_files" / "report.json").read_text())["passed"] is True
    assert "onnx" in (folder / "MLmodel").read_text()
    assert [o.name for o in proto.graph.output]  # the ONNX flavour loads it
    # the server's artifact root is the SeaweedFS bucket: the files are objects there
    keys = mlflow_server.artifact_keys()
    assert any(k.endswith(f"/{name}.contract.json") for k in keys), keys
    in_bucket = {mlflow_server.artifact_bytes(k) for k in keys if k.endswith("/model.onnx")}
    assert (folder / "model.onnx").read_bytes() in in_bucket


def test_publishing_again_finds_the_version_by_its_tags(mlflow_server, local):
    url, store, name = local
    with open_registry(url, store) as reg:
        first = publish_mlflow(reg, f"{name}@1", mlflow_server.uri)
        again = publish_mlflow(reg, f"{name}@champion", mlflow_server.uri)
    assert again.version == first.version and not again.created and again.previous == first.version
    assert len(_client(mlflow_server).search_model_versions(f"name = '{name}'")) == 1


def test_a_failed_gate_cannot_move_the_alias(mlflow_server, local):
    url, store, name = local
    with open_registry(url, store) as reg:
        with pytest.raises(PromotionRefused, match="did not pass"):
            publish_mlflow(reg, f"{name}@2", mlflow_server.uri, alias="champion")
    assert _client(mlflow_server).search_registered_models(f"name = '{name}'") == []
    result = runner.invoke(
        registry_app,
        ["publish", "mlflow", f"{name}@2", "--tracking-uri", mlflow_server.uri,
         "--registry", url, "--store", str(store)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    result = runner.invoke(
        registry_app,
        ["publish", "mlflow", f"{name}@2", "--no-alias", "--tracking-uri", mlflow_server.uri,
         "--registry", url, "--store", str(store), "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["alias"], document["alias_moved"]) == (None, False)
    client = _client(mlflow_server)
    assert client.get_registered_model(name).aliases == {}
    (version,) = client.search_model_versions(f"name = '{name}'")
    assert version.tags["onnxgate.gate"] == "failed"


def test_credentials_in_the_tracking_uri_are_masked(mlflow_server, local):
    url, store, name = local
    secret = "s3cret-pw"
    with_credentials = mlflow_server.uri.replace("http://", f"http://alice:{secret}@")
    args = ["--registry", url, "--store", str(store), "--format", "json"]
    result = runner.invoke(
        registry_app,
        ["publish", "mlflow", f"{name}@1", "--tracking-uri", with_credentials, *args],
    )
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    assert json.loads(result.stdout)["tracking_uri"] == with_credentials.replace(secret, "***")
    closed = f"http://alice:{secret}@127.0.0.1:{_closed_port()}"
    with open_registry(url, store) as reg, pytest.raises(MlflowUnreachable) as raised:
        publish_mlflow(reg, f"{name}@1", closed)
    assert secret not in str(raised.value) and "alice:***@" in str(raised.value)
    result = runner.invoke(
        registry_app, ["publish", "mlflow", f"{name}@1", "--tracking-uri", closed, *args]
    )
    assert result.exit_code == 3 and secret not in result.output


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class mlflow_tracking:  # noqa: N801 (a context manager used as a function)
    """MLflow's fluent API pointed at a server for a block."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self):
        import mlflow

        mlflow.set_tracking_uri(self.uri)
        mlflow.set_registry_uri(self.uri)

    def __exit__(self, *exc):
        import mlflow

        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
