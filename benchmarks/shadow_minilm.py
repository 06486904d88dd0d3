"""The issue-32 trial: three candidates in shadow beside a gated all-MiniLM-L6-v2, then drift and fallback.

Everything goes through the real CLI (``onnxgate gate``, ``serve``, ``registry``), each command in
a process of its own, against one SQLite registry in ``~/.cache/onnxgate-bench/shadow/``:

1. **Champion**: the demo's gate (``src/onnxgate/examples/minilm.gate.toml``) without its old
   runtime target, tune and bench (they judge speed, not answers; the trial needs the int8 the
   quantize step makes), registered as ``all-minilm-l6-v2@champion``.
2. **Candidates**, each a version of the same model:

   - *faithful re-export*: the same weights exported again through PyTorch's fused attention
     (``attn_implementation="sdpa"``, what a transformers upgrade does to an export), gated by the
     same config: a different graph that must answer the same;
   - *gated int8*: the champion gate's own ``NAME.int8.onnx`` with the int8 contract its quantize
     step wrote (its rules: ``cosine>=0.99`` on both outputs), registered as a version of its own
     with the champion's gate report (the artefact entries renamed from ``model.int8`` to
     ``model``, so the registry checks the files' sha256 against what that gate judged);
   - *planted bad variant*: the champion's ONNX with layer 3's query/key/value weights perturbed
     (Gaussian noise of 5% of each weight's standard deviation), gated as an ``.onnx`` source, so
     its contract's golden outputs come from its own graph: the gate passes, as it would for a
     model gated against the wrong reference.

3. **Shadow**: ``serve all-minilm-l6-v2@champion --shadow @2 --shadow @3 --shadow @4``, the same
   traffic for all three (tokenised sentences of the example's distribution, batch 1-4), then
   ``GET /v2/models/NAME/shadow``, ``registry shadow-report NAME@N --json`` for each candidate and
   ``registry promote NAME@N champion --when-shadow-passes``: refused for the bad one.
4. **Drift**: a server with the watch on gets unshifted sentences, then the shifted distribution
   (``_shadow_candidates.shifted_ids``: every position a random word piece); the drift alert is
   read from ``/metrics`` after each phase.
5. **Fallback**: see ``fallback()``.

Usage::

    python benchmarks/shadow_minilm.py [--prepare-only] [--requests 1200]

Results: ``results/shadow_minilm.json`` and ``results/shadow_minilm.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from serve_bench import PY, Server, free_port  # noqa: E402
from shadow_load import isa  # noqa: E402

CACHE = Path.home() / ".cache" / "onnxgate-bench" / "shadow"
NAME = "all-minilm-l6-v2"
EXAMPLE_CONFIG = HERE.parent / "src" / "onnxgate" / "examples" / "minilm.gate.toml"

SDPA_MODULE = '''"""all-MiniLM-L6-v2 with PyTorch's fused attention: the faithful re-export of the shadow trial."""
from onnxgate.examples.minilm import example_inputs, factory


