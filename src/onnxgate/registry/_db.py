"""Engines, URLs, migrations and transactions that survive contention.

SQLite is the embedded default. Several processes (parallel CI gates) write to one file, so the
engine puts it in WAL mode (readers never block the writer), waits for locks (``busy_timeout``),
and starts every writing transaction with ``BEGIN IMMEDIATE``: the write lock is taken before the
first read, so two registrations never both read version N and both try to write N+1, and a
read-then-write transaction never fails half-way with ``SQLITE_BUSY``.

PostgreSQL serialises registrations of one model on the row lock of its counter (an ``UPDATE``
in ``READ COMMITTED``); deadlocks and serialization failures are retried.

``migrate`` brings any database to the head revision on open, under a lock (``BEGIN IMMEDIATE``
on SQLite, an advisory transaction lock on PostgreSQL), so that many processes may open a fresh
registry at once.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit
from urllib.request import url2pathname

import platformdirs
from sqlalchemy import Connection, Engine, create_engine, event, text  # noqa: TID251
from sqlalchemy.engine import URL, make_url  # noqa: TID251
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError  # noqa: TID251

from onnxgate._fs import resource_error
from onnxgate.errors import (
    ConfigError,
    EnvironmentProblem,
    ExtraMissing,
    RegistryUnreachable,
    ResourceExhausted,
)
from onnxgate.registry._store import ArtefactStore, Store, store_mask

log = logging.getLogger(__name__)

T = TypeVar("T")

ENV_URL = "ONNXGATE_REGISTRY"
ENV_STORE = "ONNXGATE_STORE"
BUSY_TIMEOUT_MS = 60_000
CONNECT_TIMEOUT_S = 10
MIGRATION_LOCK = 0x6F6E6E78_67617465 & 0x7FFFFFFFFFFFFFFF
"""PostgreSQL advisory lock key of migrations ("onnxgate")."""
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
WRITE = "onnxgate_write"
"""Execution option marking a connection whose transactions write (``BEGIN IMMEDIATE``)."""


def data_dir() -> Path:
    """Onnxgate's user data folder (the default registry lives there)."""
    return Path(platformdirs.user_data_dir("onnxgate"))


def resolve_url(url: str | None) -> URL:
    """The registry URL: the argument, else ``$ONNXGATE_REGISTRY``, else the user's SQLite file.

    A plain path (no ``://``) is taken as a SQLite file.

    Raises:
        ConfigError: the URL cannot be parsed, or names an in-memory SQLite database.
    """
    chosen = url or os.environ.get(ENV_URL) or None
    if chosen is None:
        return URL.create("sqlite", database=str(data_dir() / "registry.db"))
    if "://" not in chosen:
        return URL.create("sqlite", database=str(Path(chosen).expanduser().resolve()))
    try:
        parsed = make_url(chosen)
    except ArgumentError as err:
        raise ConfigError(
            f"{chosen!r} is not a registry URL.",
            hint="Use a SQLAlchemy URL such as sqlite:////path/registry.db or "
            "postgresql+psycopg://user:password@host:5432/db.",
        ) from err
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed):
            raise ConfigError(
                f"{mask(parsed)}: an in-memory SQLite registry would vanish with the process.",
                hint="Give a file: sqlite:////path/registry.db.",
            )
        parsed = parsed.set(database=str(Path(parsed.database).expanduser().resolve()))
    return parsed


def resolve_store(url: URL, store: str | os.PathLike[str] | None) -> Path:
    """The store folder: the argument, ``$ONNXGATE_STORE``, beside a SQLite file, or user data."""
    chosen = store or os.environ.get(ENV_STORE) or None
    if chosen is not None:
        return Path(chosen).expanduser().resolve()
    if url.get_backend_name() == "sqlite" and url.database:
        db = Path(url.database)
        return db.with_name(f"{db.stem}-store")
    return data_dir() / "store"


