"""Does shadowing a candidate slow the champion? ``onnxgate serve --shadow`` under load.

Three servers, each ``onnxgate serve`` in a process of its own on 127.0.0.1, side by side:

- ``alone``: the champion, no shadow;
- ``shadow``: the champion shadowed by a candidate of the same cost (the champion's own file
  under another name, with its own contract: what a faithful re-export costs);
- ``slow``: the champion shadowed by a candidate about 5× slower (``_shadow_candidates.slow_variant``:
  the same model plus output-preserving work, so its answers still pass and only its cost
  differs; the module docstring says why this one).

The load generator is ``serve_load.py`` in a third process (tritonclient's asyncio HTTP client,
binary tensors), against one server at a time, in rounds whose order rotates (interleaved), so a
slow minute of the machine does not land on one contender. Two loads per round:

- **open loop** at ``--rate-fraction`` of the champion's capacity (measured first, closed loop at
  ``--concurrency``): the load a served model really sees, with headroom the shadow can use;
- **closed loop** at ``--concurrency``: the champion saturating both cores, where the shadow can
  only be shed.

Each run reads the server's ``/metrics`` and ``GET /v2/models/NAME/shadow`` before and after, so
coverage (pairs judged / requests answered) and shed counts are for that run alone. The table
gives the champion's p50 and p99 per contender (median over rounds) and their ratio to ``alone``.
Then the **soak** (``--soak`` s, default 600): the open loop against ``shadow`` and ``slow`` in
turn, the server's RSS sampled every ``--sample-every`` s: first, last and max, and the slope of a
least-squares line over the samples after the warm-up, MB per minute.

A run is **spoiled** when processes other than the client and the server used more than
``--spoiled-cores`` of the machine during it (``serve_load.py``'s ``other_busy_cores``, from
/proc/stat): the machine is shared, and such a run's timings say as much about the neighbours as
about the server. Spoiled runs are kept, marked, and left out of the medians when enough clean
ones remain.

Usage::

    python benchmarks/shadow_load.py                      # MiniLM (prepared by shadow_minilm.py)
    python benchmarks/shadow_load.py --quick              # the corpus's mnist, short runs
    python benchmarks/shadow_load.py --model M.onnx --name m --input input_ids:INT64:1,128 ...

Results: ``results/shadow.json`` and ``results/shadow.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from serve_bench import PY, Server, free_port  # noqa: E402

CACHE = Path.home() / ".cache" / "onnxgate-bench" / "shadow"
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", "/work/shared/corpus"))
MINILM = CACHE / "trial" / "run-champion" / "all-minilm-l6-v2.onnx"


def onnxgate(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "onnxgate", *args], text=True, capture_output=True, **kw)


def shell(command: list[str]) -> str:
    return " ".join(command)


# --- the models --------------------------------------------------------------------------------


def prepare(args) -> dict:
    """Champion, same-cost and slow candidates, each in a folder with its contract beside it."""
    from _shadow_candidates import calibrate_slow

    work = args.work / "models"
    known = work / "models.json"
    if args.reuse_models and known.is_file():
        return json.loads(known.read_text())
    champion = work / "champion" / f"{args.name}.onnx"
    same = work / "same" / f"{args.name}.onnx"
    slow = work / "slow" / f"{args.name}.onnx"
    for path in (champion, same, slow):
        path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.model, champion)
    contract = args.model.with_name(args.model.stem + ".contract.json")
    dims = [f"--dim={d}" for d in args.dim]
    if contract.is_file():
        shutil.copyfile(contract, champion.with_suffix(".contract.json"))
        golden = json.loads(contract.read_text())["golden"]["file"]  # the name the contract says
        shutil.copyfile(args.model.with_name(golden), champion.with_name(golden))
    else:
        done = onnxgate(
            "contract", "init", str(champion), "--reference", "ort:disable", "--force", *dims
        )
        if done.returncode:
            raise SystemExit(f"contract init {champion}: {done.stdout}{done.stderr}")
    shutil.copyfile(champion, same)
    feeds = one_feed(args)
    figures = calibrate_slow(champion, slow, feeds, factor=args.slow_factor)
    for candidate in (same, slow):
        # goldens from the champion's file: the candidates' contracts hold them to its answers
        done = onnxgate(
            "contract", "init", str(candidate), "--reference", str(champion), "--force", *dims
        )
        if done.returncode:
            raise SystemExit(f"contract init {candidate}: {done.stdout}{done.stderr}")
    models = {
        "champion": str(champion),
        "same": str(same),
        "slow": str(slow),
        "slow_variant": figures,
    }
    known.write_text(json.dumps(models, indent=2))
    return models


def one_feed(args) -> dict:
    import numpy as np
    from serve_load import feeds_pool, spec_pool

    if args.input:
        return spec_pool(args.input, size=1, seed=0)[0]
    return {
        k: np.asarray(v) for k, v in feeds_pool(1, args.seq, size=1, seed=0, vocab=30522)[0].items()
    }


# --- servers and their figures -----------------------------------------------------------------


def start(label: str, models: dict, args, logs: Path) -> Server:
    http, grpc = free_port(), free_port()
    command = [
        PY, "-m", "onnxgate", "serve", f"{args.name}={models['champion']}",
        "--allow-ungated", "--http-port", str(http), "--grpc-port", str(grpc), *args.serve_option,
    ]  # fmt: skip
    if label != "alone":
        command += [
            "--shadow", f"{args.name}={models['same' if label == 'shadow' else 'slow']}",
            "--shadow-fraction", str(args.shadow_fraction),
            "--shadow-queue", str(args.shadow_queue),
        ]  # fmt: skip
    server = Server(label, command, http, grpc, logs / f"{label}.log")
    server.command = command
    return server


def metric_sums(text: str, model: str) -> dict[str, float]:
    """Every sample of the exposition whose labels name ``model`` (or no model), summed by name
    and labels other than model/version: ``name{reason="full"}`` → value."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)", line)
        if not match:
            continue
        name, _, labels, value = match.groups()
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels or ""))
        if pairs.get("model", model) != model:
            continue
        rest = ",".join(
            f'{k}="{v}"' for k, v in sorted(pairs.items()) if k not in ("model", "version")
        )
        key = f"{name}{{{rest}}}" if rest else name
        try:
            sums[key] = sums.get(key, 0.0) + float(value)
        except ValueError:
            continue
    return sums


