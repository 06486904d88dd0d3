"""Coverage-guided fuzzing of ``inspect``, ``check`` and ``compare`` on mutated corpus models.

    python tools/fuzz_models.py --cases 10000
    python tools/fuzz_models.py --cases 300 --out /tmp/fuzz.json     # a short validation run

Each case picks a corpus model (../shared/corpus or $ONNXGATE_CORPUS), mutates it with the
protobuf-aware mutators the property suite uses (``_onnx_mutations``: opsets, IR version, nodes,
attributes, initializers, value infos, functions, any field; raw bytes at a lower weight), every
choice read from atheris's FuzzedDataProvider, and runs one command on it. The verdict rules are
the suite's (``_fuzz_harness.problems``): exit 0-3, never 4, no traceback, one JSON document with
``--format json``, exit 2 for external data outside the model's folder, no death, no hang.

It prints and writes (``--out``, default benchmarks/results/fuzz_models.json, with a Markdown
twin) the figures: cases, exits by code, exit-4 cases, problems by kind, native aborts with and
without an answer, hangs, peak RSS, wall time, machine, ISA and library versions. Failing cases
are saved, each as the mutated model, its edits, and a Python reproducer that rebuilds it from
the corpus (``--findings``, default under the work folder).

How a case that kills its process is survived (the trade-off)
-------------------------------------------------------------
libFuzzer only learns from coverage counted in its own process. So the cases run *in* the
fuzzing process, with onnxgate's modules instrumented, through the Typer app itself rather than
the console script's ``main``: ``main`` forks a supervised child per command, and the coverage of
a forked child dies with it. A native abort, a segfault or a hang then takes the fuzzing process
down. This script is therefore two processes: a driver (no ``--child``) that starts the fuzzer
(``--child``), and when the fuzzer dies, reads which case was in flight (the fuzzer writes it to
``current.json`` before running it), replays that case through the real entry point in a worker
(``_fuzz_harness.Worker``, with ``main``'s supervision: an abort there is "answered" when the CLI
still exits 2 with its message, "without an answer" when the process dies), saves it, and
restarts the fuzzer on the same corpus folder, where libFuzzer rebuilds its coverage map by
replaying the corpus.

What that costs, and the alternatives weighed:

- a restart per fatal case (a second or two of imports, then the corpus replay); fatal cases
  are rare (one in 16,800 in the first probe), so this costs far less than isolating every case;
- cases in the fuzzer share one process, so state left behind by one case is seen by the next,
  as it would be in a long-running program (a server) and unlike the one-shot CLI;
- a persistent worker or a fork per case would isolate every case for free, but libFuzzer would
  then see the coverage of the mutators alone: structured random testing, which is what the
  property suite in tests/fuzz already does;
- libFuzzer's own ``-fork=N`` mode is this restart loop built in, with coverage merged across
  jobs; under atheris it needs an executable argv[0] wrapper, re-imports onnxgate for every job
  (jobs last 1 s at first), and the per-case bookkeeping (exits by code, which case died, its
  answer through ``main``) would have to be rebuilt from job logs; the loop here keeps it exact.

Cases are counted as executions: inputs the fuzzer replays from its corpus after a restart run
the command again and count again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
COMMANDS = ("inspect", "inspect", "check", "check", "compare")
FORMATS = {
    "inspect": ("json", "json", "text"),
    "check": ("json", "json", "text", "sarif", "github"),
    "compare": ("json", "json", "text"),
}
SAVES_PER_KIND = 20
"""Failing cases saved per kind of problem and fuzzer start: one known bug can fail thousands of
cases, each a model of up to 2.5 MB. Every failing case is still counted in cases.jsonl."""
INSTRUMENTED = ("onnxgate.check", "onnxgate.compare", "onnxgate.model", "onnxgate.data")
"""Packages whose every module is imported (so instrumented) up front; ``onnxgate.cli`` and what
it imports are instrumented too, other onnxgate modules when first imported."""


# --- the fuzzer (--child) ---------------------------------------------------------------------


class FdpSource:
    """The mutators' ``Source`` over atheris's FuzzedDataProvider."""

    def __init__(self, fdp: Any) -> None:
        self._fdp = fdp

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]`` (the low end when the input runs out)."""
        return self._fdp.ConsumeIntInRange(low, high)

    def data(self, size: int) -> bytes:
        """At most ``size`` bytes."""
        return self._fdp.ConsumeBytes(self._fdp.ConsumeIntInRange(0, size))


