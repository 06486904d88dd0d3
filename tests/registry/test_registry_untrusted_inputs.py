"""Units of the S3 upload's hashing reader and the MLflow download's layout (no server)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from onnxgate.errors import ArtefactCorrupt, ConfigError
from onnxgate.registry import _mlflow_fetch, _s3store
from onnxgate.registry._s3store import _HashingChunks


def test_a_file_emptied_while_stored_fails_the_upload(tmp_path: Path) -> None:
    data = b"weights"
    chunks = _HashingChunks(
        io.BytesIO(b""), tmp_path / "m.onnx", hashlib.sha256(data).hexdigest(), len(data)
    )
    with pytest.raises(ArtefactCorrupt, match="changed while it was being stored"):
        list(chunks)


def test_an_empty_file_still_uploads(tmp_path: Path) -> None:
    chunks = _HashingChunks(io.BytesIO(b""), tmp_path / "e", hashlib.sha256(b"").hexdigest(), 0)
    assert list(chunks) == []


@pytest.mark.parametrize("path", ["../../../../../secret.txt", "/abs/secret.txt"])
def test_a_manifest_path_outside_the_download_is_refused(tmp_path: Path, path: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not the server's to read")
    path = path.replace("/abs", str(tmp_path))

    def download_artifacts(*, artifact_uri: str, dst_path: str, tracking_uri: str) -> str:
        got = Path(dst_path) / "model"
        (got / "extra_files").mkdir(parents=True)
        manifest = {"files": [{"name": "m.onnx", "path": path, "role": "model", "sha256": "x"}]}
        (got / "extra_files" / _mlflow_fetch.MANIFEST).write_text(json.dumps(manifest))
        return str(got)

    mlflow = SimpleNamespace(artifacts=SimpleNamespace(download_artifacts=download_artifacts))
    cache = tmp_path / "cache" / "deep" / "er"
    with pytest.raises(ArtefactCorrupt, match="outside"):
        _mlflow_fetch._download(mlflow, "m", 1, cache / "m@1", "http://h")
    assert not (cache / "m@1").exists()


def test_the_service_error_shows_no_endpoint_password(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    said = _s3store.scrub("GET http://u:PASSW0RD@127.0.0.1:1/bucket key s3cr3t failed")
    assert "PASSW0RD" not in said and "s3cr3t" not in said and "127.0.0.1:1/bucket" in said


@pytest.mark.parametrize("endpoint", ["not a url", "127.0.0.1:8333", "http://:9000", "ftp://h"])
def test_a_malformed_endpoint_is_a_usage_error_not_a_panic(monkeypatch, endpoint):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(ConfigError, match="AWS_ENDPOINT_URL"):
        _s3store.S3Store("s3://bucket/p")


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "m.onnx", "path": "model.onnx", "role": "model"},  # no sha256
        {"name": "m.onnx", "role": "model", "sha256": "ab"},  # no path
        {"name": _mlflow_fetch.MANIFEST, "path": "x", "role": "model", "sha256": "ab"},
        "m.onnx",
    ],
)
def test_a_malformed_manifest_entry_is_artefact_corrupt(tmp_path: Path, entry) -> None:
    (tmp_path / _mlflow_fetch.MANIFEST).write_text(json.dumps({"files": [entry]}))
    with pytest.raises(ArtefactCorrupt, match="unreadable"):
        _mlflow_fetch._read_manifest(tmp_path / _mlflow_fetch.MANIFEST, "mlflow:/models/m/1")
