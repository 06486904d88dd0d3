"""Drain on SIGTERM: requests in flight on both protocols, then SIGTERM; who got an answer.

The probe of issue 28: ``onnxgate serve … --grace 30``, 64 binary-extension REST requests of
921,600 bytes each (one ultraface image) fully written and 64 gRPC calls sent, then SIGTERM.
Every one of them must be answered (200 / OK) and the process must exit 0; requests on new
connections after the signal must get 503 with ``Retry-After``. The scenario is the one
``tests/serve/test_drain.py`` runs (``tests/serve/_drain.py``), here on a real model::

    PYTHONPATH=src python benchmarks/drain.py --model ultraface --runs 3

``--model wide`` uses the test's generated model (a MatMul over 921,600 bytes, fast);
``--model ultraface`` the corpus's ``ultraface_rfb320.onnx`` (slow enough that many requests are
still unread, or still in the accept queue, when the signal comes). Prints one line per run with
answered / refused (503) / reset counts for REST, gRPC and the late requests, and writes JSON
to ``benchmarks/results/drain.json`` (with ``--out``, elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from field_trial import cpu_isa  # noqa: E402

from serve._drain import Target, make_wide_contract, run_drain  # noqa: E402
from serve._serve_helpers import ServerProcess  # noqa: E402

CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
RESULTS = Path(__file__).with_name("results")


def prepare(model: str, folder: Path) -> tuple[Path, Target]:
    """The model file (with its contract) and what the scenario sends to it."""
    if model == "wide":
        return make_wide_contract(folder / "wide.onnx"), Target()
    import shutil

    from onnxgate.contract import init_contract

    path = folder / "ultraface.onnx"
    shutil.copy2(CORPUS / "ultraface_rfb320.onnx", path)
    init_contract(path)
    return path, Target("ultraface", "input", (1, 3, 240, 320))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", choices=("wide", "ultraface"), default="ultraface")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rest", type=int, default=64)
    parser.add_argument("--grpc", type=int, default=64)
    parser.add_argument("--held-back", type=int, default=8)
    parser.add_argument("--late", type=int, default=4)
    parser.add_argument("--grace", type=float, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS / "drain.json")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="onnxgate-drain-"))
    path, target = prepare(args.model, folder)
    runs = []
    for run in range(args.runs):
        server = ServerProcess([str(path), "--allow-ungated", "--grace", str(args.grace)], folder)
        server.wait_live()
        started = time.monotonic()
        result = run_drain(
            server, target, rest=args.rest, grpc=args.grpc, held_back=args.held_back,
            late=args.late,
        )  # fmt: skip
        record = {
            "run": run + 1,
            "rest": result.rest.as_dict(),
            "grpc": result.grpc.as_dict(),
            "late_rest": result.late.as_dict(),
            "rest_written_before_signal": result.written_before_signal,
            "exit_code": result.exit_code,
            "seconds_from_start_to_exit": round(time.monotonic() - started, 2),
        }
        runs.append(record)
        print(
            f"run {run + 1}: REST {_line(record['rest'])} | gRPC {_line(record['grpc'])} | "
            f"late REST {_line(record['late_rest'])} | exit {result.exit_code}",
            flush=True,
        )
    document = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "cpu_isa": cpu_isa(),
        "load_average": os.getloadavg(),
        "scenario": {
            "model": args.model,
            "request_bytes": 4 * _size(target.shape),
            "rest": args.rest,
            "rest_held_back": args.held_back,
            "grpc": args.grpc,
            "late_rest": args.late,
            "grace": args.grace,
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"cpu isa: {document['cpu_isa']}; written {args.out}")
    return document


def _line(counts: dict) -> str:
    other = f" other {counts['other']}" if counts["other"] else ""
    return (
        f"answered {counts['answered']}, 503 {counts['refused_503']} "
        f"(Retry-After {counts['retry_after_on_503']}), reset {counts['reset']}{other}"
    )


def _size(shape: tuple[int, ...]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


if __name__ == "__main__":
    main()