def _child(run: Path, libfuzzer_args: list[str], memory_mb: int) -> None:
    try:
        import atheris
    except ImportError:
        sys.exit("atheris is missing: pip install 'onnxgate[fuzz]'")
    if memory_mb:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with atheris.instrument_imports(include=["onnxgate"]):
        import importlib
        import pkgutil

        import onnxgate.cli  # noqa: F401 - instrumented here, with everything it imports
        import onnxgate.inspection  # noqa: F401

        for name in INSTRUMENTED:
            package = importlib.import_module(name)
            for info in pkgutil.iter_modules(package.__path__, name + "."):
                importlib.import_module(info.name)

    from _fuzz_harness import (
        Outcome,
        escaping_locations,
        problems,
        read_capped,
        run_in_process,
        save_finding,
    )
    from _onnx_mutations import mutate, pick
    from _onnx_values import case_folder

    corpus = {p.name: p.read_bytes() for p in sorted(CORPUS.glob("*.onnx"))}
    names = sorted(corpus)
    folder = Path(case_folder(run))
    counter = [_count(run)]
    saves: Counter[str] = Counter()  # saved cases by their first problem's kind
    log = open(run / "cases.jsonl", "a")  # noqa: SIM115 - open for the process's life

    def one(data: bytes) -> None:
        counter[0] += 1
        case: dict[str, Any] = {"id": counter[0]}
        try:
            src = FdpSource(atheris.FuzzedDataProvider(data))
            name = pick(src, names)
            command = pick(src, COMMANDS)
            fmt = pick(src, FORMATS[command])
            mutated = mutate(corpus[name], src)
            path = folder / "model.onnx"
            path.write_bytes(mutated.data)
            args = [command, str(path), "--format", fmt]
            if command == "compare" and pick(src, (False, True)):
                args += ["--against", "ort:disable"]
        except Exception as err:  # a mutator's bug: counted, never fatal to the run
            case["harness_error"] = f"{type(err).__name__}: {err}"
            log.write(json.dumps(case) + "\n")
            log.flush()
            return
        case.update(model=name, args=args, edits=mutated.edits, mutators=mutated.mutators)
        (run / "current.input").write_bytes(data)
        (run / "current.json").write_text(json.dumps(case))
        start = time.perf_counter()
        code, uncaught = run_in_process(
            args, stdout_path=run / "stdout", stderr_path=run / "stderr", entry="app"
        )
        outcome = Outcome(
            args=args,
            code=code,
            uncaught=uncaught,
            stdout=read_capped(run / "stdout"),
            stderr=read_capped(run / "stderr"),
            seconds=time.perf_counter() - start,
        )
        one_json = fmt == "json" or (fmt == "sarif" and code in (0, 1))
        refuse = bool(escaping_locations(mutated.data, folder))
        found = problems(
            outcome,
            one_json=one_json,
            must_refuse=refuse,
            github=fmt == "github",
            terminal=("stdout", "stderr") if fmt in ("text", "github") else (),
        )
        if found and saves[found[0].split(":")[0]] < SAVES_PER_KIND:
            saves[found[0].split(":")[0]] += 1
            saved = save_finding(
                run / "findings",
                source=str(CORPUS / name),
                edits=mutated.edits,
                data=mutated.data,
                outcome=outcome,
                found=found,
                mutators=mutated.mutators,
            )
            case["saved"] = str(saved)
        case.update(code=code, problems=found, seconds=round(outcome.seconds, 3))
        del case["edits"]
        log.write(json.dumps(case) + "\n")
        log.flush()

    atheris.Setup([sys.argv[0], *libfuzzer_args], one)
    atheris.Fuzz()


