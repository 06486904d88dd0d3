"""The content-addressed store: every artefact's bytes once, named by their sha256.

Layout: ``STORE/sha256/ab/ab12…ef`` (the full digest, fanned out by its first two hex digits) and
``STORE/tmp/`` for files being written. A blob is written to ``tmp/``, flushed and fsynced, then
renamed to its name, and the folder that gained it is fsynced: a blob under ``sha256/`` is always
whole, and a process killed while writing leaves only a temporary file behind (``fsck`` reports
it). Registration puts every blob in place *before* the database transaction that refers to
them, so a version can never name a blob that is not there; a registration killed in between
leaves unreferenced ("orphan") blobs, which are harmless and removable.

Blobs are read-only (mode 0444) and never rewritten: identical content is stored once. When a
registration finds its blob already present it refreshes the blob's mtime, so that ``fsck
--remove`` (which removes only orphans older than a grace period) cannot delete a blob between
the moment a registration relied on it and the moment its transaction commits.

:class:`ArtefactStore` is what the registry, ``fetch`` and ``fsck`` use of a store; this folder
(:class:`Store`) is one, an S3 bucket (``_s3store.S3Store``) the other. ``_db.open_store`` picks
one by the ``--store`` value.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from onnxgate._fs import exhaustion_as_error, open_partial, resource_error
from onnxgate.errors import ArtefactCorrupt, ConfigError, RegistryUnreachable

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def _copy_hashed(src: BinaryIO, out: BinaryIO) -> tuple[str, int]:
    """Copy ``src`` to ``out`` and fsync it; the sha256 and byte count of what was copied."""
    digest = hashlib.sha256()
    copied = 0
    while block := src.read(CHUNK):
        digest.update(block)
        copied += len(block)
        out.write(block)
    out.flush()
    os.fsync(out.fileno())
    return digest.hexdigest(), copied


DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Blob:
    """A blob in the store: its digest, size and whether this call wrote it."""

    sha256: str
    size: int
    written: bool


@dataclass(frozen=True)
class StoredObject:
    """An entry ``fsck`` lists: a blob (or a stray file), a temporary file or a lease."""

    name: str
    """The last part of its name (a digest, for a blob)."""
    where: str
    """Its path or URL, as reports show it."""
    size: int
    age: float
    """Seconds since it (or its lease) was last written."""
    blob: bool = True
    """A well-formed blob: a digest, in the folder of its first two hex digits."""


@runtime_checkable
class ArtefactStore(Protocol):
    """What the registry, ``fetch`` and ``fsck`` need of a content-addressed store."""

    @property
    def location(self) -> str:
        """Where the store is, for messages and reports (credentials masked)."""
        ...

    def ensure(self) -> None:
        """Make the store usable (create folders; check a bucket answers)."""
        ...

    def put(self, source: Path) -> Blob:
        """Store a file's bytes once; see :meth:`Store.put`."""
        ...

    def has(self, sha256: str, size: int | None = None) -> bool:
        """Whether the blob exists (with ``size`` bytes, when given)."""
        ...

    def size(self, sha256: str) -> int | None:
        """The blob's size, None when it is missing."""
        ...

    def hash(self, sha256: str) -> str | None:
        """The sha256 of the blob's bytes as stored, None when it is missing."""
        ...

    def read_bytes(self, sha256: str, limit: int) -> bytes | None:
        """The blob's bytes, checked against ``sha256``; None when missing, damaged or over ``limit``."""
        ...

    def copy_out(self, sha256: str, size: int, target: Path) -> None:
        """Write the blob to ``target`` atomically, checking its sha256 and size on the way."""
        ...

    def list_blobs(self) -> Iterator[StoredObject]:
        """Every object under ``sha256/``, strays included (``blob=False``)."""
        ...

    def list_leftovers(self) -> Iterator[StoredObject]:
        """Temporary files and leases: what registrations in progress (or killed) leave."""
        ...

    def remove(self, item: StoredObject) -> None:
        """Remove a listed object (fsck's cleanup)."""
        ...


