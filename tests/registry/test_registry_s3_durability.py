"""The registry's concurrency and SIGKILL properties with PostgreSQL + an S3 bucket (SeaweedFS).

Sized to prove the properties, not to measure them: 4 processes × 5 registrations (unique,
gapless, every blob stored once) and 8 kills (fsck clean after each, and sha256 at the end). The
full campaigns (8 × 25, 50 kills, with rates) are ``python benchmarks/registry_load.py --backends
postgres+s3`` (benchmarks/results/registry.md).

Children are spawned, not forked: obstore's client (a Rust runtime with threads) hangs in a
child forked from a process that used it, and the parent opens the registry between trials.
"""

from __future__ import annotations

import os
import random
import signal
import time
from multiprocessing import get_context

import pytest

from onnxgate.registry import open_registry

from ._registry_helpers import gate_report, make_files
from .conftest import pg_schema_url
from .test_registry_durability import _register_forever

pytestmark = pytest.mark.postgres

SPAWN = get_context("spawn")
PROCESSES, EACH = 4, 5
TRIALS = 8


def _register_timed(url, store, folder, barrier, results):
    """EACH registrations after the barrier: (numbers, start, end), or the traceback."""
    import traceback
    from pathlib import Path

    try:
        reg = open_registry(url, store)
        barrier.wait()
        started, numbers = time.time(), []
        for i in range(EACH):
            files = make_files(Path(folder) / str(i))
            alias = "champion" if i % 5 == 0 else None
            numbers.append(reg.register("bert", files, gate_report(files), alias=alias).number)
        reg.close()
        results.put((numbers, started, time.time()))
    except BaseException:
        results.put(traceback.format_exc())


def test_concurrent_registrations_on_s3_are_unique_gapless_and_stored_once(
    pg_admin, s3_env, tmp_path
):
    url = pg_schema_url(pg_admin)
    open_registry(url, s3_env).close()  # migrated once, before the children
    barrier, results = SPAWN.Barrier(PROCESSES), SPAWN.Queue()
    procs = [
        SPAWN.Process(
            target=_register_timed, args=(url, s3_env, tmp_path / f"w{k}", barrier, results)
        )
        for k in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=300) for _ in procs]
    finally:  # a child that hangs is not left behind
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [o for o in outcomes if isinstance(o, str)]
    assert not errors, errors[0]
    total = PROCESSES * EACH
    assert sorted(n for o in outcomes for n in o[0]) == list(range(1, total + 1))
    seconds = max(o[2] for o in outcomes) - min(o[1] for o in outcomes)
    with open_registry(url, s3_env) as reg:
        report = reg.fsck()
    assert report.consistent, report.problems
    assert (report.versions, report.artefacts, report.blobs) == (total, 3 * total, 3 * total)
    print(f"\n{total} registrations on PostgreSQL + S3: {total / seconds:.1f} per second")


def test_sigkill_during_registrations_on_s3_leaves_fsck_clean(pg_admin, s3_env, tmp_path):
    url = pg_schema_url(pg_admin)
    open_registry(url, s3_env).close()
    rng = random.Random(12)
    last = leftovers = 0
    for trial in range(TRIALS):
        ready = SPAWN.Event()
        child = SPAWN.Process(target=_register_forever, args=(url, s3_env, tmp_path / "src", ready))
        child.start()
        assert ready.wait(60), f"trial {trial}: the child did not start"
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL, f"trial {trial}: child ended {child.exitcode}"
        with open_registry(url, s3_env) as reg:
            report = reg.fsck(rehash=False)
            assert report.consistent, (trial, report.problems)
            assert report.versions >= last
            last = report.versions
            leftovers += bool(report.orphans)
            reg.fsck(remove=True, min_age=0, rehash=False)
    with open_registry(url, s3_env) as reg:
        report = reg.fsck()
    assert report.consistent, report.problems
    assert report.versions == last
    print(f"\n{TRIALS} kills on PostgreSQL + S3: {last} versions, {leftovers} left orphans")