def open_store(url: URL, store: str | os.PathLike[str] | None) -> ArtefactStore:
    """The artefact store ``store`` (else ``$ONNXGATE_STORE``) names, for the registry at ``url``.

    ``s3://bucket/prefix`` is an S3 bucket (``_s3store``); ``file:///path`` or a plain path is
    a folder; nothing given is the default folder (see :func:`resolve_store`).

    Raises:
        ConfigError: another URL scheme, or a malformed ``s3://`` URL.
        ExtraMissing: an ``s3://`` store without obstore (the ``s3`` extra).
    """
    chosen = os.fspath(store) if store else os.environ.get(ENV_STORE) or None
    if chosen is not None and "://" in chosen:
        scheme = chosen.split("://", 1)[0].lower()
        if scheme == "s3":
            from onnxgate.registry._s3store import S3Store

            return S3Store(chosen)
        if scheme != "file":
            raise ConfigError(
                f"{store_mask(chosen)} is not an artefact store this onnxgate knows.",
                hint="Give a folder, file:///path or s3://bucket/prefix (--store or "
                f"${ENV_STORE}).",
            )
        chosen = url2pathname(urlsplit(chosen).path)
    return Store(resolve_store(url, chosen))


def mask(url: URL | str) -> str:
    """The URL with its password replaced by ``***``."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        return "<unparsable URL>"
    return parsed.render_as_string(hide_password=True)


def _scrub(message: str, url: URL) -> str:
    if url.password:
        message = message.replace(str(url.password), "***")
    return " ".join(message.split())


def read_only_url(url: URL, *, immutable: bool = False) -> URL:
    """The URL of a SQLite file opened read-only (``mode=ro``), for commands that only read.

    A read-only connection neither converts the file to WAL nor migrates it. ``immutable``
    also tells SQLite nothing changes the file, so it needs no ``-shm`` file either: the one
    way to read a WAL database on a disk with no byte free (see ``open_registry``).
    """
    query = {"mode": "ro", "uri": "true"} | ({"immutable": "1"} if immutable else {})
    return URL.create("sqlite", database=Path(url.database or ".").as_uri(), query=query)


def create(url: URL, *, read_only: bool = False) -> Engine:
    """An engine for ``url`` with the pragmas and timeouts the registry relies on.

    ``read_only``: ``url`` is a :func:`read_only_url`; the file is neither created nor put in
    WAL mode.

    Raises:
        ExtraMissing: the URL names a driver that is not installed (psycopg: the postgres extra).
        ConfigError: the URL names a dialect SQLAlchemy does not know.
    """
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        if not read_only:
            Path(url.database or ".").parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": BUSY_TIMEOUT_MS / 1000}
    elif backend == "postgresql":
        kwargs["pool_pre_ping"] = True
        if "connect_timeout" not in url.query:
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(url, **kwargs)
    except NoSuchModuleError as err:
        raise ConfigError(
            f"{mask(url)}: SQLAlchemy knows no database dialect {url.drivername!r}.",
            hint="Use sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB.",
        ) from err
    except ModuleNotFoundError as err:
        module = (err.name or "?").split(".")[0]
        supported = module == "psycopg"
        raise ExtraMissing(
            f"{mask(url)} needs the database driver {module!r}, which is not installed"
            + (" (the 'postgres' extra)." if supported else "."),
            extra="postgres" if supported else None,  # other drivers are no extra of onnxgate
            hint=None
            if supported
            else f"pip install {module} (or use postgresql+psycopg://, the supported driver)",
        ) from err
    if backend == "sqlite":
        _sqlite_setup(engine, read_only=read_only)
    return engine


def _sqlite_setup(engine: Engine, *, read_only: bool = False) -> None:
    """WAL, a busy timeout, foreign keys, and BEGIN (IMMEDIATE) issued by us, not by pysqlite."""
    writes = ("PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL")

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            for pragma in () if read_only else writes:
                cursor.execute(pragma)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def unreachable(url: URL, err: BaseException, *, opening: bool = True) -> EnvironmentProblem:
    """The error to raise when the database behind ``url`` cannot be opened (or stopped working).

    :class:`ResourceExhausted` when its disk is full (see :func:`exhausted`), else
    :class:`RegistryUnreachable`.
    """
    if (full := exhausted(url, err)) is not None:
        return full
    cause = getattr(err, "orig", None) or err
    detail = _scrub(str(cause).strip() or type(cause).__name__, url)
    if len(detail) > 400:
        detail = detail[:399] + "…"
    hint = (
        "Check the server is running and the URL (host, port, user, database); set it with "
        f"--registry or ${ENV_URL}."
    )
    if url.get_backend_name() == "sqlite":
        hint = f"Check the folder exists and is writable; set another file with --registry or ${ENV_URL}."
    what = "cannot open the registry at" if opening else "the registry at"
    tail = "" if opening else " failed"
    return RegistryUnreachable(f"{what} {mask(url)}{tail}: {detail}", hint=hint)


def exhausted(url: URL, err: BaseException) -> ResourceExhausted | None:
    """The :class:`ResourceExhausted` a database error means, if its disk is full.

    SQLite says "database or disk is full" (``SQLITE_FULL``), or, when not even its ``-shm``
    file can grow, "disk I/O error": that one counts as full only when the database's folder
    has no byte free. PostgreSQL says ``disk_full`` (SQLSTATE 53100) of its own data disk. The
    transaction that met it has rolled back: nothing of it was written.
    """
    cause = getattr(err, "orig", None) or err
    if getattr(cause, "sqlstate", None) == "53100":
        return ResourceExhausted(
            f"the database server of the registry at {mask(url)} has no disk space left: "
            f"{_scrub(str(cause), url)[:300]}",
            hint="Free space on the server's data disk and run again; the transaction was rolled "
            "back, nothing was written.",
        )
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    name = str(getattr(cause, "sqlite_errorname", "") or "")
    message = str(cause).lower()
    full = name.startswith("SQLITE_FULL") or "database or disk is full" in message
    if not full and (name.startswith("SQLITE_IOERR") or "disk i/o error" in message):
        full = free_bytes(Path(url.database).parent) == 0
    if not full:
        return None
    return resource_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), url.database)


def free_bytes(folder: Path) -> int | None:
    """The bytes an unprivileged writer may still use on ``folder``'s filesystem (None: unknown)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def transient(err: DBAPIError) -> bool:
    """Whether a failed transaction may simply be run again (lock contention, a deadlock)."""
    code = getattr(err.orig, "sqlstate", None)
    if code in ("40001", "40P01", "55P03"):
        return True
    text_ = str(err.orig).lower()
    return "database is locked" in text_ or "database is busy" in text_