def store_mask(location: str) -> str:
    """A store URL with any user, password or query (a presigned signature) left out."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    user, at, host = parts.netloc.rpartition("@")
    if at:
        host = f"***@{host}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def land(target: Path, chunks: Iterable[bytes], sha256: str, size: int, where: str) -> None:
    """Write ``chunks`` to ``target`` through a temporary file, renamed if they are ``sha256``'s.

    Nothing is left at ``target`` when the bytes do not hash to ``sha256`` or number ``size``.

    Raises:
        ArtefactCorrupt: the bytes are not ``sha256``'s (``where`` names the store).
        ResourceExhausted: ``target``'s disk is full or read-only.
    """
    with exhaustion_as_error(target):
        fd, name = open_partial(target)
        tmp = Path(name)
        try:
            digest = hashlib.sha256()
            copied = 0
            with os.fdopen(fd, "wb") as out:
                for block in chunks:
                    digest.update(block)
                    copied += len(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            got = digest.hexdigest()
            if got != sha256 or copied != size:
                raise ArtefactCorrupt(
                    f"blob {sha256} in {where} is damaged: {copied} bytes with sha256 "
                    f"{got}, expected {size} bytes.",
                    hint="Run `onnxgate registry fsck` to list every damaged version.",
                )
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_path(path: Path) -> tuple[str, int]:
    """The sha256 and size of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


