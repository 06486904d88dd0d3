"""An alias switch under load: does any request fail while ``onnxgate serve`` moves versions?

A registry gets all-MiniLM-L6-v2 as version 1 with alias ``prod``; ``onnxgate serve
minilm@prod --poll 1`` serves it while ``serve_load.py`` (its own process) keeps ``--concurrency``
clients busy. After ``--before`` seconds, version 2 (the same files registered again: the switch
still opens, proves and swaps in a second session) is registered and ``prod`` promoted to it.
The result: the load generator's error count over the whole window, the time from the promotion
to the server's "switched" log line, and which version answered last.

Usage:
    python benchmarks/serve_switch.py --model /path/minilm.onnx --out benchmarks/results/serve-switch.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from serve_bench import HERE, PY, free_port


def register(url: str, model: Path, alias: str | None) -> int:
    from onnxgate.contract import contract_paths, sha256_file
    from onnxgate.registry import open_registry

    contract, golden = contract_paths(model)
    report = {
        "passed": True,
        "steps": [],
        "artefacts": [{"role": "model", "sha256": sha256_file(model)}],
        "notes": ["registered by benchmarks/serve_switch.py, not by a gate run"],
    }
    with open_registry(url) as reg:
        files = {"model": model, "contract": contract, "golden": golden}
        return reg.register("minilm", files, report, alias=alias).number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--before", type=float, default=15.0)
    parser.add_argument("--duration", type=float, default=60.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve-switch-"))
    url = f"sqlite:///{work / 'registry.db'}"
    env = {**os.environ, "ONNXGATE_CACHE_DIR": str(work / "cache")}
    register(url, args.model, "prod")
    http, grpc = free_port(), free_port()
    log = work / "serve.log"
    server = subprocess.Popen(
        [PY, "-m", "onnxgate", "serve", "minilm@prod", "--registry", url, "--poll", "1",
         "--http-port", str(http), "--grpc-port", str(grpc)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready") as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        out = work / "load.json"
        load = subprocess.Popen(
            [PY, str(HERE / "serve_load.py"), "--url", f"127.0.0.1:{http}", "--protocol", "http",
             "--model", "minilm", "--concurrency", str(args.concurrency), "--duration",
             str(args.duration), "--warmup", "2", "--batch", "1", "--seq", "128",
             "--outputs", "sentence_embedding", "--rss-pid", str(server.pid), "--out", str(out)],
            stdout=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        time.sleep(2 + args.before)
        number = register(url, args.model, None)
        from onnxgate.registry import open_registry

        with open_registry(url) as reg:
            reg.promote(f"minilm@{number}", "prod")
        promoted = time.monotonic()
        switched = None
        while load.poll() is None:
            if switched is None and f"switched to version {number}" in log.read_text():
                switched = round(time.monotonic() - promoted, 2)
            time.sleep(0.1)
        result = json.loads(out.read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/models/minilm") as reply:
            versions = json.loads(reply.read())["versions"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    document = {
        "tool": "serve_switch",
        "model": str(args.model),
        "machine": result["machine"],
        "concurrency": args.concurrency,
        "window_s": result["window_s"],
        "completed": result["completed"],
        "errors": result["errors"],
        "error_messages": result["error_messages"],
        "requests_per_s": result["requests_per_s"],
        "latency": result["latency"],
        "switch_seconds": switched,
        "versions_after": versions,
        "server_exit": server.returncode,
        "timeline": result.get("timeline"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1))
    print(json.dumps({k: v for k, v in document.items() if k != "timeline"}, indent=1))


if __name__ == "__main__":
    main()
