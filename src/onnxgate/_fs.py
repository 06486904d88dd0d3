"""File-system helpers: atomic writes and the user cache folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Onnxgate's cache folder: ``$ONNXGATE_CACHE_DIR`` or the platform's user cache."""
    override = os.environ.get("ONNXGATE_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("onnxgate"))


def public_mode(path: str | os.PathLike[str], *, folder: bool = False) -> None:
    """Give what mkstemp or mkdtemp made (0600, 0700) the mode open() or mkdir() would give.

    That is 0666 or 0777 less the umask.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a file written by another library to the disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def staged_file(target: Path) -> Iterator[Path]:
    """A temporary file beside ``target`` that replaces it only if the block succeeds.

    For files a library writes by path (an exporter, ``onnx.save_model``): when the block ends
    without an exception the file gets the usual mode, is fsynced and renamed over ``target``;
    otherwise it is removed, and ``target`` is untouched.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        public_mode(tmp)
        fsync_file(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old content or all of the new one.

    Writes a temporary file in the same folder, flushes and fsyncs it, then renames it over the
    target, which POSIX makes atomic.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        public_mode(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))
