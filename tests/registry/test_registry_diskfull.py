"""A full disk is the user's to fix (exit 3, naming the path), and loses nothing.

The registry lives on a 2 MB tmpfs (tests/tmpfs.py) filled to exactly 0 bytes free (or to a few
free pages); PostgreSQL meets its own full disk through a tablespace on a 4 MB one.
Mounting needs root: where it is refused the tests skip, except under ``CI=true``, where they
fail, since CI must prove this path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import event
from typer.testing import CliRunner

from onnxgate.cli import app
from onnxgate.errors import ExitCode, ResourceExhausted
from onnxgate.registry import open_registry
from tmpfs import fill

from ._registry_helpers import gate_report, make_files, sha

runner = CliRunner()


def cli(db: Path, store: Path, *args: str):
    return runner.invoke(
        app, ["registry", *args, "--registry", f"sqlite:///{db}", "--store", str(store)]
    )


def versions(db: Path, store: Path) -> list[int]:
    with open_registry(f"sqlite:///{db}", store) as reg:
        return [v.number for v in reg.versions("bert")]


def test_a_full_disk_is_exit_3_and_read_only_commands_still_work(disk, tmp_path):
    db, store = disk / "registry.db", disk / "store"
    files = make_files(tmp_path / "v1", size=4096)
    with open_registry(f"sqlite:///{db}", store) as reg:
        reg.register("bert", files, gate_report(files), alias="champion")
    listed = cli(db, store, "list").output
    checked = cli(db, store, "fsck").output
    shown = cli(db, store, "show", "bert@champion", "-f", "json").output

    filler = fill(disk)
    big = make_files(tmp_path / "v2", size=8192)
    with pytest.raises(ResourceExhausted) as caught:
        with open_registry(f"sqlite:///{db}", store) as reg:
            reg.register("bert", big, gate_report(big))
    assert caught.value.exit_code == ExitCode.ENVIRONMENT
    # the database's WAL index or the store, whichever the registration met full first
    assert f"no space left on the device holding {disk}/" in caught.value.message
    assert f"Free space on the filesystem holding {disk}" in str(caught.value.hint)

    # reading needs no byte: the same output as before the disk filled
    for args, before in (
        (("list",), listed),
        (("fsck",), checked),
        (("show", "bert@champion", "-f", "json"), shown),
    ):
        result = cli(db, store, *args)
        assert result.exit_code == 0, (args, result.output)
        assert result.output == before
    out = tmp_path / "fetched"  # another disk
    result = cli(db, store, "fetch", "bert@champion", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "bert.onnx").read_bytes() == files["model"].read_bytes()

    filler.unlink()
    with open_registry(f"sqlite:///{db}", store) as reg:
        assert reg.register("bert", big, gate_report(big)).number == 2
    assert versions(db, store) == [1, 2]
    assert cli(db, store, "fsck").exit_code == 0


def test_a_store_that_fills_up_mid_registration_leaves_nothing_half_written(disk, tmp_path):
    db, store = disk / "registry.db", disk / "store"
    first = make_files(tmp_path / "v1", size=4096)
    with open_registry(f"sqlite:///{db}", store) as reg:
        reg.register("bert", first, gate_report(first))
    blobs = sorted(p.name for p in (store / "sha256").rglob("*") if p.is_file())

    filler = fill(disk, leave=128 * 1024)  # the database opens; the 512 KB model cannot fit
    big = make_files(tmp_path / "v2", size=512 * 1024)
    with pytest.raises(ResourceExhausted) as caught:
        with open_registry(f"sqlite:///{db}", store) as reg:
            reg.register("bert", big, gate_report(big))
    assert caught.value.exit_code == ExitCode.ENVIRONMENT
    assert str(store) in caught.value.message
    assert "nothing was half-written" in str(caught.value.hint)
    assert list((store / "tmp").iterdir()) == []  # the temporary blob is gone
    # blobs stored before the model met the full disk are whole, unreferenced ("orphans")
    stored = [p for p in (store / "sha256").rglob("*") if p.is_file()]
    assert set(blobs) < {p.name for p in stored}
    assert all(sha(p) == p.name for p in stored)
    assert versions(db, store) == [1]

    filler.unlink()
    with open_registry(f"sqlite:///{db}", store) as reg:
        assert reg.register("bert", big, gate_report(big)).number == 2
    assert versions(db, store) == [1, 2]
    result = cli(db, store, "fsck", "-f", "json")
    assert result.exit_code == 0, result.output


def test_the_cli_says_which_path_to_free_with_exit_3(disk, tmp_path):
    db, store = disk / "registry.db", disk / "store"
    files = make_files(tmp_path / "v1")
    with open_registry(f"sqlite:///{db}", store) as reg:
        reg.register("bert", files, gate_report(files))
    fill(disk)
    # promote writes: the database cannot even size its WAL index
    result = cli(db, store, "promote", "bert@1", "champion", "-f", "json")
    assert result.exit_code == 3, result.output
    assert '"error": "resource-exhausted"' in result.output
    assert str(disk) in result.output


def test_a_registration_whose_database_fills_up_rolls_back(tmp_path):
    """SQLite's own "database or disk is full" (a page limit): no row of the version stays."""
    with open_registry(str(tmp_path / "registry.db"), tmp_path / "store") as reg:
        files = make_files(tmp_path / "v1")
        reg.register("bert", files, gate_report(files))
        pages = reg.engine.connect().exec_driver_sql("PRAGMA page_count").scalar()
        reg.engine.dispose()

        @event.listens_for(reg.engine, "connect")
        def _cap(dbapi_connection, _record):
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

        big = make_files(tmp_path / "v2")
        # more pages than the file may grow by
        report = gate_report(big).model_copy(update={"config": {"padding": "x" * 200_000}})
        with pytest.raises(ResourceExhausted, match=str(Path(tmp_path / "registry.db"))):
            reg.register("bert", big, report)
    with open_registry(str(tmp_path / "registry.db"), tmp_path / "store") as reg:
        assert [v.number for v in reg.versions("bert")] == [1]
        assert reg.register("bert", big, gate_report(big)).number == 2


