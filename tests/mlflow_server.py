"""A real ``mlflow server`` for the MLflow tests, started once per session by the first that asks.

The backend store is a database of its own (``mlflow_<random>``) on the test PostgreSQL server
(``ONNXGATE_TEST_POSTGRES_URL``'s host, default 127.0.0.1:5432, trust), dropped at the end; the
artefacts go to a folder through the server's artifact proxy (``--serve-artifacts``). The server
runs in a process group of its own, on a free port, and is killed by that group's id.

Without mlflow (or PostgreSQL) the tests that use it skip, except under ``CI=true``, where
they fail: CI must prove the MLflow path. A start takes 30-60 s on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass
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
    artifacts: Path
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the MLflow tests must run)")
    pytest.skip(reason)


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
    artifacts = folder / "artifacts"
    artifacts.mkdir(exist_ok=True)
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
                artifacts_destination or str(artifacts),
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
    server = MlflowServer(uri=f"http://127.0.0.1:{port}", port=port, artifacts=artifacts, log=log)
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


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real MLflow tracking server: PostgreSQL backend store, a folder as artifact root."""
    with running_server(tmp_path_factory.mktemp("mlflow")) as server:
        yield server
