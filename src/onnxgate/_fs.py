"""File-system helpers: atomic writes and the user cache folder."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import platformdirs

from onnxgate._words import offered, setting
from onnxgate.errors import ConfigError, ResourceExhausted

log = logging.getLogger(__name__)

PARTIAL_MARK = "onnxgate-partial"
"""The word in the name of every temporary file onnxgate writes beside a target.

A write goes to ``.<target>.<random>.<pid>.onnxgate-partial[<target's suffix>]`` and is renamed
over the target when complete; a partial file that outlives its writer (``kill -9``, a power
cut) is recognised by this name, removed by the next write to its folder and reported by
``inspect`` and ``contract verify``.
"""

_PARTIAL = re.compile(
    rf"^\.(?P<target>.+)\.[A-Za-z0-9_]+\.(?P<pid>\d+)\.{PARTIAL_MARK}(?:\.[^.]*)?$"
)

STALE_AFTER_S = 24 * 3600.0
"""A partial file older than this is stale even if a process with its writer's pid is alive
(the pid may have been reused, or the folder is shared with another machine)."""


_EXHAUSTED: dict[int, tuple[str, str]] = {
    errno.ENOSPC: (
        "no space left on the device holding {path}",
        "Free space on the filesystem holding {folder} (or point onnxgate at another disk) and "
        "run again; nothing was half-written.",
    ),
    errno.EDQUOT: (
        "disk quota exceeded while writing {path}",
        "Free space within your quota on the filesystem holding {folder} (or ask for a larger "
        "quota) and run again; nothing was half-written.",
    ),
    errno.EROFS: (
        "cannot write {path}: the folder is read-only",
        "Remount {folder} read-write or point onnxgate at a writable folder; nothing was written.",
    ),
    errno.EACCES: (
        "permission denied for {path}",
        "Choose a folder you may write to (or have {folder}'s permissions changed) and run "
        "again; nothing was half-written.",
    ),
    errno.EPERM: (
        "operation not permitted on {path}",
        "Choose a folder you may write to (or have {folder}'s permissions changed) and run "
        "again; nothing was half-written.",
    ),
    errno.EMFILE: (
        "too many open files while opening {path}",
        "Raise this process's open-file limit (ulimit -n) and run again; nothing was half-written.",
    ),
    errno.ENFILE: (
        "the system's table of open files is full while opening {path}",
        "Close other programs or raise the system's limit (fs.file-max) and run again; nothing "
        "was half-written.",
    ),
}
"""The errnos that mean the machine ran out of something or refuses the user, not that onnxgate
failed: the user's condition to fix (exit 3)."""


def resource_error(
    error: BaseException, path: str | os.PathLike[str] | None = None
) -> ResourceExhausted | None:
    """The :class:`ResourceExhausted` an ``OSError`` means, or None for any other error.

    ``path`` names what was being written (a temporary file's target, not the temporary file);
    without it, the error's own ``filename``.
    """
    if not isinstance(error, OSError) or error.errno not in _EXHAUSTED:
        return None
    where = path if path is not None else error.filename
    shown = os.fsdecode(where) if where is not None else "a file"
    folder = (os.path.dirname(shown) or shown) if where is not None else "the folder written to"
    message, hint = _EXHAUSTED[error.errno]
    return ResourceExhausted(
        f"{message.format(path=shown)} ({error.strerror or os.strerror(error.errno)}).",
        hint=hint.format(folder=folder),
        path=shown if where is not None else None,
    )


@contextmanager
def exhaustion_as_error(path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Turn an ``OSError`` of exhaustion in the block into :class:`ResourceExhausted`.

    Whatever the block must undo (a temporary file, a transaction) it undoes itself, in its
    own ``finally`` or ``except``; this only renames the error once that is done.
    """
    try:
        yield
    except OSError as error:
        exhausted = resource_error(error, path)
        if exhausted is None:
            raise
        raise exhausted from error


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
    with exhaustion_as_error(target):
        fd, name = open_partial(target, target.suffix)  # held open: its lock says "being written"
        tmp = Path(name)
        try:
            yield tmp
            public_mode(tmp)
            fsync_file(tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old content or all of the new one.

    Writes a temporary file in the same folder, flushes and fsyncs it, then renames it over the
    target, which POSIX makes atomic.

    A full disk, quota or open-file table, or a read-only folder, is
    :class:`~onnxgate.errors.ResourceExhausted`, raised after the temporary file is removed.
    """
    target = Path(path)
    with exhaustion_as_error(target):
        fd, tmp = open_partial(target, "")
        try:
            with os.fdopen(fd, "wb") as handle:  # closed, and so unlocked, after the rename
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


def open_partial(target: Path, suffix: str = "") -> tuple[int, str]:
    """Create the partial file for ``target`` (removing stale ones beside it first): (fd, path).

    The file is locked (``flock``) for as long as ``fd`` is open: a writer in another container
    or on another host, whose pid means nothing here, still shows that it is at work.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(target.parent)
    fd, name = tempfile.mkstemp(
        prefix=f".{target.name}.",
        suffix=f".{os.getpid()}.{PARTIAL_MARK}{suffix}",
        dir=target.parent,
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:  # a file system without locks: the pid and the age still judge
        log.debug("cannot lock %s: %s", name, error)
    return fd, name


def partial_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The partial files of interrupted onnxgate writes in ``folder``, stale or in progress."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(Path(folder, name) for name in names if _PARTIAL.match(name))


def partial_target(path: Path) -> str:
    """The name of the file a partial file was to become."""
    match = _PARTIAL.match(path.name)
    return match.group("target") if match else path.name


def partial_writer(path: Path) -> int | None:
    """The pid of the process that wrote a partial file."""
    match = _PARTIAL.match(path.name)
    return int(match.group("pid")) if match else None


def is_stale(path: Path, *, now: float | None = None) -> bool:
    """Whether a partial file's writer is gone.

    It is, when nobody holds the file's lock and its process has ended or it is over a day old.
    """
    match = _PARTIAL.match(path.name)
    if match is None or _locked(path):
        return False
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError:
        return False
    return age > STALE_AFTER_S or not alive(int(match.group("pid")))


def stale_partials(folder: str | os.PathLike[str]) -> list[Path]:
    """The partial files in ``folder`` whose writer is gone (see :func:`is_stale`)."""
    return [path for path in partial_files(folder) if is_stale(path)]


def remove_stale_partials(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the stale partial files in ``folder``; return those removed."""
    removed = []
    for path in stale_partials(folder):
        try:
            path.unlink()
        except OSError as error:  # read-only, or another writer got there first
            log.debug("cannot remove stale partial file %s: %s", path, error)
            continue
        log.info("removed %s, left by an interrupted write of %s", path, partial_target(path))
        removed.append(path)
    return removed


def _locked(path: Path) -> bool:
    """Whether a writer holds the partial file's lock (see ``open_partial``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # gone, or a link: not a file onnxgate is writing
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # no locks on this file system
        return False
    finally:
        os.close(fd)  # releases the lock it may have taken
    return False


def alive(pid: int) -> bool:
    """Whether a process with this pid runs (this one does; one owned by another user too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except PermissionError:  # it exists, owned by someone else
        return True
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    return True


STAGING = ".onnxgate-"
"""The start of a staging folder's name: ``.onnxgate-<kind>-<pid>-<random>``, inside the folder
a command fills (``deploy web``, ``deploy mobile``). Its files are renamed into place when they
are complete and the staging folder removed; one left by a killed run is recognised by its pid,
which no longer runs, and removed by the next run (see :func:`stale_staging`)."""

_STAGING = re.compile(rf"^{re.escape(STAGING)}[a-z]+-(?P<pid>\d+)-.+$")


def stale_staging(folder: str | os.PathLike[str]) -> list[Path]:
    """The staging folders in ``folder`` left by runs that no longer run (killed, say)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [(name, _STAGING.match(name)) for name in names]
    return sorted(
        Path(folder, name) for name, match in found if match and not alive(int(match["pid"]))
    )


def remove_stale_staging(folder: str | os.PathLike[str]) -> None:
    """Remove the staging folders in ``folder`` that killed runs left."""
    for left in stale_staging(folder):
        log.info("removing %s, left by an interrupted run", left)
        shutil.rmtree(left, ignore_errors=True)


def fresh_folder(
    out: Path, *, what: str = "", holds: str = "it holds exactly one deployment"
) -> Path:
    """``out``, when it is new or an empty folder: what is in it is exactly one deployment.

    Checked before any work: the nearest folder that exists on the way to ``out`` must be a
    folder this process may write in. Staging folders of killed runs in ``out`` are removed
    first (they are no one's work). ``what`` names the folder in messages (``the run folder
    ``), ``holds`` says why it must be empty.

    Raises:
        ConfigError: ``out``, or a folder on the way to it, is a file; ``out`` is a folder
            that is not empty.
        ResourceExhausted: the folder that would hold ``out`` may not be written (exit 3).

    The errors name the setting through ``setting('out')`` as they are raised and declare no
    ``field`` for ``renamed`` to rewrite afterwards: the word ``out`` in the user's path
    (``-o out``, ``../out/mnist``) is a path, not the setting. Where the interface has no such
    setting (a gate's step writes in its run folder: ``offered``), the hint names none.
    """
    other = f"Give another {setting('out')}" if offered("out") else ""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{what}{out} is a file.", hint=f"{other or 'Move or remove it'}.")
    if out.is_dir():
        remove_stale_staging(out)
        if any(out.iterdir()):
            raise ConfigError(
                f"{what}{out} exists and is not empty.",
                hint=f"{other}, or remove it: {holds}." if other else f"Remove it: {holds}.",
            )
    nearest = out
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise ConfigError(
            f"{out}: {nearest} is a file, not a folder.",
            hint=f"{other or f'Move or remove {nearest}'}.",
        )
    if not os.access(nearest, os.W_OK | os.X_OK):
        denied = resource_error(PermissionError(errno.EACCES, os.strerror(errno.EACCES)), out)
        assert denied is not None
        raise denied
    return out


@contextmanager
def staging(out: Path, kind: str) -> Iterator[Path]:
    """A staging folder inside ``out`` (made if missing), removed when the block ends.

    The caller renames the finished files from it into ``out``: ``out`` itself, which may be
    the caller's working folder, is never replaced. When ``out`` was made here and nothing was
    renamed into it, it is removed again: a run that wrote nothing leaves nothing.
    """
    made = not out.exists()
    with exhaustion_as_error(out):
        out.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(out)
        folder = Path(tempfile.mkdtemp(prefix=f"{STAGING}{kind}-{os.getpid()}-", dir=out))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if made:
            with suppress(OSError):  # not empty: the files are in place
                out.rmdir()