# --- the driver ---------------------------------------------------------------------------------


def _count(run: Path) -> int:
    path = run / "cases.jsonl"
    return sum(1 for _ in open(path)) if path.exists() else 0


def _in_flight(run: Path) -> dict[str, Any] | None:
    """The case the fuzzer was running when it died, if it had not finished it."""
    path = run / "current.json"
    if not path.exists():
        return None
    case = json.loads(path.read_text())
    finished = {json.loads(line).get("id") for line in open(run / "cases.jsonl")}
    return None if case["id"] in finished else case


def _why(log: str) -> str:
    for marker, reason in (
        ("libFuzzer: timeout", "timeout"),
        ("libFuzzer: out-of-memory", "out-of-memory"),
        ("libFuzzer: deadly signal", "deadly signal"),
        ("Uncaught Python exception", "uncaught exception in the harness"),
    ):
        if marker in log:
            return reason
    return "died"


def _replay(run: Path, case: dict[str, Any], timeout: float, memory_mb: int) -> dict[str, Any]:
    """The fatal case again, through the console script's entry point in a worker."""
    from _fuzz_harness import Worker, problems, save_finding
    from _onnx_edits import build
    from _onnx_values import case_folder

    folder = Path(case_folder(run / "replay"))
    data = build((CORPUS / case["model"]).read_bytes(), case["edits"])
    (folder / "model.onnx").write_bytes(data)
    args = [str(folder / "model.onnx") if a.endswith(".onnx") else a for a in case["args"]]
    with Worker(run / "replay" / "worker", memory_mb=memory_mb, env=_env(run)) as worker:
        outcome = worker.run(args, timeout)
    fmt = args[args.index("--format") + 1]
    found = problems(outcome, one_json=fmt == "json" and outcome.code is not None)
    saved = save_finding(
        run / "findings",
        source=str(CORPUS / case["model"]),
        edits=case["edits"],
        data=data,
        outcome=outcome,
        found=found or ["killed the in-process fuzzer; answered through main"],
        mutators=case["mutators"],
    )
    return {
        "code": outcome.code,
        "signal": outcome.signal,
        "hang": outcome.hang is not None,
        "problems": found,
        "saved": str(saved),
        "stderr_tail": outcome.stderr[-600:],
    }


def _watch(proc: subprocess.Popen[bytes], run: Path, timeout: float) -> tuple[int, Any, bool]:
    """Wait for the fuzzer; kill it if one case outlives libFuzzer's own timeout by far.

    libFuzzer's timeout is a timer in the fuzzing process, and a process that is stopped or
    wedged in a signal handler never sees it fire; this watchdog is outside it.
    """
    stuck = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            return status, usage, stuck
        time.sleep(1.0)
        started, ended = (run / "current.json"), (run / "cases.jsonl")
        if started.exists() and started.stat().st_mtime > ended.stat().st_mtime:
            if time.time() - started.stat().st_mtime > 2 * timeout + 30 and not stuck:
                stuck = True
                proc.kill()


def _forget(run: Path) -> None:
    """Take inputs that killed the fuzzer out of its corpus, or every restart would replay them.

    libFuzzer keeps a fatal input as an artifact, never in the corpus; but a seed can be one, and
    so can a corpus input whose case depends on state an earlier case left behind. (No artifact
    is written for a death by SIGTERM or SIGKILL: the input in flight is kept by ``_child``.)
    """
    fatal = {p.read_bytes() for p in (run / "artifacts").iterdir() if p.is_file()}
    fatal.add((run / "current.input").read_bytes())
    for entry in (run / "corpus").iterdir():
        if entry.read_bytes() in fatal:
            entry.unlink()