@pytest.mark.postgres
def test_a_postgres_server_whose_disk_fills_up_is_exit_3_and_rolls_back(
    pg_disk, pg_admin, tmp_path
):
    """The server's own ENOSPC (SQLSTATE 53100, "could not extend file"), met on a tablespace on
    a full tmpfs: exit 3 naming the server, the transaction rolled back, the next number gapless."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from .conftest import pg_schema_url

    space = pg_disk / "pg"
    space.mkdir()
    shutil.chown(space, "postgres", "postgres")
    tablespace = f"onnxgate_full_{os.getpid()}"
    admin = pg_admin.engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE TABLESPACE {tablespace} LOCATION '{space}'"))
    schema_url = make_url(pg_schema_url(pg_admin))
    schema = schema_url.query["options"].removeprefix("-csearch_path=")
    url = schema_url.update_query_dict(
        {"options": f"-csearch_path={schema} -cdefault_tablespace={tablespace}"}
    ).render_as_string(hide_password=False)
    store = tmp_path / "store"
    try:
        first = make_files(tmp_path / "v1")
        with open_registry(url, store) as reg:
            reg.register("bert", first, gate_report(first))
        filler = fill(pg_disk)
        big = make_files(tmp_path / "v2")
        # rows bigger than what is left in the pages the first version filled
        report = gate_report(big).model_copy(update={"config": {"padding": "x" * 200_000}})
        with pytest.raises(ResourceExhausted) as caught:
            with open_registry(url, store) as reg:
                reg.register("bert", big, report)
        assert caught.value.exit_code == ExitCode.ENVIRONMENT
        assert "has no disk space left" in caught.value.message
        assert "127.0.0.1" in caught.value.message
        assert "nothing was written" in str(caught.value.hint)
        with open_registry(url, store) as reg:  # reading needs no byte on the server's disk
            assert [v.number for v in reg.versions("bert")] == [1]
        result = runner.invoke(
            app,
            [
                "registry",
                "promote",
                "bert@1",
                "champion",
                "--registry",
                url,
                "--store",
                str(store),
                "-f",
                "json",
            ],
        )
        assert result.exit_code in (0, 3), result.output  # an alias row may fit in a page
        filler.unlink()
        with open_registry(url, store) as reg:
            assert reg.register("bert", big, report).number == 2
            assert [v.number for v in reg.versions("bert")] == [1, 2]
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            conn.execute(text(f"DROP TABLESPACE IF EXISTS {tablespace}"))