def build():
    ids, mask, types = example_inputs(batch=1, seq=16)
    return factory("sdpa"), {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
'''


def env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def run(
    command: list[str], *, log: list, expect: int | None = 0, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run an onnxgate command, keep it with its exit code and output for the report."""
    started = time.monotonic()
    done = subprocess.run(
        [PY, "-m", "onnxgate", *command], capture_output=True, text=True, env=env(), cwd=cwd
    )
    log.append(
        {
            "command": "onnxgate " + " ".join(command),
            "exit": done.returncode,
            "seconds": round(time.monotonic() - started, 1),
            "stdout": done.stdout[-6000:],
            "stderr": done.stderr[-3000:],
        }
    )
    if expect is not None and done.returncode != expect:
        raise SystemExit(
            f"onnxgate {' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def trial_config(source: str, *, quantize: bool, alias: str | None) -> str:
    """The example's gate config for the trial: installed runtime only, no tune, no bench."""
    lines, skip = [], False
    for line in EXAMPLE_CONFIG.read_text().splitlines():
        if line.startswith("["):
            skip = line.strip() in ("[steps.tune]", "[steps.bench]") or (
                line.strip() == "[steps.quantize]" and not quantize
            )
        if skip:
            continue
        if line.startswith("runtimes = "):
            line = 'runtimes = ["installed"]'
        if line.startswith("source = "):
            line = f'source = "{source}"'
        if line.startswith("alias = ") and alias is None:
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def bad_config(model: str) -> str:
    """A gate of the perturbed ONNX file: its golden outputs come from its own graph."""
    return f"""version = 1

[model]
name = "{NAME}"
source = "{model}"

[feeds]
dims = {{ batch = [1, 32], seq = [1, 256] }}

[targets]
runtimes = ["installed"]

[steps.check]

[steps.verify]

[register]
description = "planted bad variant: layer 3 attention weights perturbed"
"""


def registry_url(work: Path) -> str:
    return f"sqlite:///{work / 'registry.db'}"


def prepare(args, log: list) -> dict:
    """Champion and three candidates in the registry; their numbers (cached in candidates.json)."""
    from _shadow_candidates import perturb_attention

    work = args.work
    known = work / "candidates.json"
    if known.is_file() and not args.fresh:
        return json.loads(known.read_text())
    if args.fresh:
        for path in (work / "registry.db", work / "registry-store"):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    work.mkdir(parents=True, exist_ok=True)
    url = registry_url(work)
    champion_dir = work / "champion"
    champion_dir.mkdir(exist_ok=True)
    (champion_dir / "gate.toml").write_text(
        trial_config("torch:onnxgate.examples.minilm:build", quantize=True, alias="champion")
    )
    champion = gate(champion_dir / "gate.toml", work / "run-champion", url, log)
    run_dir = work / "run-champion"

    reexport_dir = work / "reexport"
    reexport_dir.mkdir(exist_ok=True)
    (reexport_dir / "shadow_sdpa.py").write_text(SDPA_MODULE)
    (reexport_dir / "gate.toml").write_text(
        trial_config("torch:shadow_sdpa:build", quantize=False, alias=None)
    )
    reexport = gate(reexport_dir / "gate.toml", work / "run-reexport", url, log)

    int8 = register_int8(run_dir, url)

    bad_dir = work / "bad"
    bad_dir.mkdir(exist_ok=True)
    planted = perturb_attention(
        run_dir / f"{NAME}.onnx", bad_dir / "perturbed.onnx", layer=3, scale=0.05
    )
    (bad_dir / "gate.toml").write_text(bad_config("perturbed.onnx"))
    bad = gate(bad_dir / "gate.toml", work / "run-bad", url, log)

    listing = run(["registry", "list", "--registry", url], log=log).stdout
    numbers = {
        "champion": champion,
        "reexport": reexport,
        "int8": int8,
        "bad": bad,
        "planted": planted,
        "listing": listing,
    }
    known.write_text(json.dumps(numbers, indent=2))
    return numbers


def gate(config: Path, out: Path, url: str, log: list) -> int:
    """``onnxgate gate``, unless an earlier run of this preparation registered it already; the
    version it registered."""
    report = out / "report.json"
    if not (report.is_file() and json.loads(report.read_text()).get("registered")):
        run(["gate", str(config), "--out", str(out), "--registry", url], log=log)
    else:
        log.append({"command": f"onnxgate gate {config} (registered by an earlier run, kept)"})
    return json.loads(report.read_text())["registered"]["version"]


def register_int8(run_dir: Path, url: str) -> int:
    """The champion gate's int8 as a version of its own, with the contract its quantize step wrote."""
    from onnxgate.registry import open_registry

    document = json.loads((run_dir / "report.json").read_text())
    renamed = []
    for entry in document["artefacts"]:
        role = entry.get("role", "")
        if role in ("model", "contract", "golden"):
            continue  # the float model's: not this version's files
        if role.endswith(".int8"):
            entry = {**entry, "role": role.removesuffix(".int8")}
        renamed.append(entry)
    document["artefacts"] = renamed
    document["notes"] = [
        *document.get("notes", []),
        "the int8 model of this gate run, registered as a version of its own for the shadow trial",
    ]
    files = {
        "model": run_dir / f"{NAME}.int8.onnx",
        "contract": run_dir / f"{NAME}.int8.contract.json",
        "golden": run_dir / f"{NAME}.int8.golden.npz",
    }
    with open_registry(url) as registry:
        version = registry.register(
            NAME,
            files,
            document,
            description=None,
            source={"source": f"{NAME}@1 quantize step (int8)", "gate_run": str(run_dir)},
        )
    return version.number


# --- traffic ----------------------------------------------------------------------------------


def sentence_requests(count: int, *, seed: int = 0, max_batch: int = 4) -> list[dict]:
    """``count`` requests of 1..``max_batch`` sentences, padded to their longest (as a client
    that tokenises per request does), token ids from the tokenizer shipped with the weights."""
    import random

    from _shadow_candidates import unshifted_sentences

    from onnxgate.examples.minilm import tokenize

    rng = random.Random(seed)
    sizes = [rng.randint(1, max_batch) for _ in range(count)]
    every = tokenize(unshifted_sentences(sum(sizes), seed=seed), seq=128)  # one tokenizer load
    requests, at = [], 0
    for size in sizes:
        feeds = {k: v[at : at + size] for k, v in every.items()}
        at += size
        longest = int(feeds["attention_mask"].sum(1).max())
        requests.append({k: v[:, :longest].copy() for k, v in feeds.items()})
    return requests


def shifted_requests(count: int, *, seed: int = 1, max_batch: int = 4) -> list[dict]:
    """``count`` requests of the shifted distribution: random word pieces, 64-128 tokens."""
    import random

    from _shadow_candidates import shifted_ids

    rng = random.Random(seed)
    out = []
    for i in range(count):
        feeds = shifted_ids(
            rng.randint(1, max_batch), rng.randint(64, 128), seed=seed * 100_003 + i
        )
        out.append(feeds)
    return out


def rows(requests: list[dict]) -> int:
    return sum(len(r["input_ids"]) for r in requests)


class Client:
    """tritonclient's HTTP client, binary tensors; one request at a time (the trial judges
    answers, it does not time them)."""

    def __init__(self, port: int) -> None:
        import tritonclient.http as http

        self.http = http
        self.client = http.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)

    def infer(self, feeds: dict) -> None:
        inputs = []
        for name, array in feeds.items():
            tensor = self.http.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        self.client.infer(NAME, inputs)


def get_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as reply:
        return json.loads(reply.read())


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        return reply.read().decode()


def series(text: str, name: str) -> list[dict]:
    """Every sample of ``name``: its labels and value."""
    found = []
    for line in text.splitlines():
        match = re.match(rf"{name}(\{{([^}}]*)\}})?\s+(\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            found.append({"labels": labels, "value": float(match.group(3))})
    return found


def serve(args, refs: list[str], extra: list[str], label: str, *, registry: bool = True) -> Server:
    http, grpc = free_port(), free_port()
    command = [
        PY, "-m", "onnxgate", "serve", *refs, *(["--registry", registry_url(args.work)] if registry else []),
        "--http-port", str(http), "--grpc-port", str(grpc), *extra,
    ]  # fmt: skip
    server = Server(label, command, http, grpc, args.work / f"{label}.log", env=env())
    server.command = "onnxgate " + " ".join(command[3:])
    return server


def drain(port: int, *, limit: float = 600, name: str = NAME) -> dict:
    """Wait until no candidate of ``name`` has a request pending; the /shadow record then."""
    deadline = time.monotonic() + limit
    while True:
        record = get_json(port, f"/v2/models/{name}/shadow")
        if (
            all(c["queue"]["pending"] == 0 for c in record["candidates"])
            or time.monotonic() > deadline
        ):
            return record
        time.sleep(1)


# --- the phases --------------------------------------------------------------------------------


def shadow_trial(args, candidates: dict, log: list) -> dict:
    """The three candidates on the same traffic; then their reports and promotions."""
    numbers = [candidates["reexport"], candidates["int8"], candidates["bad"]]
    # a faithful candidate promoted by an earlier run moved the champion: back to the gated one
    url = registry_url(args.work)
    run(
        ["registry", "promote", f"{NAME}@{candidates['champion']}", "champion", "--registry", url],
        log=log,
    )
    refs = [f"{NAME}@champion"]
    extra = [x for n in numbers for x in ("--shadow", f"{NAME}@{n}")]
    extra += ["--shadow-fraction", "1.0", "--shadow-queue", str(args.shadow_queue)]
    if "--no-watch" in run(["serve", "--help"], log=[]).stdout:
        extra.append("--no-watch")  # the drift phase watches; here the CPU goes to the shadows
    server = serve(args, refs, extra, "shadow-trial")
    traffic = sentence_requests(args.requests, seed=0)
    started = time.monotonic()
    try:
        server.wait_ready(NAME, timeout=600)
        while not all(
            c["shadowing"] for c in get_json(server.http, f"/v2/models/{NAME}/shadow")["candidates"]
        ):
            time.sleep(1)  # every candidate proven before the first request: the same traffic
        client = Client(server.http)
        paced = 0.0
        for i, feeds in enumerate(traffic):
            client.infer(feeds)
            if i % 25 == 24:
                # keep the candidates' queues from filling: the trial wants verdicts from all
                # the traffic; shedding under load is what shadow_load.py measures
                record = get_json(server.http, f"/v2/models/{NAME}/shadow")
                while (
                    max(c["queue"]["pending"] for c in record["candidates"])
                    > args.shadow_queue // 2
                ):
                    time.sleep(0.2)
                    paced += 0.2
                    record = get_json(server.http, f"/v2/models/{NAME}/shadow")
        record = drain(server.http)
        text = metrics(server.http)
        time.sleep(args.persist_wait)  # the registry writer's last batch
    finally:
        server.stop()
    out = {
        "serve": server.command,
        "requests": len(traffic),
        "rows": rows(traffic),
        "seconds": round(time.monotonic() - started, 1),
        "client_paused_s": round(paced, 1),
        "record": record,
        "metrics": {
            name: series(text, name)
            for name in (
                "onnxgate_shadow_pairs_total",
                "onnxgate_shadow_shed_total",
                "onnxgate_shadow_rule_failures_total",
                "onnxgate_shadow_max_abs",
                "onnxgate_shadow_min_cosine",
            )
        },
    }
    return out


def verdicts(args, candidates: dict, log: list) -> dict:
    """``registry shadow-report`` of each candidate, then ``promote NAME@N champion
    --when-shadow-passes`` in the order bad, int8, faithful: a refused promotion leaves the
    champion where it was, so every verdict is against the same champion version; the faithful
    re-export, last, moves it."""
    url = registry_url(args.work)
    out = {"reports": {}, "promotions": {}}
    for key in ("reexport", "int8", "bad"):
        ref = f"{NAME}@{candidates[key]}"
        done = run(
            ["registry", "shadow-report", ref, "--json", "--registry", url], log=log, expect=None
        )
        human = run(["registry", "shadow-report", ref, "--registry", url], log=log, expect=None)
        try:
            report = json.loads(done.stdout)
        except ValueError:
            report = {"unparsed": done.stdout[-2000:], "stderr": done.stderr[-2000:]}
        out["reports"][key] = {
            "exit": done.returncode,
            "json": report,
            "text": human.stdout,
            "stderr": human.stderr,
        }
    for key in ("bad", "int8", "reexport"):
        ref = f"{NAME}@{candidates[key]}"
        done = run(
            ["registry", "promote", ref, "champion", "--when-shadow-passes", "--registry", url],
            log=log,
            expect=None,
        )
        out["promotions"][key] = {
            "exit": done.returncode,
            "stdout": done.stdout,
            "stderr": done.stderr,
        }
    shown = run(["registry", "show", f"{NAME}@champion", "--registry", url], log=log, expect=None)
    out["champion_after"] = shown.stdout[-4000:]
    return out


def drift_trial(args, log: list) -> dict:
    """Unshifted traffic, then shifted, to a watched champion: the drift alert after each phase."""
    window = args.watch_window
    extra = ["--watch", "--watch-window", str(window)]
    # the champion's gate run folder (its report.json beside the model): the same files as @1,
    # served without opening the registry
    model = args.work / "run-champion" / f"{NAME}.onnx"
    server = serve(args, [f"{NAME}={model}"], extra, "drift-trial", registry=False)
    phases = [
        ("reference", sentence_requests(args.drift_requests, seed=10)),
        ("unshifted", sentence_requests(args.drift_requests * 2, seed=11)),
        ("shifted", shifted_requests(args.drift_requests * 2, seed=12)),
    ]
    out = {"serve": server.command, "window_rows": window, "phases": []}
    try:
        server.wait_ready(NAME, timeout=600)
        client = Client(server.http)
        for label, requests in phases:
            for feeds in requests:
                client.infer(feeds)
            time.sleep(3)  # the watch's worker catches up
            text = metrics(server.http)
            out["phases"].append(
                {
                    "phase": label,
                    "requests": len(requests),
                    "rows": rows(requests),
                    "alert": series(text, "onnxgate_drift_alert"),
                    "score": series(text, "onnxgate_drift_score"),
                    "windows": series(text, "onnxgate_drift_windows_total"),
                    "shed": series(text, "onnxgate_drift_shed_total"),
                    "values": series(text, "onnxgate_drift_values_total"),
                }
            )
    finally:
        server.stop()
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--work", type=Path, default=CACHE / "trial")
    parser.add_argument("--fresh", action="store_true", help="a new registry and candidates")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--phases", default="shadow,drift,fallback")
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--shadow-queue", type=int, default=64)
    parser.add_argument("--persist-wait", type=float, default=5.0)
    parser.add_argument("--drift-requests", type=int, default=200)
    parser.add_argument("--watch-window", type=int, default=300)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "shadow_minilm.json")
    args = parser.parse_args(argv)
    if args.phases == "render":  # the Markdown of the JSON already written, nothing run
        doc = slim(json.loads(args.out.read_text()))
        args.out.write_text(json.dumps(doc, indent=2, default=str))
        args.out.with_suffix(".md").write_text(markdown(doc))
        return doc
    log: list[dict] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_start = [round(x, 2) for x in os.getloadavg()]
    candidates = prepare(args, log)
    print(json.dumps({k: v for k, v in candidates.items() if k != "listing"}), file=sys.stderr)
    (args.work / "prepare-log.json").write_text(json.dumps(log, indent=2))
    if args.prepare_only:
        return candidates
    doc = {
        "tool": "shadow_minilm",
        "started": started,
        "command": " ".join(
            ["python", "benchmarks/shadow_minilm.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "load_average_start": load_start,
        "commit": subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "candidates": candidates,
    }
    phases = args.phases.split(",")
    previous = args.out if args.out.is_file() else None
    if previous:
        kept = json.loads(previous.read_text())
        doc.update(
            {k: kept[k] for k in ("shadow", "drift", "fallback") if k in kept and k not in phases}
        )
    if "shadow" in phases:
        doc["shadow"] = shadow_trial(args, candidates, log)
    if "shadow" in phases or "verdicts" in phases:
        doc["shadow"].update(verdicts(args, candidates, log))
    if "drift" in phases:
        doc["drift"] = drift_trial(args, log)
    if "fallback" in phases:
        doc["fallback"] = fallback(args)
    doc["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["isa"] = isa()
    doc["log"] = log
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(slim(doc), indent=2, default=str))
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(args.out.with_suffix(".md").read_text())
    return doc


def slim(doc: dict) -> dict:
    """The JSON kept in results/: five worst pairs per candidate, no newest list, commands'
    output cut to its end (the Markdown shows what matters of it)."""
    for candidate in ((doc.get("shadow") or {}).get("record") or {}).get("candidates", []):
        candidate["worst"] = candidate.get("worst", [])[:5]
        candidate.pop("newest", None)
    for entry in doc.get("log", []):
        for key in ("stdout", "stderr"):
            if key in entry:
                entry[key] = entry[key][-1500:]
    return doc


def fmt(value, digits: int = 6) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def markdown(doc: dict) -> str:
    c = doc["candidates"]
    lines = [
        "# Three candidates in shadow beside a gated all-MiniLM-L6-v2 (`benchmarks/shadow_minilm.py`)",
        "",
        f"Command: `{doc['command']}` at onnxgate `{doc.get('commit', '?')}`, {doc['started']}; "
        f"ISA {doc['isa']}; load average {doc['load_average_start']} at start, "
        f"{doc['load_average_end']} at the end (2 vCPUs, shared: nothing here is a timing).",
        "",
        f"Champion `{NAME}@{c['champion']}` (the demo gate without old-runtime target, tune and bench). "
        f"Candidates: `@{c['reexport']}` faithful re-export (SDPA attention, gated by the same "
        f"config); `@{c['int8']}` the champion gate's int8 with its own contract; `@{c['bad']}` "
        f"planted bad variant (layer {c['planted']['layer']}'s Q/K/V weights "
        f"{', '.join(c['planted']['weights'])} plus noise of {c['planted']['noise_scale_of_std']} "
        "× their std, gated as an .onnx source against its own goldens: its gate passed).",
        "",
    ]
    if doc.get("notes"):
        lines += ["## Reading", ""] + [f"- {note}" for note in doc["notes"]] + [""]
    shadow = doc.get("shadow")
    if shadow:
        names = {
            str(c["reexport"]): "faithful re-export",
            str(c["int8"]): "gated int8",
            str(c["bad"]): "planted bad",
        }
        lines += [
            "## Shadow: the same traffic for all three",
            "",
            f"`{shadow['serve']}`",
            "",
            f"{shadow['requests']} requests ({shadow['rows']} sentences, 1-4 per request, padded to "
            f"their longest) in {shadow['seconds']} s; the client paused {shadow['client_paused_s']} s "
            "while a candidate's queue was over half full (the trial wants every request judged; "
            "shedding under load is `shadow_load.py`'s subject).",
            "",
            "| candidate | pairs | passed | failed | errors | shed (queue full) / runs cancelled | output | rule | failed | max abs | min cosine | first failure |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for cand in shadow["record"]["candidates"]:
            label = names.get(str(cand.get("version")), cand["candidate"])
            first = True
            for output, t in cand["outputs"].items():
                head = (
                    f"| {label} (`{cand['candidate']}`) | {cand['pairs']} | {cand['passed']} | {cand['failed']} "
                    f"| {cand['errors']} | {cand['shed']['queue_full']} / {cand.get('cancelled', '–')} "
                    if first
                    else "| | | | | | "
                )
                reason = (t["first_failure"] or "–").replace("|", "\\|")[:160]
                lines.append(
                    f"{head}| {output} | `{t['rule']}` | {t['failed']} | {fmt(t['max_abs'], 3)} "
                    f"| {fmt(t['min_cosine'])} | {reason} |"
                )
                first = False
        lines.append("")
        lines += ["### `registry shadow-report`", ""]
        for key, label in (
            ("reexport", "faithful re-export"),
            ("int8", "gated int8"),
            ("bad", "planted bad"),
        ):
            report = shadow["reports"][key]
            verdict = (
                (report["json"].get("verdict") or {}) if isinstance(report["json"], dict) else {}
            )
            lines += [
                f"**{label}** (`{NAME}@{c[key]}`): exit {report['exit']}, verdict "
                f"**{verdict.get('status', '?')}**, {verdict.get('pairs', '?')} pairs, "
                f"{verdict.get('failed_pairs', '?')} failed; buckets {verdict.get('buckets', {})}",
                "",
            ]
            for reason in verdict.get("reasons", ()):
                lines.append(f"- {reason}")
            for out in verdict.get("outputs", ()):
                lines.append(
                    f"- `{out['output']}` `{out['rule']}`: {out['failed']} of {out['pairs']} failed "
                    f"(rate {fmt(out['failure_rate'], 4)}), worst max abs {fmt(out.get('worst_max_abs'), 3)}, "
                    f"min cosine {fmt(out.get('min_cosine'))}"
                )
            lines.append("")
            text = report["text"].strip() or report["stderr"].strip()
            if text:
                lines += ["```", *text.splitlines()[:30], "```", ""]
        lines += ["### `registry promote NAME@N champion --when-shadow-passes`", ""]
        for key, label in (
            ("bad", "planted bad"),
            ("int8", "gated int8"),
            ("reexport", "faithful re-export"),
        ):
            promo = shadow["promotions"][key]
            message = (promo["stdout"] + promo["stderr"]).strip()
            lines += [
                f"**{label}** (`{NAME}@{c[key]}`): exit {promo['exit']}",
                "",
                "```",
                *message.splitlines()[:12],
                "```",
                "",
            ]
    drift = doc.get("drift")
    if drift:
        lines += [
            "## Drift: unshifted, then shifted traffic to a watched champion",
            "",
            f"`{drift['serve']}` (window {drift['window_rows']} rows). The first window of traffic is the "
            "reference; each later one is scored against it (PSI) and against the goldens.",
            "",
            "| phase | requests | rows | alerts raised | PSI against the reference window: input_ids / attention_mask / last_hidden_state / sentence_embedding | PSI against the goldens (same order) |",
            "|---|---|---|---|---|---|",
        ]
        tensors = ("input_ids", "attention_mask", "last_hidden_state", "sentence_embedding")
        for phase in drift["phases"]:
            raised = [
                f"{s['labels'].get('tensor', '?')} ({s['labels'].get('kind', '?')})"
                for s in phase["alert"]
                if s["value"] >= 1
            ]
            scores = {
                (s["labels"].get("tensor"), s["labels"].get("against")): s["value"]
                for s in phase["score"]
            }

            def row(against: str, scores=scores) -> str:
                return " / ".join(fmt(scores.get((t, against)), 3) for t in tensors)

            lines.append(
                f"| {phase['phase']} | {phase['requests']} | {phase['rows']} | "
                f"{', '.join(raised) or 'none'} | {row('reference')} | {row('golden')} |"
            )
        lines.append("")
    fb = doc.get("fallback")
    if fb and fb.get("alert"):
        lines += [
            "## Provider fallback: a provider that stops claiming nodes",
            "",
            "The champion in an in-process `Hub`; the provider is serve-watch's fake in front of a "
            "real fresh-session audit (see `fallback()`).",
            "",
            "| on_fallback | step | onnxgate_provider_fallback | nodes by provider | model ready | server ready | reason |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode in ("alert", "unready"):
            for step, f in fb[mode].items():
                value = max((s["value"] for s in f["fallback"]), default=None)
                nodes = ", ".join(
                    f"{s['labels'].get('provider')}={s['value']:.0f}" for s in f["nodes"]
                )
                lines.append(
                    f"| {mode} | {step} | {fmt(value)} | {nodes} | {f['model_ready']} | "
                    f"{f['server_ready']} | {(f['reason'] or '–')[:120]} |"
                )
        lines.append("")
    return "\n".join(lines)


def fallback(args) -> dict:
    """A provider that stops claiming nodes, seen by the served champion's placement audit.

    No GPU or OpenVINO provider runs in this process's ONNX Runtime, so the provider is the fake
    of serve-watch's tests (``tests/serve/test_watch_fallback.py``) in front of the real audit:
    every audit makes a real fresh session of the champion (``serve._fallback.probe``); the fake
    reports its nodes on ``FakeExecutionProvider`` until its "driver changes", then the real
    assignment (every node on CPU) shows. The champion is loaded in an in-process ``Hub`` (what
    ``serve`` runs), once with ``on_fallback = "alert"`` and once with ``"unready"``.
    """
    import asyncio
    import importlib

    from onnxgate.placement import NodePlacement
    from onnxgate.serve._hub import Hub, ServeConfig

    # serve-watch's modules, looked up by name: this script also runs (its other phases) on a
    # tree without them
    probe = importlib.import_module("onnxgate.serve._fallback").probe
    WatchSettings = importlib.import_module("onnxgate.serve._watch").WatchSettings

    fake, cpu = "FakeExecutionProvider", "CPUExecutionProvider"
    model = args.work / "run-champion" / f"{NAME}.onnx"
    driver = {"claims": True, "audits": 0}

    def audit(predictor):
        driver["audits"] += 1
        real = probe(predictor)
        nodes = [
            NodePlacement(node=n.node, op_type=n.op_type, domain=n.domain, provider=fake)
            if driver["claims"]
            else n
            for n in real.nodes
        ]
        off = [n for n in nodes if n.provider != fake]
        return real.model_copy(
            update={
                "passed": not off,
                "requested": [fake, cpu],
                "required": fake,
                "nodes": nodes,
                "assignments": {p: sum(n.provider == p for n in nodes) for p in (fake, cpu)},
                "violations": off,
            }
        )

    def figures(hub: Hub) -> dict:
        text = hub.metrics.text().decode()
        ready, why = hub.readiness(NAME)
        return {
            "fallback": series(text, "onnxgate_provider_fallback"),
            "nodes": series(text, "onnxgate_provider_nodes"),
            "checks": series(text, "onnxgate_provider_checks_total"),
            "server_ready": hub.ready(),
            "model_ready": ready,
            "reason": why,
        }

    async def trial(on_fallback: str) -> dict:
        driver["claims"] = True
        settings = ServeConfig(
            poll_seconds=0, watch=WatchSettings(placement_seconds=0, on_fallback=on_fallback)
        )
        hub = Hub(settings)
        await hub.load([f"{NAME}={model}"])
        try:
            hub.placements.probe = audit
            steps = {}
            hub.placements.check(hub.served(NAME).predictor)
            steps["driver as gated"] = figures(hub)
            driver["claims"] = False
            hub.placements.check(hub.served(NAME).predictor)
            steps["driver changed"] = figures(hub)
            driver["claims"] = True
            hub.placements.check(hub.served(NAME).predictor)
            steps["driver rolled back"] = figures(hub)
            return steps
        finally:
            await hub.stop()

    out = {"model": str(model)}
    for mode in ("alert", "unready"):
        out[mode] = asyncio.run(trial(mode))
    out["audits"] = driver["audits"]
    return out


if __name__ == "__main__":
    main()