def shadow_json(server: Server, model: str) -> dict | None:
    try:
        url = f"http://127.0.0.1:{server.http}/v2/models/{model}/shadow"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return None


def snapshot(server: Server, model: str) -> dict:
    return {"metrics": metric_sums(server.metrics(), model), "shadow": shadow_json(server, model)}


def delta(before: dict, after: dict) -> dict:
    """Counters' growth during a run (gauges come out as differences too: read with care)."""
    a, b = before["metrics"], after["metrics"]
    return {k: round(b[k] - a.get(k, 0.0), 6) for k in b if b[k] != a.get(k, 0.0)}


def shadow_figures(change: dict) -> dict:
    """Requests answered, pairs judged (by outcome) and shed (by reason) in a run.

    Counters only (``*_total``): a label set seen for the first time also brings its
    ``*_created`` timestamp, which is not a count.
    """

    def by(prefix: str, label: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for key, value in change.items():
            if key.startswith(prefix) and "_total" in key:
                tag = re.search(rf'{label}="([^"]*)"', key)
                name = tag.group(1) if tag else "all"
                found[name] = found.get(name, 0.0) + value
        return found

    answered = sum(by("onnxgate_inference_request_success", "model").values())
    pairs = by("onnxgate_shadow_pairs", "outcome")
    shed = by("onnxgate_shadow_shed", "reason")
    judged = sum(pairs.values())
    return {
        "answered": answered,
        "pairs": pairs,
        "judged": judged,
        "shed": shed,
        "shed_total": sum(shed.values()),
        "sampled_out": sum(by("onnxgate_shadow_sampled_out", "model").values()),
        "cancelled": sum(by("onnxgate_shadow_cancelled", "model").values()),
        "coverage": round(judged / answered, 4) if answered else None,
    }


# --- load --------------------------------------------------------------------------------------


def load(
    server: Server, args, *, tag: str, rate: float | None, duration: float, sample: bool = False
) -> dict:
    out = args.work / f"load-{server.label}-{tag}-{time.time_ns()}.json"
    command = [
        PY, str(HERE / "serve_load.py"), "--url", server.url("http"), "--protocol", "http",
        "--model", args.name, "--duration", str(duration), "--warmup", str(args.warmup),
        "--concurrency", str(args.concurrency), "--pool", "32", "--out", str(out),
        "--label", f"{server.label} {tag}",
    ]  # fmt: skip
    if args.input:
        for spec in args.input:
            command += ["--input", spec]
    else:
        command += ["--batch", "1", "--seq", str(args.seq)]
    if rate:
        command += ["--rate", f"{rate:.3f}", "--max-inflight", str(args.concurrency * 4)]
    if sample:
        command += ["--rss-pid", str(server.process.pid), "--sample-every", str(args.sample_every)]
    else:
        command += ["--rss-pid", str(server.process.pid), "--sample-every", "5"]
    before = snapshot(server, args.name)
    loadavg = os.getloadavg()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"serve_load failed ({server.label} {tag}):\n{done.stderr[-3000:]}")
    time.sleep(args.settle)  # the shadow's queue drains: pairs judged after the run count too
    after = snapshot(server, args.name)
    result = json.loads(out.read_text())
    figures = shadow_figures(delta(before, after))
    other = result.get("other_busy_cores") or 0.0
    return {
        "server": server.label,
        "tag": tag,
        "mode": result["mode"],
        "rate": rate,
        "completed": result["completed"],
        "errors": result["errors"],
        "requests_per_s": result["requests_per_s"],
        "latency": result["latency"],
        "latency_from_schedule": result.get("latency_from_schedule"),
        "server_cpu_cores": result.get("server_cpu_cores"),
        "client_cpu_cores": result.get("client_cpu_cores"),
        "other_busy_cores": other,
        "steal_cores": result.get("steal_cores"),
        "spoiled": other > args.spoiled_cores,
        "load_average_before": [round(x, 2) for x in loadavg],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "server_rss_mb": result.get("server_rss_mb"),
        "rss_series": result.get("rss_series") if sample else None,
        "shadow": figures,
        "shadow_record": after["shadow"],
        "command": shell(command),
    }


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(runs: list[dict], servers: list[str], tag: str) -> dict:
    table = {}
    for label in servers:
        mine = [r for r in runs if r["server"] == label and r["tag"] == tag]
        clean = [r for r in mine if not r["spoiled"]]
        used = clean if len(clean) >= 2 else mine
        table[label] = {
            "runs": len(mine),
            "spoiled": len(mine) - len(clean),
            "medians_over": "clean runs" if used is clean else "all runs (fewer than 2 clean)",
            "p50_ms": median([r["latency"]["p50_ms"] for r in used]),
            "p99_ms": median([r["latency"]["p99_ms"] for r in used]),
            "requests_per_s": median([r["requests_per_s"] for r in used]),
            "coverage": median([r["shadow"]["coverage"] for r in used])
            if label != "alone"
            else None,
            "judged": sum(r["shadow"]["judged"] for r in mine),
            "shed": sum(r["shadow"]["shed_total"] for r in mine),
            "cancelled": sum(r["shadow"].get("cancelled", 0) for r in mine),
            "errors": sum(r["errors"] for r in mine),
        }
    base = table[servers[0]]
    for label in servers:
        row = table[label]
        for key in ("p50_ms", "p99_ms"):
            ok = row[key] is not None and base[key]
            row[f"{key}_ratio"] = round(row[key] / base[key], 3) if ok else None
    return table


