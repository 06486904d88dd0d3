"""The artefact store in an S3-compatible bucket: ``--store s3://bucket/prefix``.

The client is `obstore <https://developmentseed.org/obstore/>`_ (the ``s3`` extra), Python
bindings of the Rust ``object_store`` crate, chosen over fsspec/s3fs for what a registry relies
on: a native conditional PUT (``mode="create"``, ``If-None-Match: *``, which raises
``AlreadyExistsError`` on an existing key), multipart uploads, retries with backoff and
timeouts in the client itself, and no aiobotocore/botocore version pins to fight with.

Endpoint, region and credentials come from the usual AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``; ``AWS_ALLOW_HTTP=true`` for an ``http://`` endpoint), or the instance's
or container's role. obstore does not read ``~/.aws/config`` or ``~/.aws/credentials``
(profiles, ``AWS_PROFILE``): export the variables instead.

Layout as in the folder store: ``prefix/sha256/ab/<digest>``. A blob of at most
:data:`SINGLE_PUT_LIMIT` bytes is uploaded with one create-only PUT, a larger one in parts
(completed only when every part is sent, so nothing appears before). Either way the upload
reads the file through a hashing reader that fails before the last chunk leaves when the bytes
are not the digest the file was named by: a file changed while being stored raises
:class:`ArtefactCorrupt` and leaves no object. A create that finds the key taken (a concurrent
registration of identical bytes) checks the existing object's size and uses it.

Objects cannot have their modification time refreshed, so a registration that relies on a blob
already present writes ``prefix/lease/<digest>`` (its body the time) instead; ``fsck --remove``
removes an orphan only when the blob and its lease are both older than the grace period, and
removes leases past it. Every read re-checks the sha256.

Failures of the service (403, 5xx, a refused connection, a timeout) raise
:class:`RegistryUnreachable` (exit 3) naming the bucket and endpoint; credentials never appear
in a message: the secret key and session token are scrubbed from whatever the client says.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from onnxgate._pathtext import mask_uri
from onnxgate.errors import ArtefactCorrupt, ConfigError, ExtraMissing, RegistryUnreachable
from onnxgate.registry._store import (
    CHUNK,
    DIGEST,
    Blob,
    StoredObject,
    land,
    sha256_path,
    store_mask,
)

log = logging.getLogger(__name__)

SINGLE_PUT_LIMIT = 256 << 20
"""Blobs up to this size go up in one conditional PUT; larger ones in parts."""
PART_SIZE = 16 << 20
ENV_TIMEOUT = "ONNXGATE_S3_TIMEOUT"
ENV_RETRIES = "ONNXGATE_S3_RETRIES"
CONNECT_TIMEOUT_S = 5.0
SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(?P<prefix>[^?#]*))?$")


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ConfigError(f"${name}={raw!r} is not a number of seconds (or retries) ≥ 0.")
    return value


def scrub(message: str) -> str:
    """``message`` on one line, without the secret key or session token of the environment."""
    for name in SECRETS:
        secret = os.environ.get(name)
        if secret:
            message = message.replace(secret, "***")
    return " ".join(mask_uri(message).split())


class _HashingChunks:
    """The file's chunks, failing before the last one when they are not ``sha256``'s bytes."""

    def __init__(self, handle: BinaryIO, source: Path, sha256: str, size: int) -> None:
        self.handle, self.source, self.sha256, self.size = handle, source, sha256, size

    def __iter__(self) -> Iterator[bytes]:
        digest = hashlib.sha256()
        copied = 0
        block = self.handle.read(CHUNK)
        while block:
            following = self.handle.read(CHUNK)
            digest.update(block)
            copied += len(block)
            if not following and (digest.hexdigest() != self.sha256 or copied != self.size):
                raise ArtefactCorrupt(
                    f"{self.source} changed while it was being stored (sha256 "
                    f"{self.sha256[:12]}… then {digest.hexdigest()[:12]}…).",
                    hint="Register files that nothing else is writing.",
                )
            yield block
            block = following
        if not copied and self.size:  # emptied since it was hashed: no chunk to fail on
            raise ArtefactCorrupt(
                f"{self.source} changed while it was being stored (sha256 "
                f"{self.sha256[:12]}… then 0 bytes).",
                hint="Register files that nothing else is writing.",
            )


class S3Store:
    """Blobs named by their sha256 in an S3 bucket, under a prefix."""

    def __init__(self, url: str) -> None:
        match = URL.match(url.rstrip("/"))
        if match is None:
            raise ConfigError(
                f"{store_mask(url)} is not an S3 store URL.",
                hint="Use s3://BUCKET or s3://BUCKET/PREFIX (bucket names: 3 to 63 lowercase "
                "letters, digits, dots and hyphens); credentials go in AWS_* variables, never "
                "in the URL.",
            )
        try:
            from obstore.store import S3Store as Client
        except ModuleNotFoundError as err:
            raise ExtraMissing(
                f"the artefact store {url} needs obstore, which is not installed.", extra="s3"
            ) from err
        self.bucket = match["bucket"]
        self.prefix = (match["prefix"] or "").strip("/")
        self.url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        timeout = _seconds(ENV_TIMEOUT, 60.0)
        retries = int(_seconds(ENV_RETRIES, 3))
        client: dict[str, Any] = {
            "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
            "timeout": timedelta(seconds=timeout),
        }
        if self.endpoint:
            self._check_endpoint(self.endpoint)
        if self.endpoint and self.endpoint.startswith("http://"):
            if os.environ.get("AWS_ALLOW_HTTP", "").lower() not in ("1", "true", "yes"):
                raise ConfigError(
                    f"AWS_ENDPOINT_URL={store_mask(self.endpoint)!r} is plain http://, which the "
                    f"S3 client refuses unless AWS_ALLOW_HTTP=true.",
                    hint="Set AWS_ALLOW_HTTP=true for a service on a network you trust (a local "
                    "SeaweedFS or MinIO), or use the service's https:// URL.",
                )
            client["allow_http"] = True
        retry = {
            "max_retries": retries,
            "retry_timeout": timedelta(seconds=timeout * (retries + 1)),
            "backoff": {
                "init_backoff": timedelta(milliseconds=200),
                "max_backoff": timedelta(seconds=5),
                "base": 2,
            },
        }
        try:
            self._client = Client(
                self.bucket,
                prefix=self.prefix or None,
                client_options=client,  # type: ignore[arg-type]
                retry_config=retry,  # type: ignore[arg-type]
            )
        except Exception as err:  # obstore's configuration errors (a malformed endpoint)
            raise ConfigError(
                f"cannot configure the artefact store {self.location}: {scrub(str(err))[:300]}",
                hint="Check AWS_ENDPOINT_URL and AWS_REGION.",
            ) from err

    @staticmethod
    def _check_endpoint(endpoint: str) -> None:
        """An http(s) URL with a host: anything else makes obstore panic on the first request."""
        parts = urlsplit(endpoint)
        try:
            parts.port  # noqa: B018 (raises on a malformed port)
            good = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            good = False
        if not good or any(c.isspace() for c in endpoint):
            raise ConfigError(
                f"AWS_ENDPOINT_URL={store_mask(endpoint)!r} is not an http:// or https:// URL.",
                hint="Set AWS_ENDPOINT_URL to the service's URL (http://HOST:PORT), or unset it "
                "for AWS itself.",
            )

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """``s3://bucket/prefix`` and the endpoint, when one is set (no credentials)."""
        where = f" at {store_mask(self.endpoint)}" if self.endpoint else ""
        return f"{self.url}{where}"

    def __repr__(self) -> str:
        return f"S3Store({self.location!r})"

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Errors of the service as :class:`RegistryUnreachable`, credentials scrubbed."""
        from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError

        try:
            yield
        except (ArtefactCorrupt, FileNotFoundError, AlreadyExistsError, PreconditionError):
            raise  # the caller's to judge
        except (BaseError, OSError) as err:
            raise self._unreachable(doing, err) from None

    def _unreachable(self, doing: str, err: BaseException) -> RegistryUnreachable:
        from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

        text = scrub(str(err))
        detail = text.split(" Debug source:")[0]
        detail = re.sub(r"<\?xml.*", "", detail).strip().rstrip(":").strip()
        if len(detail) > 300:
            detail = detail[:299] + "…"
        if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
            hint = (
                f"Create the bucket first (`aws s3 mb s3://{self.bucket}`, with "
                "--endpoint-url for a non-AWS service), or name another in --store / "
                "$ONNXGATE_STORE."
            )
        elif isinstance(err, PermissionDeniedError | UnauthenticatedError) or " 403 " in text:
            hint = (
                "The service refused the credentials: check AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), and that they may read and "
                f"write s3://{self.bucket}."
            )
        else:
            hint = (
                "Check the service is running and AWS_ENDPOINT_URL / AWS_REGION; "
                f"${ENV_TIMEOUT} and ${ENV_RETRIES} set the timeout and retries."
            )
        return RegistryUnreachable(
            f"the artefact store {self.location} failed while {doing}: {detail}", hint=hint
        )

    def _key(self, sha256: str) -> str:
        if not DIGEST.match(sha256):
            raise ConfigError(f"{sha256!r} is not a sha256 digest (64 lowercase hex digits).")
        return f"sha256/{sha256[:2]}/{sha256}"

    def _head(self, key: str) -> dict[str, Any] | None:
        import obstore

        try:
            with self._guard(f"reading {key}"):
                return dict(obstore.head(self._client, key))
        except FileNotFoundError:
            return None

    def _clock(self) -> Callable[[], float]:
        """The service's time (seconds since the epoch) from now on, for fsck's ages.

        Ages compare the service's timestamps with "now": a host whose clock runs an hour ahead
        would see a fresh lease as past the grace period, and remove a blob a registration
        relies on. So "now" is read off the service once per listing, from the timestamp of an
        object written for it (``clock/<random>``, deleted at once; ``fsck --remove`` removes
        one a killed fsck left); this host's clock is used, with a warning, only where that
        write is refused (read-only credentials).
        """
        import obstore

        key = f"clock/{uuid.uuid4().hex}"
        try:
            with self._guard(f"writing {key}"):
                obstore.put(self._client, key, b"")
                stamp = obstore.head(self._client, key)["last_modified"].timestamp()
                obstore.delete(self._client, key)
        except RegistryUnreachable as err:
            log.warning("ages measured on this host's clock: %s", err.message)
            return time.time
        except FileNotFoundError:  # gone before it was read: another `fsck --remove --min-age 0`
            log.warning("ages measured on this host's clock: %s vanished", self._where(key))
            return time.time
        start = time.monotonic()
        return lambda: stamp + (time.monotonic() - start)

    def _where(self, key: str) -> str:
        return f"{self.url}/{key}"

    # -- the ArtefactStore protocol ------------------------------------------------------------

    def ensure(self) -> None:
        """Check the bucket answers (one listing request).

        Raises:
            RegistryUnreachable: the bucket is missing, refuses the credentials, or the service
                does not answer.
        """
        import obstore

        with self._guard("listing the bucket"):
            try:
                next(iter(obstore.list(self._client, "sha256/", chunk_size=1)), None)
            except FileNotFoundError as err:
                raise self._unreachable("listing the bucket", err) from None

    def has(self, sha256: str, size: int | None = None) -> bool:
        """Whether the blob exists (with ``size`` bytes, when given)."""
        found = self.size(sha256)
        return found is not None and (size is None or found == size)

    def size(self, sha256: str) -> int | None:
        """The blob's size, None when it is missing."""
        meta = self._head(self._key(sha256))
        return None if meta is None else int(meta["size"])

    def put(self, source: Path) -> Blob:
        """Put a file's bytes in the bucket (once) and return their digest.

        Raises:
            ArtefactCorrupt: the file changed while it was being stored (no object is left), or
                an object of the digest's name has another size.
            ConfigError: the file cannot be read.
            RegistryUnreachable: the service failed (after its retries).
        """
        try:
            sha256, size = sha256_path(source)
        except OSError as err:
            raise ConfigError(f"cannot read artefact {source}: {err.strerror}.") from err
        key = self._key(sha256)
        present = self.size(sha256)
        if present == size:
            self._lease(sha256)
            return Blob(sha256, size, written=False)
        if not self._upload(source, key, sha256, size, replace=present is not None):
            present = self.size(sha256)
            if present != size:
                raise ArtefactCorrupt(
                    f"{self._where(key)} exists with {present} bytes, not {size}: the blob "
                    "another registration stored is damaged.",
                    hint="Run `onnxgate registry fsck`, then register again.",
                )
            self._lease(sha256)
            return Blob(sha256, size, written=False)
        log.debug("stored %s (%d bytes) from %s in %s", sha256, size, source, self.url)
        return Blob(sha256, size, written=True)

    def _upload(self, source: Path, key: str, sha256: str, size: int, *, replace: bool) -> bool:
        """Upload ``source``; False when a create-only PUT found the key taken meanwhile."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            with source.open("rb") as handle, self._guard(f"writing {key}"):
                chunks = _HashingChunks(handle, source, sha256, size)
                if size > SINGLE_PUT_LIMIT:  # parts; the upload completes only at the end
                    obstore.put(
                        self._client, key, iter(chunks), use_multipart=True, chunk_size=PART_SIZE
                    )
                else:
                    obstore.put(
                        self._client,
                        key,
                        iter(chunks),
                        mode="overwrite" if replace else "create",
                        use_multipart=False,
                    )
        except (AlreadyExistsError, PreconditionError):
            return False
        except OSError as err:
            if isinstance(err, FileNotFoundError | PermissionError) and err.filename:
                raise ConfigError(f"cannot read artefact {source}: {err.strerror}.") from err
            raise
        return True

    def _lease(self, sha256: str) -> None:
        """Mark the blob as relied on now (``fsck --remove`` spares it for the grace period)."""
        import obstore

        key = f"lease/{sha256}"
        with self._guard(f"writing {key}"):
            obstore.put(self._client, key, datetime.now(UTC).isoformat().encode())

    def _chunks(self, key: str) -> Iterator[bytes]:
        import obstore

        with self._guard(f"reading {key}"):
            try:
                result = obstore.get(self._client, key)
            except FileNotFoundError as err:
                raise ArtefactCorrupt(
                    f"blob {key.rsplit('/', 1)[-1]} is missing from the store {self.location}.",
                    hint="Run `onnxgate registry fsck` to list every damaged version.",
                ) from err
            for block in result.stream(min_chunk_size=CHUNK):
                yield bytes(block)

    def hash(self, sha256: str) -> str | None:
        """The sha256 of the object's bytes, None when it is missing."""
        digest = hashlib.sha256()
        try:
            for block in self._chunks(self._key(sha256)):
                digest.update(block)
        except ArtefactCorrupt:
            return None
        return digest.hexdigest()

    def read_bytes(self, sha256: str, limit: int) -> bytes | None:
        """The object's bytes when present, intact and at most ``limit`` bytes long."""
        size = self.size(sha256)
        if size is None or size > limit:
            return None
        try:
            data = b"".join(self._chunks(self._key(sha256)))
        except ArtefactCorrupt:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def copy_out(self, sha256: str, size: int, target: Path) -> None:
        """Download the blob to ``target`` atomically, checking its sha256 and size.

        Raises:
            ArtefactCorrupt: the object is missing or its bytes are not ``sha256``'s.
            RegistryUnreachable: the service failed.
        """
        land(target, self._chunks(self._key(sha256)), sha256, size, self.location)

    def _listing(self, prefix: str) -> Iterator[dict[str, Any]]:
        import obstore

        with self._guard(f"listing {prefix}"):
            for batch in obstore.list(self._client, prefix):
                yield from batch

    def list_blobs(self) -> Iterator[StoredObject]:
        """Every object under ``sha256/``; a blob's age counts from its lease too.

        The lease is read as each blob is yielded (fsck removes it right after), not listed
        once up front: a registration that leases the blob while the listing runs is seen.
        """
        now = self._clock()
        for meta in self._listing("sha256/"):
            path = meta["path"]
            parts = path.split("/")
            name = parts[-1]
            where = f"{self.url}/{path}"
            well_formed = len(parts) == 3 and bool(DIGEST.match(name)) and parts[1] == name[:2]
            if not well_formed:
                yield StoredObject(name, where, int(meta["size"]), 0.0, blob=False)
                continue
            lease = self._head(f"lease/{name}")
            leased = lease["last_modified"].timestamp() if lease else 0.0
            newest = max(meta["last_modified"].timestamp(), leased)
            yield StoredObject(name, where, int(meta["size"]), max(0.0, now() - newest))

    def list_leftovers(self) -> Iterator[StoredObject]:
        """The leases and clock probes a killed fsck left (removable past the grace period)."""
        now = self._clock()
        for prefix in ("lease/", "clock/"):
            for meta in self._listing(prefix):
                path = meta["path"]
                age = max(0.0, now() - meta["last_modified"].timestamp())
                name = path.rsplit("/", 1)[-1]
                yield StoredObject(name, f"{self.url}/{path}", 0, age, blob=False)

    def remove(self, item: StoredObject) -> None:
        """Delete a listed object."""
        import obstore

        key = item.where.removeprefix(f"{self.url}/")
        with self._guard(f"removing {key}"):
            obstore.delete(self._client, key)
