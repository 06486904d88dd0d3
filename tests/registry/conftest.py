"""Registry fixtures: a fresh SQLite registry, or a fresh PostgreSQL schema, per test.

PostgreSQL comes from ``ONNXGATE_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Every test that uses it gets a schema of
its own (``onnxgate_t<run>_<n>``, reached through ``search_path`` in the URL), and the run drops
all of its schemas at the end. An unreachable server skips those tests with the reason, except
under ``CI=true``, where it fails them: CI must prove the PostgreSQL path.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onnxgate.registry import open_registry

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
RUN = uuid.uuid4().hex[:8]
_counter = itertools.count()


@dataclass(frozen=True)
class Backend:
    """Where a test's registry lives."""

    kind: str
    url: str
    store: Path

    def open(self):
        return open_registry(self.url, self.store)


@dataclass(frozen=True)
class PgAdmin:
    """An engine on the test database, and the schemas this run made there."""

    engine: Any
    schemas: list[str]


def _pg_base() -> str:
    return os.environ.get("ONNXGATE_TEST_POSTGRES_URL", DEFAULT_PG)


@pytest.fixture(scope="session")
def pg_admin():
    """A SQLAlchemy engine on the test server, or skip (fail under CI=true) when unreachable."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import DBAPIError

    url = _pg_base()
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except DBAPIError as err:
        engine.dispose()
        reason = f"PostgreSQL at {url} is unreachable: {' '.join(str(err.orig).split())[:200]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: the PostgreSQL tests must run)")
        pytest.skip(f"{reason}; set ONNXGATE_TEST_POSTGRES_URL or start the server")
    admin = PgAdmin(engine, [])
    yield admin
    with engine.begin() as conn:
        for schema in admin.schemas:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


def pg_schema_url(admin) -> str:
    """A new, empty schema of this run, and the URL whose search_path points at it."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    schema = f"onnxgate_t{RUN}_{next(_counter)}"
    with admin.engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    admin.schemas.append(schema)
    url = make_url(_pg_base()).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request, tmp_path: Path) -> Backend:
    """A fresh, empty registry location on each backend."""
    if request.param == "sqlite":
        return Backend("sqlite", f"sqlite:///{tmp_path / 'registry.db'}", tmp_path / "store")
    url = pg_schema_url(request.getfixturevalue("pg_admin"))
    return Backend("postgres", url, tmp_path / "store")


@pytest.fixture
def registry(backend: Backend) -> Iterator:
    reg = backend.open()
    yield reg
    reg.close()


@pytest.fixture
def s3_env(seaweedfs, monkeypatch):
    """The AWS variables of the SeaweedFS server; returns a fresh s3:// URL (a prefix of its own
    in the session's bucket: every bucket costs SeaweedFS volumes of its own)."""
    for key, value in seaweedfs.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return f"s3://{seaweedfs.buckets[0]}/t{next(_counter)}"