def slope_mb_per_min(series: list[dict], after_s: float) -> float | None:
    points = [(s["t_s"], s["rss_mb"]) for s in series or [] if s["t_s"] >= after_s]
    if len(points) < 3:
        return None
    xs, ys = zip(*points, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return round(60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var, 3)


def rss_summary(series: list[dict] | None, warmup: float, duration: float) -> dict:
    """Start, end and max RSS of a soak; the slope over all of it after the warm-up and over its
    second half (a server grows while its allocators and caches warm up, then should not)."""
    rss = [s["rss_mb"] for s in series or []]
    return {
        "start": rss[0] if rss else None,
        "end": rss[-1] if rss else None,
        "max": max(rss) if rss else None,
        "slope_mb_per_min": slope_mb_per_min(series, warmup),
        "slope_second_half_mb_per_min": slope_mb_per_min(series, warmup + duration / 2),
        "samples": len(rss),
    }


def slim(doc: dict) -> dict:
    """The JSON kept in results/: each run's /shadow record without its pair lists (worst and
    newest pairs, thousands of lines a run; their counts and figures stay)."""
    for run in doc.get("runs", []) + (doc.get("soak") or []):
        record = run.get("shadow_record") or {}
        for candidate in record.get("candidates", []):
            candidate.pop("worst", None)
            candidate.pop("newest", None)
    return doc


def isa() -> str:
    try:
        flags = set(re.findall(r"avx512[a-z_]*|avx2|amx[a-z_]*", Path("/proc/cpuinfo").read_text()))
    except OSError:
        return "unknown"
    return " ".join(sorted(flags))


# --- the report --------------------------------------------------------------------------------


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [
        "# Shadow serving under load (`benchmarks/shadow_load.py`)",
        "",
        f"Command: `{doc['command']}` at onnxgate `{doc['commit']}`, {doc['started']}.",
        f"Machine: {m['cpu']}, {m['affinity_cpus']} usable CPUs, ISA {doc['isa']}; "
        f"load average {doc['load_average_start']} at start, {doc['load_average_end']} at the end.",
        f"Model: `{doc['args']['name']}` ({doc['args']['model']}); "
        f"slow candidate: {doc['models']['slow_variant']['blocks']} extra Tanh/MatMul blocks of width "
        f"{doc['models']['slow_variant']['width']}, measured {doc['models']['slow_variant']['ratio']}× "
        f"the champion in-process ({doc['models']['slow_variant']['champion_p50_ms']} → "
        f"{doc['models']['slow_variant']['candidate_p50_ms']} ms p50), outputs bit for bit the champion's.",
        f"Champion capacity (closed loop, concurrency {doc['args']['concurrency']}, alone): "
        f"{doc['capacity_rps']} requests/s; open loop at {doc['args']['rate_fraction']} of it = "
        f"{doc['rate']} requests/s. Shadow settings: fraction {doc['args']['shadow_fraction']}, "
        f"queue {doc['args']['shadow_queue']}. {doc['args']['rounds']} interleaved rounds of "
        f"{doc['args']['warmup']} s warm-up + {doc['args']['duration']} s measured per load.",
        f"A run is spoiled when other processes used more than {doc['args']['spoiled_cores']} "
        "cores during it; medians are over clean runs when at least two are clean.",
        "",
    ]
    for tag, title in (("open", "open loop"), ("closed", "closed loop (saturated)")):
        table = doc["tables"].get(tag)
        if not table:
            continue
        lines += [
            f"## Champion latency, {title}",
            "",
            "| server | runs (spoiled) | p50 ms | ×alone | p99 ms | ×alone | req/s | coverage | judged | shed | runs cancelled | errors |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, row in table.items():
            lines.append(
                f"| {label} | {row['runs']} ({row['spoiled']}) | {row['p50_ms']} | {row['p50_ms_ratio']} "
                f"| {row['p99_ms']} | {row['p99_ms_ratio']} | {row['requests_per_s']} "
                f"| {row['coverage'] if row['coverage'] is not None else '–'} | {row['judged']} "
                f"| {row['shed']} | {row.get('cancelled', '–')} | {row['errors']} |"
            )
        lines.append("")
    lines += [
        "## Every run",
        "",
        "| round | server | load | p50 ms | p99 ms | req/s | coverage | shed | other cores | spoiled | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in doc["runs"]:
        lines.append(
            f"| {run['round']} | {run['server']} | {run['tag']} | {run['latency']['p50_ms']} | "
            f"{run['latency']['p99_ms']} | {run['requests_per_s']} | {run['shadow']['coverage']} | "
            f"{run['shadow']['shed_total']:.0f} | {run['other_busy_cores']} | "
            f"{'**spoiled**' if run['spoiled'] else 'no'} | {run['load_average_before'][0]} |"
        )
    lines.append("")
    if doc.get("soak"):
        lines += [
            f"## Memory over {doc['args']['soak']:.0f} s (open loop at {doc['rate']} requests/s)",
            "",
            "| server | RSS start MB | end MB | max MB | slope MB/min (all / second half) | answered | judged | shed | coverage | p50 ms | p99 ms | other cores | spoiled |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run in doc["soak"]:
            rss = run["rss"]
            lines.append(
                f"| {run['server']} | {rss['start']} | {rss['end']} | {rss['max']} | {rss['slope_mb_per_min']} / {rss.get('slope_second_half_mb_per_min')} "
                f"| {run['shadow']['answered']:.0f} | {run['shadow']['judged']:.0f} | {run['shadow']['shed_total']:.0f} "
                f"| {run['shadow']['coverage']} | {run['latency']['p50_ms']} | {run['latency']['p99_ms']} "
                f"| {run['other_busy_cores']} | {'**spoiled**' if run['spoiled'] else 'no'} |"
            )
        lines.append("")
    if doc.get("notes"):
        lines += ["## Reading", ""] + [f"- {note}" for note in doc["notes"]] + [""]
    shed_reasons: dict[str, float] = {}
    for run in doc["runs"] + (doc.get("soak") or []):
        for key, value in run["shadow"]["shed"].items():
            shed_reasons[f"{run['server']} {key}"] = (
                shed_reasons.get(f"{run['server']} {key}", 0) + value
            )
    if shed_reasons:
        lines += [
            "Shed, by server and reason (all runs): "
            + ", ".join(f"`{k}` {v:.0f}" for k, v in sorted(shed_reasons.items())),
            "",
        ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--quick", action="store_true", help="mnist from the corpus, short runs")
    parser.add_argument(
        "--model", type=Path, help="the champion .onnx (its contract beside it, or one is made)"
    )
    parser.add_argument("--name", default=None, help="the served name")
    parser.add_argument("--input", action="append", help="NAME:DATATYPE:SHAPE, as serve_load.py")
    parser.add_argument("--dim", action="append", default=[], help="NAME=MIN,MAX for contract init")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rate-fraction", type=float, default=0.4)
    parser.add_argument("--shadow-fraction", type=float, default=1.0)
    parser.add_argument("--shadow-queue", type=int, default=32)
    parser.add_argument("--slow-factor", type=float, default=5.0)
    parser.add_argument("--soak", type=float, default=600.0, help="seconds per soak; 0: none")
    parser.add_argument("--soak-servers", default="shadow,slow")
    parser.add_argument("--loads", default="open,closed")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument(
        "--settle", type=float, default=3.0, help="seconds after a run before reading the metrics"
    )
    parser.add_argument("--spoiled-cores", type=float, default=0.3)
    parser.add_argument(
        "--serve-option", action="append", default=[], help="extra `serve` argument"
    )
    parser.add_argument("--work", type=Path, default=CACHE / "load")
    parser.add_argument(
        "--reuse-models",
        action="store_true",
        help="the candidates an earlier run made (same slow variant)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "shadow.json")
    parser.add_argument(
        "--render",
        type=Path,
        help="only write the Markdown of an earlier run's JSON (its tables again)",
    )
    args = parser.parse_args(argv)
    if args.render:
        return args
    if args.quick:
        args.model = args.model or CORPUS / "mnist.onnx"
        args.name = args.name or "mnist"
        args.input = args.input or ["Input3:FP32:1,1,28,28"]
        args.rounds, args.duration, args.warmup = min(args.rounds, 2), min(args.duration, 8.0), 2.0
        args.soak = min(args.soak, 60.0)
    args.model = args.model or MINILM
    args.name = args.name or "minilm"
    if not args.model.is_file():
        raise SystemExit(
            f"{args.model} is missing: run benchmarks/shadow_minilm.py --prepare first, or pass --model"
        )
    if args.model == MINILM and not args.dim:
        args.dim = ["batch=1,32", "seq=1,256"]
    return args


def git_commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.render:
        doc = json.loads(args.render.read_text())
        loads = doc["args"]["loads"].split(",")
        doc["tables"] = {
            tag: summarise(doc["runs"], ["alone", "shadow", "slow"], tag) for tag in loads
        }
        for run in doc.get("soak") or []:
            run["rss"] = rss_summary(run["rss_series"], doc["args"]["warmup"], doc["args"]["soak"])
        args.render.write_text(json.dumps(slim(doc), indent=2))
        args.render.with_suffix(".md").write_text(markdown(doc))
        return doc
    args.work.mkdir(parents=True, exist_ok=True)
    logs = args.work / "logs"
    logs.mkdir(exist_ok=True)
    from serve_load import machine

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_start = [round(x, 2) for x in os.getloadavg()]
    models = prepare(args)
    print(f"models: {json.dumps(models)}", file=sys.stderr)
    labels = ["alone", "shadow", "slow"]
    servers = {label: start(label, models, args, logs) for label in labels}
    runs: list[dict] = []
    soak: list[dict] = []
    try:
        for server in servers.values():
            server.wait_ready(args.name)
        calibration = load(
            servers["alone"], args, tag="capacity", rate=None, duration=args.duration
        )
        capacity = calibration["requests_per_s"]
        rate = round(capacity * args.rate_fraction, 2)
        print(f"capacity {capacity} req/s; open loop at {rate}", file=sys.stderr)
        loads = args.loads.split(",")
        for number in range(args.rounds):
            order = labels[number % 3 :] + labels[: number % 3]
            if number % 2:
                order.reverse()
            for label in order:
                for tag in loads:
                    run = load(
                        servers[label],
                        args,
                        tag=tag,
                        rate=rate if tag == "open" else None,
                        duration=args.duration,
                    )
                    run["round"] = number + 1
                    runs.append(run)
                    print(
                        f"round {number + 1} {label:6} {tag:6} p50 {run['latency']['p50_ms']} p99 "
                        f"{run['latency']['p99_ms']} coverage {run['shadow']['coverage']} shed "
                        f"{run['shadow']['shed_total']} other {run['other_busy_cores']}",
                        file=sys.stderr,
                    )
        if args.soak:
            for label in args.soak_servers.split(","):
                run = load(
                    servers[label], args, tag="soak", rate=rate, duration=args.soak, sample=True
                )
                run["rss"] = rss_summary(run["rss_series"], args.warmup, args.soak)
                soak.append(run)
                print(
                    f"soak {label}: {json.dumps(run['rss'])} coverage {run['shadow']['coverage']}",
                    file=sys.stderr,
                )
    finally:
        for server in servers.values():
            server.stop()
    doc = {
        "tool": "shadow_load",
        "started": started,
        "command": shell(
            [
                Path(PY).name,
                "benchmarks/shadow_load.py",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "commit": git_commit(),
        "isa": isa(),
        "machine": machine(),
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": models,
        "serve_commands": {label: shell(s.command) for label, s in servers.items()},
        "capacity_rps": capacity,
        "capacity_run": calibration,
        "rate": rate,
        "tables": {tag: summarise(runs, labels, tag) for tag in args.loads.split(",")},
        "runs": runs,
        "soak": soak,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(slim(doc), indent=2))
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(args.out.with_suffix(".md").read_text())
    return doc


if __name__ == "__main__":
    main()
