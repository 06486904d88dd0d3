"""Migrations: from the first revision to head with data in it, head == the ORM, concurrent opens."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from onnxgate.errors import EnvironmentProblem, ExitCode
from onnxgate.registry import _db
from onnxgate.registry._models import Base

from ._registry_helpers import gate_report, make_files

FORK = multiprocessing.get_context("fork")


def _engine(backend):
    url = _db.resolve_url(backend.url)
    return _db.create(url), url


def _tables(engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_the_revisions_are_a_line_from_0001_to_head():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_db.alembic_config(None))
    revisions = [r.revision for r in script.walk_revisions("base", "heads")]
    assert revisions[::-1] == ["0001", "0002", "0003"]
    assert _db.head_revision() == "0003"


def test_upgrade_from_the_first_revision_keeps_and_backfills_data(backend, tmp_path):
    engine, url = _engine(backend)
    _db.migrate(engine, url, "0001")
    assert "model_versions" in _tables(engine)
    assert not {"promotions", "performance"} & _tables(engine)

    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    report = gate_report().model_dump(mode="json")
    t = {
        name: sa.Table(name, sa.MetaData(), autoload_with=engine)
        for name in ("registered_models", "model_versions", "version_artefacts", "gate_runs")
    }
    t["gate_runs"].c.report.type = sa.JSON()
    t["model_versions"].c.source.type = sa.JSON()
    files = make_files(tmp_path / "old")
    with _db.write_connection(engine) as conn, conn.begin():
        conn.execute(
            t["registered_models"].insert(),
            {"name": "old", "last_version": 1, "created_at": when, "updated_at": when},
        )
        model_id = conn.execute(sa.text("SELECT id FROM registered_models")).scalar_one()
        conn.execute(
            t["model_versions"].insert(),
            {
                "model_id": model_id,
                "number": 1,
                "status": "ready",
                "passed": True,
                "artefact_count": 0,
                "source": {"source": "old.onnx"},
                "created_at": when,
                "created_by": "bob",
            },
        )
        version_id = conn.execute(sa.text("SELECT id FROM model_versions")).scalar_one()
        conn.execute(
            t["gate_runs"].insert(),
            {
                "version_id": version_id,
                "passed": True,
                "started": "then",
                "seconds": 1.0,
                "fingerprint": "f00d",
                "config_hash": "c",
                "report": report,
                "recorded_at": when,
            },
        )
        conn.execute(
            sa.text(
                "INSERT INTO aliases (model_id, alias, version_id, updated_at) "
                "VALUES (:m, 'champion', :v, :when)"
            ),
            {"m": model_id, "v": version_id, "when": when},
        )
    engine.dispose()

    with backend.open() as reg:  # migrates to head
        detail = reg.show("old@champion")
        (promotion,) = detail.promotions
        assert promotion.reason == "set before promotions were recorded"
        assert promotion.at == when
        (perf,) = detail.performance
        assert (perf.fingerprint, perf.step, perf.figures["p50_ms"]) == ("f00d", "bench", 1.25)
        assert detail.version.created_by == "bob"
        new = reg.register("old", files, gate_report(files), alias="champion")
        assert new.number == 2
        assert reg.get("old@champion").number == 2
    engine, _ = _engine(backend)
    with engine.connect() as conn:
        assert _db.current_revision(conn) == "0003"
    engine.dispose()


def test_head_matches_the_orm_and_downgrades_to_base(backend):
    backend.open().close()
    engine, url = _engine(backend)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    with _db.write_connection(engine) as conn, conn.begin():
        command.downgrade(_db.alembic_config(conn), "base")
    assert _tables(engine) <= {"alembic_version"}
    _db.migrate(engine, url)
    assert set(Base.metadata.tables) <= _tables(engine)
    engine.dispose()


def test_a_registry_from_a_newer_onnxgate_is_refused(backend):
    backend.open().close()
    engine, _ = _engine(backend)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_future'"))
    engine.dispose()
    with pytest.raises(EnvironmentProblem, match="revision 9999_future") as err:
        backend.open()
    assert err.value.exit_code == ExitCode.ENVIRONMENT


def _open_at_once(url, store, barrier, results):
    from onnxgate.registry import open_registry

    barrier.wait()
    try:
        open_registry(url, store).close()
        results.put("ok")
    except BaseException as err:  # report, don't hang the parent
        results.put(f"{type(err).__name__}: {err}")


def test_many_processes_may_open_a_fresh_registry_at_once(backend):
    n = 8
    barrier, results = FORK.Barrier(n), FORK.Queue()
    procs = [
        FORK.Process(target=_open_at_once, args=(backend.url, backend.store, barrier, results))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["ok"] * n
    engine, _ = _engine(backend)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [("0003",)]
    engine.dispose()
