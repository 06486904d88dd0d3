"""ENOSPC, EDQUOT, EROFS, EMFILE and ENFILE at a write point become ResourceExhausted (exit 3).

A fake raises ``OSError(errno.X)`` where the write happens; the tests check the message names the
path and what to do, and that nothing is left half-written.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3

import pytest
import typer
from sqlalchemy.exc import OperationalError

from onnxgate import _fs
from onnxgate._fs import atomic_write_bytes, partial_files, resource_error, staged_file
from onnxgate.cli._common import handles_errors
from onnxgate.errors import ExitCode, ResourceExhausted
from onnxgate.registry import _db
from onnxgate.registry._store import Store


def _raiser(code: int):
    def fail(*_args, **_kwargs):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "Free space on the filesystem holding"),
        (errno.EDQUOT, "quota"),
        (errno.EROFS, "read-only"),
        (errno.EMFILE, "ulimit -n"),
        (errno.ENFILE, "fs.file-max"),
    ],
)
def test_an_atomic_write_that_meets_exhaustion_leaves_the_old_file(
    tmp_path, monkeypatch, code, words
):
    target = tmp_path / "report.json"
    target.write_text("old")
    monkeypatch.setattr(_fs.os, "fsync", _raiser(code))
    with pytest.raises(ResourceExhausted) as caught:
        atomic_write_bytes(target, b"new")
    error = caught.value
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert str(target) in error.message
    assert words in str(error)
    assert error.to_dict()["path"] == str(target)
    assert target.read_text() == "old"
    assert partial_files(tmp_path) == []


def test_emfile_when_the_partial_file_is_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(_fs.tempfile, "mkstemp", _raiser(errno.EMFILE))
    with pytest.raises(ResourceExhausted, match="too many open files") as caught:
        with staged_file(tmp_path / "model.onnx"):
            pass
    assert "ulimit -n" in str(caught.value.hint)


def test_erofs_in_a_staged_files_block(tmp_path):
    target = tmp_path / "model.onnx"
    with pytest.raises(ResourceExhausted, match="the folder is read-only"):
        with staged_file(target) as tmp:
            tmp.write_bytes(b"half")
            raise OSError(errno.EROFS, "Read-only file system", str(tmp))
    assert not target.exists()
    assert partial_files(tmp_path) == []


def test_other_errors_are_not_exhaustion():
    assert resource_error(OSError(errno.ENOENT, "No such file")) is None
    assert resource_error(ValueError("no")) is None
    named = resource_error(OSError(errno.ENOSPC, "No space left on device", "/data/x.onnx"))
    assert named is not None
    assert "/data/x.onnx" in named.message
    assert "filesystem holding /data" in str(named.hint)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_the_store_removes_its_temporary_blob(tmp_path, monkeypatch, code):
    source = tmp_path / "m.onnx"
    source.write_bytes(os.urandom(4096))
    store = Store(tmp_path / "store")
    store.ensure()
    from onnxgate.registry import _store

    monkeypatch.setattr(_store.os, "fsync", _raiser(code))
    with pytest.raises(ResourceExhausted) as caught:
        store.put(source)
    assert str(store.root) in caught.value.message
    assert list(store.tmp.iterdir()) == []
    assert list(store.iter_blobs()) == []


def test_the_cli_boundary_turns_exhaustion_into_exit_3(capsys):
    @handles_errors
    def command(fmt: str = "json") -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/bert/report.html")

    with pytest.raises(typer.Exit) as caught:
        command(fmt="json")
    assert caught.value.exit_code == 3
    document = json.loads(capsys.readouterr().out)
    assert document["error"] == "resource-exhausted"
    assert document["path"] == "/runs/bert/report.html"


def test_sqlite_full_is_exhaustion_naming_the_database(tmp_path):
    url = _db.resolve_url(str(tmp_path / "registry.db"))
    full = OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))
    error = _db.unreachable(url, full, opening=False)
    assert isinstance(error, ResourceExhausted)
    assert str(tmp_path / "registry.db") in error.message
    locked = OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
    assert not isinstance(_db.unreachable(url, locked), ResourceExhausted)


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EACCES, "Permission denied", "/srv/ro/out"),
        PermissionError(errno.EPERM, "Operation not permitted", "/srv/ro/out"),
    ],
)
def test_a_write_the_user_may_not_make_is_their_condition_exit_3(capsys, error):
    @handles_errors
    def command(fmt: str = "json") -> None:
        raise error

    with pytest.raises(typer.Exit) as caught:
        command(fmt="json")
    assert caught.value.exit_code == 3
    document = json.loads(capsys.readouterr().out)
    assert document["path"] == "/srv/ro/out"
    assert "/srv/ro/out" in document["message"] and "folder you may write to" in document["hint"]
