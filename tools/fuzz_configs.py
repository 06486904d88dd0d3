"""Mutated gate.toml files through the loader and the CLI: exit 0-3 every time, never 4, no hang.

    python tools/fuzz_configs.py --configs 10000
    python tools/fuzz_configs.py --configs 300 --out /tmp/fuzz_configs.json   # a short check

Each config is a seed (the starter, the demo's, one with every table) mutated by
``_toml_mutations`` with ``RandomSource(seed + index)``, so case N is rebuilt from its number.
Every config goes through ``load_config`` in this process, under a timer (a hang is a case that
outlives ``--timeout``): the answer must be a GateConfig or a GateError with exit 1-3. One in
``--cli-every`` also goes through the real entry point, ``onnxgate gate run CONFIG --format json
--no-register --no-cache --out FOLDER``, in a ``_fuzz_harness.Worker`` (a fork per case, killed
on a hang), judged by ``_fuzz_harness.problems``: exit 0-3, no traceback, one JSON document. The
source model of the seeds does not exist (the demo's entry points are renamed to a module
that does not exist), so a config that loads fails at export (exit 1)
without running a model: what is fuzzed is the reading of the config, not the steps.

It writes (``--out``, default benchmarks/results/fuzz_configs.json, with a Markdown twin) the
figures: configs, exits by code on both paths, exit 4s, hangs, what refused configs were refused
for, wall time, date, commit and machine (with its ISA). Failing configs are saved under the
work folder with the case number that rebuilds them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Hang(Exception):
    """The loader outlived the timer."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


