"""Small real tmpfs mounts for the full-disk tests, and a filler that leaves exactly N bytes free.

Mounting needs root: where it is refused the tests skip, except under ``CI=true``, where they
fail, since CI must prove these paths.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` on the existing, empty folder ``mount``, lazily unmounted afterwards."""
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs: {done.stderr.strip()}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: the full-disk tests must run)")
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs of its own."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with mounted(mount, "2m"):
        yield mount


@pytest.fixture
def pg_disk() -> Iterator[Path]:
    """A 4 MB tmpfs the PostgreSQL server can reach (tmp_path is private to this user)."""
    mount = Path(tempfile.mkdtemp(prefix="onnxgate-pgfull-", dir="/var/tmp"))
    mount.chmod(0o755)
    try:
        with mounted(mount, "4m"):
            yield mount
    finally:
        with contextlib.suppress(OSError):
            mount.rmdir()


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(disk: Path, *, leave: int = 0) -> Path:
    """Fill ``disk`` to exactly ``leave`` bytes free (0: not one byte); the filler file."""
    reserve = disk / "reserve"
    if leave:
        reserve.write_bytes(b"\0" * leave)
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    assert free(disk) == 0
    if leave:
        reserve.unlink()
    return filler