class Store:
    """A folder of blobs named by their sha256."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.blobs = self.root / "sha256"
        self.tmp = self.root / "tmp"

    def ensure(self) -> None:
        """Create the store's folders.

        Raises:
            ResourceExhausted: the disk is full or read-only, or no file can be opened.
            RegistryUnreachable: the folder cannot be created (permissions).
        """
        try:
            self.blobs.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            denied = isinstance(err, PermissionError)  # --store names the way out here
            if not denied and (exhausted := resource_error(err, self.root)) is not None:
                raise exhausted from err
            raise RegistryUnreachable(
                f"cannot create the registry's artefact store at {self.root}: {err.strerror}.",
                hint="Pass --store DIR (or set ONNXGATE_STORE) to a writable folder.",
            ) from err

    def path(self, sha256: str) -> Path:
        """Where the blob of ``sha256`` lives (whether or not it exists)."""
        if not DIGEST.match(sha256):
            raise ConfigError(f"{sha256!r} is not a sha256 digest (64 lowercase hex digits).")
        return self.blobs / sha256[:2] / sha256

    def has(self, sha256: str, size: int | None = None) -> bool:
        """Whether the blob exists (with ``size`` bytes, when given)."""
        try:
            st = self.path(sha256).stat()
        except FileNotFoundError:
            return False
        return size is None or st.st_size == size

    def put(self, source: Path) -> Blob:
        """Put a file's bytes in the store (once) and return their digest.

        The file is hashed first; when the store has the blob already, nothing is copied. Else it
        is copied to a temporary file while being hashed again (so the stored bytes are the
        hashed ones even if the source changed meanwhile), fsynced and renamed into place.

        Raises:
            ArtefactCorrupt: the file changed while it was being stored.
            ConfigError: the file cannot be read.
            ResourceExhausted: the store's disk is full or read-only (the temporary file is
                removed; the store is as it was).
        """
        try:
            sha256, size = sha256_path(source)
        except OSError as err:
            raise ConfigError(f"cannot read artefact {source}: {err.strerror}.") from err
        target = self.path(sha256)
        if self.has(sha256, size):
            with contextlib.suppress(OSError):  # a read-only store still serves reads
                os.utime(target)
            return Blob(sha256, size, written=False)
        self.ensure()
        with exhaustion_as_error(self.root):
            self._write(source, sha256, size, target)
        log.debug("stored %s (%d bytes) from %s", sha256, size, source)
        return Blob(sha256, size, written=True)

    def _write(self, source: Path, sha256: str, size: int, target: Path) -> None:
        """Copy ``source`` to ``tmp/``, check it re-hashes to ``sha256`` and rename it to ``target``."""
        folder = target.parent
        created = not folder.exists()
        folder.mkdir(exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"{sha256[:12]}.", suffix=".tmp", dir=self.tmp)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out, source.open("rb") as src:
                got, copied = _copy_hashed(src, out)
            if got != sha256 or copied != size:
                raise ArtefactCorrupt(
                    f"{source} changed while it was being stored (sha256 {sha256[:12]}… then "
                    f"{got[:12]}…).",
                    hint="Register files that nothing else is writing.",
                )
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(folder)
        if created:
            _fsync_dir(folder.parent)

    @property
    def location(self) -> str:
        """The store's folder."""
        return str(self.root)

    def size(self, sha256: str) -> int | None:
        """The blob's size, None when it is missing."""
        try:
            return self.path(sha256).stat().st_size
        except FileNotFoundError:
            return None

    def hash(self, sha256: str) -> str | None:
        """The sha256 of the blob's bytes, None when it is missing."""
        try:
            return sha256_path(self.path(sha256))[0]
        except FileNotFoundError:
            return None

    def read_bytes(self, sha256: str, limit: int) -> bytes | None:
        """The blob's bytes when present, intact and at most ``limit`` bytes long."""
        size = self.size(sha256)
        if size is None or size > limit:
            return None
        try:
            data = self.path(sha256).read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def copy_out(self, sha256: str, size: int, target: Path) -> None:
        """Write the blob to ``target`` atomically, checking its sha256 and size on the way.

        Raises:
            ArtefactCorrupt: the blob is missing, truncated or its bytes are not ``sha256``'s.
            ResourceExhausted: ``target``'s disk is full or read-only (nothing is left there).
        """
        land(target, self._chunks(sha256), sha256, size, str(self.root))

    def _chunks(self, sha256: str) -> Iterator[bytes]:
        try:
            src = self.path(sha256).open("rb")
        except FileNotFoundError as err:
            raise ArtefactCorrupt(
                f"blob {sha256} is missing from the store {self.root}.",
                hint="Run `onnxgate registry fsck` to list every damaged version.",
            ) from err
        with src:
            while block := src.read(CHUNK):
                yield block

    def list_blobs(self) -> Iterator[StoredObject]:
        """Every file under ``sha256/`` (names that are not digests as ``blob=False``)."""
        for name, path in self.iter_blobs():
            well_formed = bool(DIGEST.match(name)) and path.parent.name == name[:2]
            if not well_formed or not path.is_file():
                yield StoredObject(name, str(path), 0, 0.0, blob=False)
                continue
            yield StoredObject(name, str(path), path.stat().st_size, age_seconds(path))

    def list_leftovers(self) -> Iterator[StoredObject]:
        """Temporary files in ``tmp/``."""
        for path in self.iter_temp():
            yield StoredObject(path.name, str(path), 0, age_seconds(path), blob=False)

    def iter_blobs(self) -> Iterator[tuple[str, Path]]:
        """Every file under ``sha256/`` as (name, path); names that are not digests included."""
        if not self.blobs.is_dir():
            return
        for folder in sorted(self.blobs.iterdir()):
            if not folder.is_dir():
                yield folder.name, folder
                continue
            for path in sorted(folder.iterdir()):
                yield path.name, path

    def iter_temp(self) -> Iterator[Path]:
        """Temporary files left in ``tmp/`` (a write in progress, or one a kill interrupted)."""
        if self.tmp.is_dir():
            yield from sorted(p for p in self.tmp.iterdir())

    def remove(self, item: StoredObject) -> None:
        """Remove a listed blob or temporary file (fsck's cleanup)."""
        path = Path(item.where)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        _fsync_dir(path.parent)


def age_seconds(path: Path) -> float:
    """How long ago a file was last modified (0 when it vanished meanwhile)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return 0.0