def retrying(work: Callable[[], T], *, attempts: int = 12) -> T:
    """Run ``work`` (one whole transaction) again when it fails for contention alone."""
    for attempt in range(attempts):
        try:
            return work()
        except OperationalError as err:
            if attempt == attempts - 1 or not transient(err):
                raise
            delay = min(0.02 * 2**attempt, 1.0) * (0.5 + random.random())
            log.debug("transaction retried after %s (attempt %d)", err.orig, attempt + 1)
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """A connection whose transactions take the write lock first (SQLite ``BEGIN IMMEDIATE``)."""
    with engine.connect() as conn:
        conn.execution_options(**{WRITE: True})
        yield conn


def alembic_config(connection: Connection) -> Any:
    """An Alembic ``Config`` for the migrations shipped in this package, bound to ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration revision this onnxgate knows."""
    from alembic.script import ScriptDirectory

    config = alembic_config(None)  # type: ignore[arg-type]
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def migrate(engine: Engine, url: URL, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (head by default), safely from several processes.

    Raises:
        EnvironmentProblem: the database is at a revision this onnxgate does not know (a newer one).
    """
    from alembic import command
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(alembic_config(None))  # type: ignore[arg-type]
    target = script.get_current_head() if revision == "head" else revision

    def read() -> str | None:
        # connecting runs the pragmas; switching a fresh file to WAL can meet another opener's
        # lock without the busy handler's wait, so the read is retried like a transaction
        with engine.connect() as conn:
            found = current_revision(conn)
            conn.rollback()
            return found

    current = retrying(read)
    if current == target:
        return
    if current is not None and current not in {r.revision for r in script.walk_revisions()}:
        raise EnvironmentProblem(
            f"the registry at {mask(url)} is at schema revision {current}, which this onnxgate "
            "does not know (a newer onnxgate migrated it).",
            hint="Upgrade onnxgate to use this registry.",
        )

    def run() -> None:
        with write_connection(engine) as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            try:
                command.upgrade(alembic_config(conn), revision)
            except CommandError as err:
                raise EnvironmentProblem(
                    f"cannot migrate the registry at {mask(url)}: {err}"
                ) from err

    log.info("migrating the registry at %s from %s to %s", mask(url), current or "empty", target)
    retrying(run)
