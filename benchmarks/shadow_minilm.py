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
    run(
        [
            "gate",
            str(champion_dir / "gate.toml"),
            "--out",
            str(work / "run-champion"),
            "--registry",
            url,
        ],
        log=log,
    )
    run_dir = work / "run-champion"

    reexport_dir = work / "reexport"
    reexport_dir.mkdir(exist_ok=True)
    (reexport_dir / "shadow_sdpa.py").write_text(SDPA_MODULE)
    (reexport_dir / "gate.toml").write_text(
        trial_config("torch:shadow_sdpa:build", quantize=False, alias=None)
    )
    run(
        [
            "gate",
            str(reexport_dir / "gate.toml"),
            "--out",
            str(work / "run-reexport"),
            "--registry",
            url,
        ],
        log=log,
    )

    int8 = register_int8(run_dir, url)

    bad_dir = work / "bad"
    bad_dir.mkdir(exist_ok=True)
    planted = perturb_attention(
        run_dir / f"{NAME}.onnx", bad_dir / "perturbed.onnx", layer=3, scale=0.05
    )
    (bad_dir / "gate.toml").write_text(bad_config("perturbed.onnx"))
    run(
        ["gate", str(bad_dir / "gate.toml"), "--out", str(work / "run-bad"), "--registry", url],
        log=log,
    )

    listing = run(["registry", "list", "--registry", url], log=log).stdout
    numbers = {
        "champion": 1,
        "reexport": 2,
        "int8": int8,
        "bad": 4,
        "planted": planted,
        "listing": listing,
    }
    known.write_text(json.dumps(numbers, indent=2))
    return numbers


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
    sentences = unshifted_sentences(sum(sizes), seed=seed)
    requests, at = [], 0
    for size in sizes:
        feeds = tokenize(sentences[at : at + size], seq=128)
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


def serve(args, refs: list[str], extra: list[str], label: str) -> Server:
    http, grpc = free_port(), free_port()
    command = [
        PY, "-m", "onnxgate", "serve", *refs, "--registry", registry_url(args.work),
        "--http-port", str(http), "--grpc-port", str(grpc), *extra,
    ]  # fmt: skip
    server = Server(label, command, http, grpc, args.work / f"{label}.log", env=env())
    server.command = "onnxgate " + " ".join(command[3:])
    return server


def drain(port: int, *, limit: float = 600) -> dict:
    """Wait until no candidate has a request pending; the /shadow record then."""
    deadline = time.monotonic() + limit
    while True:
        record = get_json(port, f"/v2/models/{NAME}/shadow")
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
    refs = [f"{NAME}@champion"]
    extra = [x for n in numbers for x in ("--shadow", f"{NAME}@{n}")]
    extra += ["--shadow-fraction", "1.0", "--shadow-queue", str(args.shadow_queue), "--no-watch"]
    server = serve(args, refs, extra, "shadow-trial")
    traffic = sentence_requests(args.requests, seed=0)
    started = time.monotonic()
    try:
        server.wait_ready(NAME, timeout=600)
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
    url = registry_url(args.work)
    out["reports"], out["promotions"] = {}, {}
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
    # bad first, the faithful one last: a promotion moves `next`, never the champion, so every
    # verdict is against the same champion version
    for key in ("bad", "int8", "reexport"):
        ref = f"{NAME}@{candidates[key]}"
        done = run(
            ["registry", "promote", ref, "next", "--when-shadow-passes", "--registry", url],
            log=log,
            expect=None,
        )
        out["promotions"][key] = {
            "exit": done.returncode,
            "stdout": done.stdout,
            "stderr": done.stderr,
        }
    return out


def drift_trial(args, log: list) -> dict:
    """Unshifted traffic, then shifted, to a watched champion: the drift alert after each phase."""
    window = args.watch_window
    extra = ["--watch", "--watch-window", str(window)]
    server = serve(args, [f"{NAME}@champion"], extra, "drift-trial")
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
    if "drift" in phases:
        doc["drift"] = drift_trial(args, log)
    if "fallback" in phases:
        doc["fallback"] = fallback(args)
    doc["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["isa"] = isa()
    doc["log"] = log
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    return doc


def isa() -> str:
    import re as _re

    try:
        flags = set(
            _re.findall(r"avx512[a-z_]*|avx2|amx[a-z_]*", Path("/proc/cpuinfo").read_text())
        )
    except OSError:
        return "unknown"
    return " ".join(sorted(flags))


def fallback(args) -> dict:
    """Filled in once serve-watch's fake provider is merged."""
    return {"status": "not run"}


if __name__ == "__main__":
    main()
