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
import shutil
import subprocess
import sys
import time
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


def run(command: list[str], *, log: list, expect: int | None = 0, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run an onnxgate command, keep it with its exit code and output for the report."""
    started = time.monotonic()
    done = subprocess.run([PY, "-m", "onnxgate", *command], capture_output=True, text=True, env=env(), cwd=cwd)
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
        raise SystemExit(f"onnxgate {' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
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
    (champion_dir / "gate.toml").write_text(trial_config("torch:onnxgate.examples.minilm:build", quantize=True, alias="champion"))
    run(["gate", str(champion_dir / "gate.toml"), "--out", str(work / "run-champion"), "--registry", url], log=log)
    run_dir = work / "run-champion"

    reexport_dir = work / "reexport"
    reexport_dir.mkdir(exist_ok=True)
    (reexport_dir / "shadow_sdpa.py").write_text(SDPA_MODULE)
    (reexport_dir / "gate.toml").write_text(trial_config("torch:shadow_sdpa:build", quantize=False, alias=None))
    run(["gate", str(reexport_dir / "gate.toml"), "--out", str(work / "run-reexport"), "--registry", url], log=log)

    int8 = register_int8(run_dir, url)

    bad_dir = work / "bad"
    bad_dir.mkdir(exist_ok=True)
    planted = perturb_attention(run_dir / f"{NAME}.onnx", bad_dir / "perturbed.onnx", layer=3, scale=0.05)
    (bad_dir / "gate.toml").write_text(bad_config("perturbed.onnx"))
    run(["gate", str(bad_dir / "gate.toml"), "--out", str(work / "run-bad"), "--registry", url], log=log)

    listing = run(["registry", "list", "--registry", url], log=log).stdout
    numbers = {"champion": 1, "reexport": 2, "int8": int8, "bad": 4, "planted": planted, "listing": listing}
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
    document["notes"] = [*document.get("notes", []), "the int8 model of this gate run, registered as a version of its own for the shadow trial"]
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--work", type=Path, default=CACHE / "trial")
    parser.add_argument("--fresh", action="store_true", help="a new registry and candidates")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "shadow_minilm.json")
    args = parser.parse_args(argv)
    log: list[dict] = []
    candidates = prepare(args, log)
    print(json.dumps({k: v for k, v in candidates.items() if k != "listing"}), file=sys.stderr)
    (args.work / "prepare-log.json").write_text(json.dumps(log, indent=2))
    if args.prepare_only:
        return candidates
    return candidates


if __name__ == "__main__":
    main()