def _env(run: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ONNXGATE_CACHE_DIR", str(run / "cache"))
    return env


def drive(args: argparse.Namespace) -> dict[str, Any]:
    from _fuzz_harness import machine, read_capped

    run = Path(
        args.workdir
        or Path.home() / ".cache" / "onnxgate-bench" / "fuzz" / time.strftime("%Y%m%d-%H%M%S")
    )
    run.mkdir(parents=True, exist_ok=True)
    (run / "corpus").mkdir(exist_ok=True)
    if not any((run / "corpus").iterdir()):
        # Random seeds long enough for every choice of a case: libFuzzer's own first inputs are
        # a few bytes, which run dry after the model and command are picked.
        rng = random.Random(args.seed)
        for index in range(args.seeds):
            seed = rng.randbytes(rng.randint(64, args.max_len))
            (run / "corpus" / f"seed-{index:03d}").write_bytes(seed)
    (run / "artifacts").mkdir(exist_ok=True)
    (run / "cases.jsonl").touch()
    start = time.monotonic()
    deaths: list[dict[str, Any]] = []
    peak_kb = 0
    restarts = 0
    while True:
        done = _count(run)
        left = args.seconds - (time.monotonic() - start) if args.seconds else None
        if done >= args.cases or (left is not None and left <= 0):
            break
        flags = [
            str(run / "corpus"),
            f"-runs={args.cases - done}",
            f"-timeout={int(args.timeout)}",
            f"-rss_limit_mb={args.memory_mb}",
            f"-seed={args.seed + restarts}",
            f"-artifact_prefix={run / 'artifacts'}/",
            "-print_final_stats=1",
            "-len_control=0",
            f"-max_len={args.max_len}",
        ]
        if left is not None:
            flags.append(f"-max_total_time={max(1, int(left))}")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"--workdir={run}"]
        cmd += [f"--memory-mb={args.memory_mb}", "--", *flags]
        log_path = run / f"fuzzer-{restarts}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(run))
            status, usage, stuck = _watch(proc, run, args.timeout)
            proc.returncode = os.waitstatus_to_exitcode(status)
        peak_kb = max(peak_kb, usage.ru_maxrss)
        restarts += 1
        case = _in_flight(run)
        if case is None:
            if proc.returncode != 0 and _count(run) == done:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise SystemExit(f"the fuzzer stopped without running a case:\n{tail}")
            continue
        # libFuzzer reports on fd 2, which is the case's capture file while a case runs
        why = _why(log_path.read_text(errors="replace") + read_capped(run / "stderr"))
        why = "stuck past libFuzzer's timeout (killed)" if stuck else why
        _forget(run)
        print(f"case {case['id']} took the fuzzer down ({why}); replaying it through main")
        replay = _replay(run, case, args.timeout, args.memory_mb)
        death = {"id": case["id"], "model": case["model"], "args": case["args"], "fuzzer": why}
        deaths.append({**death, "replay": replay})
        with open(run / "cases.jsonl", "a") as handle:  # counted as a case, with its outcome
            record = {**death, "code": replay["code"], "problems": replay["problems"], "died": True}
            handle.write(json.dumps({**record, "saved": replay["saved"]}) + "\n")
    wall = time.monotonic() - start
    peak_kb = max(peak_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return summarize(run, deaths, wall, peak_kb, restarts, machine())


def summarize(
    run: Path, deaths: list[dict[str, Any]], wall: float, peak_kb: int, restarts: int, host: dict
) -> dict[str, Any]:
    cases = [json.loads(line) for line in open(run / "cases.jsonl")]
    codes: Counter[str] = Counter()
    by_command: dict[str, Counter[str]] = {}
    kinds: Counter[str] = Counter()
    failing = []
    for case in cases:
        if "harness_error" in case:
            kinds["harness error (a mutator's bug)"] += 1
            continue
        code = "none" if case.get("code") is None else str(case["code"])
        codes[code] += 1
        by_command.setdefault(case["args"][0], Counter())[code] += 1
        for problem in case.get("problems", []):
            kinds[problem.split(":")[0].split(" (")[0]] += 1
        if case.get("problems"):
            failing.append(
                {k: case[k] for k in ("id", "model", "args", "problems", "saved") if k in case}
            )
    answered = [
        d for d in deaths if not d["replay"]["problems"] and d["replay"]["code"] is not None
    ]
    return {
        "machine": host,
        "settings": {"corpus": str(CORPUS), "workdir": str(run)},
        "cases": len(cases),
        "exit_codes": dict(sorted(codes.items())),
        "exit_codes_by_command": {
            c: dict(sorted(v.items())) for c, v in sorted(by_command.items())
        },
        "exit_4": codes.get("4", 0),
        "problems_by_kind": dict(kinds.most_common()),
        "failing_cases": failing[:200],
        "fuzzer_deaths": len(deaths),
        "aborts_answered_through_main": len(answered),
        "aborts_without_an_answer": sum(1 for d in deaths if d["replay"]["signal"] is not None),
        "hangs": sum(1 for d in deaths if d["replay"]["hang"]),
        "deaths": deaths,
        "fuzzer_restarts": restarts,
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "wall_s": round(wall, 1),
        "cases_per_s": round(len(cases) / wall, 2) if wall else None,
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"# fuzz_models: {result['cases']:,} cases in {result['wall_s']:,} s",
        "",
        f"{m['cpu']} ({m['logical_cpus']} CPUs; {', '.join(m.get('isa', []))}), Python "
        f"{m['python']}, onnx {m['onnx']}, onnxruntime {m['onnxruntime']}; peak RSS "
        f"{result['peak_rss_mb']} MB; {result['fuzzer_restarts']} fuzzer start(s).",
        "",
        "| command | " + " | ".join(f"exit {c}" for c in ("0", "1", "2", "3", "4", "none")) + " |",
        "|---|" + "---:|" * 6,
    ]
    for command, codes in result["exit_codes_by_command"].items():
        row = " | ".join(str(codes.get(c, 0)) for c in ("0", "1", "2", "3", "4", "none"))
        lines.append(f"| {command} | {row} |")
    lines += [
        "",
        f"- exit 4: {result['exit_4']}; aborts answered through main: "
        f"{result['aborts_answered_through_main']}; aborts without an answer: "
        f"{result['aborts_without_an_answer']}; hangs: {result['hangs']}",
        f"- problems by kind: {result['problems_by_kind'] or 'none'}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=10_000, help="cases to run in all")
    parser.add_argument(
        "--seconds", type=float, default=0, help="stop after this long (0: no limit)"
    )
    parser.add_argument("--timeout", type=float, default=60, help="seconds before a case is a hang")
    parser.add_argument("--memory-mb", type=int, default=4096, help="address-space cap of a case")
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's seed (+1 per restart)")
    parser.add_argument("--max-len", type=int, default=512, help="libFuzzer's longest input")
    parser.add_argument("--seeds", type=int, default=64, help="random inputs to start from")
    parser.add_argument(
        "--workdir", help="corpus, logs and cases (default ~/.cache/onnxgate-bench/fuzz/STAMP)"
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "fuzz_models.json"),
        help="the figures as JSON, with a Markdown twin beside it",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        _child(Path(args.workdir), [a for a in rest if a != "--"], args.memory_mb)
        return 0
    if not any(CORPUS.glob("*.onnx")):
        sys.exit(f"no corpus models in {CORPUS}; set ONNXGATE_CORPUS")
    result = drive(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(
        f"written: {out} and {out.with_suffix('.md')}; cases and findings in {result['settings']['workdir']}"
    )
    return 1 if result["exit_4"] or result["problems_by_kind"] or result["deaths"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
