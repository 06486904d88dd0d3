"""A real ``mlflow server`` for the MLflow tests, started once per session by the first that asks.

The backend store is a database of its own (``mlflow_<random>``) on the test PostgreSQL server
(``ONNXGATE_TEST_POSTGRES_URL``'s host, default 127.0.0.1:5432, trust), dropped at the end; the
artefacts go through the server's artifact proxy (``--serve-artifacts``) to ``s3://BUCKET/mlflow``
in the session's SeaweedFS (tests/seaweedfs.py; the server's boto3 reaches it through
``MLFLOW_S3_ENDPOINT_URL`` and the AWS variables). The server runs in a process group of its own,
on a free port, and is killed by that group's id.

Without mlflow, PostgreSQL or SeaweedFS the tests that use it skip, except under ``CI=true``,
where they fail: CI must prove the MLflow path. A start takes 30-60 s on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
READY_SECONDS = 240.0


@dataclass(frozen=True)
class MlflowServer:
    """A running tracking server."""

    uri: str
    """``http://127.0.0.1:PORT``."""
    port: int
    artifacts: str
    """The artifact root: ``s3://BUCKET/mlflow``, or a folder."""
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    """The variables the server got for its artifact root (the AWS ones for S3)."""

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def _s3(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.env["MLFLOW_S3_ENDPOINT_URL"],
            region_name=self.env["AWS_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def artifact_keys(self) -> list[str]:
        """Every object key under the S3 artifact root, listed in the bucket itself (boto3)."""
        bucket, _, prefix = self.artifacts.removeprefix("s3://").partition("/")
        pages = (
            self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def artifact_bytes(self, key: str) -> bytes:
        """An object of the S3 artifact root, read from the bucket itself."""
        bucket = self.artifacts.removeprefix("s3://").partition("/")[0]
        return self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the MLflow tests must run)")
    pytest.skip(reason)


def require_mlflow() -> None:
    """Skip a test that needs the mlflow package where it is missing; under CI=true, fail."""
    if importlib.util.find_spec("mlflow") is None:
        _unavailable("the mlflow package is not installed (pip install -e '.[test]')")


def _binary() -> str | None:
    beside = Path(sys.executable).with_name("mlflow")
    return str(beside) if beside.is_file() else shutil.which("mlflow")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _admin_engine():
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    url = make_url(os.environ.get("ONNXGATE_TEST_POSTGRES_URL", DEFAULT_PG))
    return url, create_engine(
        url.set(database="postgres", query={}),
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": 5},
    )


def _ready(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (gunicorn/uvicorn and its workers), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def running_server(
    folder: Path, *, artifacts_destination: str | None = None, env: dict[str, str] | None = None
) -> Iterator[MlflowServer]:
    """An ``mlflow server`` on a database of its own and a free port, stopped and dropped after.

    ``artifacts_destination`` is the server's artifact root: a folder under ``folder`` by default.
    This is the seam for an object-store root (``s3://bucket/prefix``, with
    ``MLFLOW_S3_ENDPOINT_URL`` and the AWS variables in ``env``): clients upload and download
    through the server's artifact proxy either way, so onnxgate's side does not change.
    """
    binary = _binary()
    if binary is None:
        _unavailable("mlflow is not installed (the test extra has it)")
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    url, admin = _admin_engine()
    database = f"mlflow_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
    except DBAPIError as err:
        admin.dispose()
        _unavailable(f"PostgreSQL at {url.host}:{url.port} is unreachable: {str(err.orig)[:200]}")
    if artifacts_destination is None:
        (folder / "artifacts").mkdir(exist_ok=True)
    artifacts = artifacts_destination or str(folder / "artifacts")
    port = _free_port()
    log = folder / "server.log"
    backend = url.set(database=database, query={}).render_as_string(hide_password=False)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                "server",
                "--backend-store-uri",
                backend,
                "--artifacts-destination",
                artifacts,
                "--serve-artifacts",
                "--workers",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=folder,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group: killed whole by its id
        )
    server = MlflowServer(
        uri=f"http://127.0.0.1:{port}", port=port, artifacts=artifacts, log=log, env=env or {}
    )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not _ready(server.uri):
            if process.poll() is not None:
                pytest.fail(f"mlflow server exited {process.returncode}:\n{server.text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server not ready in {READY_SECONDS:g} s:\n{server.text()[-4000:]}"
                )
            time.sleep(0.5)
        yield server
    finally:
        _stop(process)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


def s3_root_env(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """What ``mlflow server`` needs to write its artifacts to an S3-compatible server."""
    return {
        "MLFLOW_S3_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, seaweedfs) -> Iterator[MlflowServer]:
    """A real MLflow tracking server: PostgreSQL backend store, the session's SeaweedFS bucket
    (``s3://BUCKET/mlflow``) as artifact root."""
    from seaweedfs import ACCESS_KEY, SECRET_KEY

    env = s3_root_env(seaweedfs.endpoint, ACCESS_KEY, SECRET_KEY)
    root = f"s3://{seaweedfs.buckets[0]}/mlflow"
    with running_server(
        tmp_path_factory.mktemp("mlflow"), artifacts_destination=root, env=env
    ) as server:
        yield server
