"""Nothing is lost: concurrent registrations, and registrations killed with SIGKILL.

Children are forked (the parent holds no open registry while forking), so each starts in
milliseconds and the tests stay well under a minute on two cores.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import traceback
from pathlib import Path

import sqlalchemy as sa

from onnxgate.registry import open_registry

from ._registry_helpers import gate_report, make_files

FORK = multiprocessing.get_context("fork")
PROCESSES, EACH = 8, 25
TRIALS = 50


def _register_many(url, store, folder, barrier, results):
    try:
        reg = open_registry(url, store)
        barrier.wait()
        numbers = []
        for i in range(EACH):
            files = make_files(Path(folder) / str(i))
            alias = "champion" if i % 5 == 0 else None
            numbers.append(reg.register("bert", files, gate_report(files), alias=alias).number)
        reg.close()
        results.put(numbers)
    except BaseException:
        results.put(traceback.format_exc())


def test_concurrent_registrations_get_unique_gapless_numbers(backend, tmp_path):
    barrier, results = FORK.Barrier(PROCESSES), FORK.Queue()
    procs = [
        FORK.Process(
            target=_register_many,
            args=(backend.url, backend.store, tmp_path / f"w{k}", barrier, results),
        )
        for k in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [o for o in outcomes if isinstance(o, str)]
    assert not errors, errors[0]
    numbers = sorted(n for o in outcomes for n in o)
    total = PROCESSES * EACH
    assert numbers == list(range(1, total + 1))  # unique and gapless
    with backend.open() as reg:
        assert [v.number for v in reg.versions("bert")] == list(range(1, total + 1))
        report = reg.fsck()
        assert report.consistent, report.problems
        assert (report.versions, report.artefacts) == (total, 3 * total)
        assert reg.get("bert@champion").number in numbers
        with reg.engine.connect() as conn:
            rows = {
                table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("gate_runs", "gate_steps", "performance", "promotions")
            }
        assert rows == {
            "gate_runs": total,
            "gate_steps": 3 * total,
            "performance": total,
            "promotions": PROCESSES * (EACH // 5),
        }


def _register_forever(url, store, folder, ready):
    reg = open_registry(url, store)
    ready.set()
    i = 0
    while True:
        files = make_files(Path(folder) / str(i % 3), size=64 * 1024)
        reg.register("bert", files, gate_report(files), alias="champion" if i % 4 == 0 else None)
        i += 1


def test_sigkill_during_registration_leaves_a_consistent_registry(backend, tmp_path):
    rng = random.Random(12)
    backend.open().close()  # migrated before the first child
    leftovers = 0
    last = 0
    for trial in range(TRIALS):
        ready = FORK.Event()
        child = FORK.Process(
            target=_register_forever, args=(backend.url, backend.store, tmp_path / "src", ready)
        )
        child.start()
        assert ready.wait(30), f"trial {trial}: the child did not start"
        time.sleep(rng.uniform(0.0, 0.06))
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL, f"trial {trial}: child ended {child.exitcode}"
        with backend.open() as reg:
            report = reg.fsck(rehash=False)
            assert report.consistent, (trial, report.problems)
            assert report.versions >= last
            last = report.versions
            if report.temp_files or report.orphans:
                leftovers += 1
            # clear leftovers so the next trial's show up on their own
            reg.fsck(remove=True, min_age=0, rehash=False)
    with backend.open() as reg:
        report = reg.fsck()  # every sha256, once at the end
        assert report.consistent, report.problems
        # (on a busy machine every kill may land before a registration completes: last == 0)
        assert report.versions == last
        files = make_files(tmp_path / "after")
        assert reg.register("bert", files, gate_report(files)).number == last + 1
    # evidence that kills landed inside registrations, not only between them
    assert leftovers > 0