def _load(path: Path, timeout: float) -> tuple[str, str]:
    """The loader's answer on ``path``: (exit code or ``hang``/``4``, a short reason)."""
    from onnxgate.errors import GateError
    from onnxgate.gate import load_config

    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        load_config(path)
    except Hang:
        return "hang", f"no answer within {timeout} s"
    except GateError as error:
        return str(int(error.exit_code)), _reason(error.message)
    except BaseException as error:  # noqa: BLE001 - exactly what must never happen
        return "4", "".join(traceback.format_exception_only(error)).strip()[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return "0", "loaded"


def _reason(message: str) -> str:
    """What a refusal was for, without the file's path or the values: a kind to count."""
    for marker, kind in (
        ("is not valid TOML", "not TOML"),
        ("nested too deeply to read", "nesting too deep to parse"),
        ("nests deeper than", "nesting too deep"),
        ("larger than", "file too large"),
        ("cannot read the gate config", "not UTF-8 / unreadable"),
        ("NUL character", "NUL character"),
        ("is out of range", "integer out of range"),
        ("has no `version", "no version"),
        ("is not a valid gate config", "invalid keys or values"),
    ):
        if marker in message:
            return kind
    return message.split(":")[0][:80]


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from _fuzz_harness import Worker, machine, problems
    from _toml_mutations import RandomSource, mutate, pick, seeds

    work = Path(args.workdir or tempfile.mkdtemp(prefix="fuzz-configs-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "findings").mkdir(exist_ok=True)
    # the demo's entry points would export and time a real MiniLM (minutes, not a hang): point
    # them at a module that does not exist, so a config that loads fails at export at once
    texts = {
        k: v.replace("onnxgate.examples.minilm", "missing_fuzz_module") for k, v in seeds().items()
    }
    names = sorted(texts)
    signal.signal(signal.SIGALRM, _alarm)
    loader: Counter[str] = Counter()
    cli: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    mutators: Counter[str] = Counter()
    failing: list[dict[str, Any]] = []
    slowest = 0.0
    start = time.monotonic()
    done = 0
    with Worker(work / "worker", entry="main", memory_mb=args.memory_mb) as worker:
        for index in range(args.configs):
            if args.seconds and time.monotonic() - start > args.seconds:
                break
            src = RandomSource(args.seed + index)
            seed = pick(src, names)
            mutated = mutate(texts[seed], src)
            mutators.update(mutated.mutators)
            path = work / "gate.toml"
            path.write_bytes(mutated.data)
            began = time.perf_counter()
            code, reason = _load(path, args.timeout)
            slowest = max(slowest, time.perf_counter() - began)
            loader[code] += 1
            reasons[reason] += 1
            found = [] if code in ("0", "1", "2", "3") else [f"loader: {reason}"]
            if index % args.cli_every == 0:
                out = work / "runs" / str(index)
                command = ["gate", "run", str(path), "--format", "json", "--no-register"]
                command += ["--no-cache", "--out", str(out)]
                outcome = worker.run(command, args.timeout * 6)
                cli["hang" if outcome.hang else str(outcome.code)] += 1
                found += [f"cli: {p}" for p in problems(outcome, one_json=True)]
                subprocess.run(["rm", "-rf", str(out)], check=False)
            done += 1
            if found:
                saved = work / "findings" / f"case-{index}.toml"
                saved.write_bytes(mutated.data)
                failing.append(
                    {"case": index, "seed": seed, "mutators": mutated.mutators, "problems": found}
                )
            if done % 1000 == 0:
                print(f"{done} configs, loader {dict(loader)}, cli {dict(cli)}", flush=True)
    wall = time.monotonic() - start
    host = machine()
    flags = host.get("isa", [])
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": _commit(),
        "isa": "avx512_vnni" if "avx512_vnni" in flags else "avx2" if "avx2" in flags else "other",
        "machine": host,
        "settings": {
            "configs_asked": args.configs,
            "seed": args.seed,
            "cli_every": args.cli_every,
            "timeout_s": args.timeout,
            "seconds_limit": args.seconds,
            "seeds": names,
            "workdir": str(work),
        },
        "configs": done,
        "loader_exit_codes": dict(sorted(loader.items())),
        "cli_cases": sum(cli.values()),
        "cli_exit_codes": dict(sorted(cli.items())),
        "exit_4": loader.get("4", 0) + cli.get("4", 0),
        "hangs": loader.get("hang", 0) + cli.get("hang", 0),
        "refused_for": dict(reasons.most_common()),
        "mutators": dict(mutators.most_common()),
        "failing_cases": failing[:200],
        "slowest_load_s": round(slowest, 3),
        "wall_s": round(wall, 1),
        "configs_per_s": round(done / wall, 1) if wall else None,
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    codes = ("0", "1", "2", "3", "4", "hang")
    lines = [
        f"# fuzz_configs: {result['configs']:,} mutated gate.toml files in {result['wall_s']:,} s",
        "",
        f"{result['date']}, commit {result['commit']}, {m['cpu']} ({m['logical_cpus']} CPUs, "
        f"{result['isa']}), Python {m['python']}; load average {m['load_average_1m']} at the end.",
        "",
        "| path | configs | " + " | ".join(f"exit {c}" if c != "hang" else c for c in codes) + " |",
        "|---|---:|" + "---:|" * len(codes),
    ]
    for label, key, count in (
        ("load_config in process", "loader_exit_codes", result["configs"]),
        ("`onnxgate gate run` (worker)", "cli_exit_codes", result["cli_cases"]),
    ):
        row = " | ".join(str(result[key].get(c, 0)) for c in codes)
        lines.append(f"| {label} | {count:,} | {row} |")
    lines += [
        "",
        f"- exit 4: {result['exit_4']}; hangs: {result['hangs']}; failing cases: "
        f"{len(result['failing_cases'])}; slowest load {result['slowest_load_s']} s",
        f"- answers: {result['refused_for']}",
        f"- mutators applied: {result['mutators']}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--configs", type=int, default=10_000, help="mutated configs to run")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="case N uses RandomSource(seed + N)")
    parser.add_argument("--cli-every", type=int, default=10, help="one in N through the CLI")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a load hangs")
    parser.add_argument(
        "--memory-mb", type=int, default=4096, help="address-space cap (tool and CLI)"
    )
    parser.add_argument("--workdir", help="configs, runs and findings (default: a temp folder)")
    parser.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "fuzz_configs.json"),
        help="the figures as JSON, with a Markdown twin beside it",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.memory_mb:  # a config that asks for too much meets a MemoryError, not the OOM killer
        limit = args.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"written: {out} and {out.with_suffix('.md')}")
    return 1 if result["exit_4"] or result["hangs"] or result["failing_cases"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
