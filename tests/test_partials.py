"""Partial files of interrupted writes: recognised by name, reported by inspect, removed when stale."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from models import mlp, save
from onnxgate._fs import (
    STALE_AFTER_S,
    atomic_write_text,
    is_stale,
    partial_files,
    partial_target,
    remove_stale_partials,
)
from onnxgate.cli import app

runner = CliRunner()

WRITER = """
import sys, time
from pathlib import Path
from onnxgate._fs import staged_file
with staged_file(Path(sys.argv[1])) as tmp:
    tmp.write_bytes(b"half a model")
    print("writing", flush=True)
    time.sleep(60)
"""


def killed_writer(target) -> None:
    """A real onnxgate write to ``target``, killed with SIGKILL halfway."""
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "writing"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def test_a_killed_write_leaves_a_partial_file_that_inspect_reports(tmp_path):
    model = save(mlp(), tmp_path / "mlp.onnx")
    killed_writer(tmp_path / "mlp.int8.onnx")
    [partial] = partial_files(tmp_path)
    assert partial_target(partial) == "mlp.int8.onnx"
    assert partial.name.startswith(".mlp.int8.onnx.") and partial.suffix == ".onnx"
    assert is_stale(partial)

    text = runner.invoke(app, ["inspect", str(model)])
    assert text.exit_code == 0, text.output
    assert "leftover:" in text.output and "a partial write of mlp.int8.onnx" in text.output
    assert "the next onnxgate write to this folder removes it" in text.output

    document = json.loads(runner.invoke(app, ["inspect", str(model), "--format", "json"]).stdout)
    [left] = document["leftovers"]
    assert left["target"] == "mlp.int8.onnx" and left["stale"] and left["bytes"] == 12


def test_the_next_write_to_the_folder_removes_stale_partials_only(tmp_path):
    killed_writer(tmp_path / "a.onnx")
    [stale] = partial_files(tmp_path)
    live = tmp_path / f".b.onnx.abcd1234.{os.getpid()}.onnxgate-partial.onnx"
    live.write_bytes(b"being written")  # our own pid: a writer still at work
    foreign = tmp_path / ".c.onnx.tmp"
    foreign.write_bytes(b"not ours")

    atomic_write_text(tmp_path / "other.json", "{}")

    assert not stale.exists()
    assert live.exists() and not is_stale(live)
    assert foreign.exists(), "a file onnxgate did not name is never touched"
    assert partial_files(tmp_path) == [live]


def test_a_partial_older_than_a_day_is_stale_even_if_its_pid_is_alive(tmp_path):
    old = tmp_path / f".m.onnx.abcd1234.{os.getpid()}.onnxgate-partial"
    old.write_bytes(b"x")
    past = time.time() - STALE_AFTER_S - 60
    os.utime(old, (past, past))
    assert is_stale(old)
    assert remove_stale_partials(tmp_path) == [old] and not old.exists()


def test_names_that_merely_look_alike_are_not_partials(tmp_path):
    for name in ("m.onnx", ".m.onnx.tmp", ".m.onnx.x.onnxgate-partial", "m.onnxgate-partial"):
        (tmp_path / name).write_bytes(b"x")
    assert partial_files(tmp_path) == []


def test_verify_mentions_partials_beside_the_model_without_failing(tmp_path):
    model = save(mlp(), tmp_path / "mlp.onnx")
    assert runner.invoke(app, ["contract", "init", str(model)]).exit_code == 0
    killed_writer(tmp_path / "mlp.int8.onnx")

    text = runner.invoke(app, ["verify", str(model)])
    assert text.exit_code == 0, text.output
    assert "leftover:" in text.output and "a partial write of mlp.int8.onnx" in text.output
    document = json.loads(runner.invoke(app, ["verify", str(model), "--format", "json"]).stdout)
    assert document["passed"] and [left["target"] for left in document["leftovers"]] == [
        "mlp.int8.onnx"
    ]


LOCKER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_locked_partial_is_live_even_when_its_pid_means_nothing_here(tmp_path):
    """Found in review: a writer in another container (another pid namespace) looked dead."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    partial = tmp_path / f".m.onnx.abcd1234.{int(dead.stdout)}.onnxgate-partial.onnx"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(partial)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert not is_stale(partial)
        atomic_write_text(tmp_path / "other.json", "{}")
        assert partial.exists(), "a write in progress elsewhere was removed"
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert is_stale(partial), "once the lock is gone, the dead pid judges"
