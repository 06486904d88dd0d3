"""``onnxgate gate init``: a starter ``gate.toml`` with every step, commented, for one model.

The starter passes on a healthy model: the settings are the library's defaults, the thresholds
are left for the user to set, and the steps that need the user's data (quantize) or a budget of
minutes (tune) say how to turn them on.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from onnxgate._fs import atomic_write_text
from onnxgate.errors import ConfigError
from onnxgate.gate._config import CONFIG_VERSION, load_config


def _toml(value: object) -> str:
    """A TOML literal for strings, numbers, booleans and lists of them (JSON spells them alike)."""
    return json.dumps(value)


def _name_of(source: str) -> str:
    tail = source.split(":")[-1] if source.startswith(("torch:", "sklearn:")) else source
    stem = Path(tail).stem if "/" in tail or tail.endswith((".onnx", ".joblib", ".pkl")) else tail
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "model"
    return name[:128]


def _batch_and_dims(source: str) -> tuple[bool, list[str]]:
    """Whether the first input has a symbolic batch axis, and the other symbolic dims."""
    from onnxgate.model import Signature, load_model

    loaded = load_model(source, load_weights=False)
    signature = Signature.from_graph(loaded.proto.graph)
    batch, others = False, []
    for spec in signature.inputs:
        for axis, dim in enumerate(spec.shape or ()):
            if isinstance(dim, str):
                if axis == 0 and spec is signature.inputs[0]:
                    batch = True
                elif dim not in others and dim != (signature.inputs[0].shape or [None])[0]:
                    others.append(dim)
    return batch, others


def starter_config(source: str, runtimes: Sequence[str] = (), *, base: Path | None = None) -> str:
    """The text of a starter ``gate.toml`` for ``source``.

    An .onnx path inside ``base`` (the config's folder) is written relative to it.

    Raises:
        ConfigError: the source is not an .onnx file, ``torch:`` entry or ``sklearn:`` file.
        ModelLoadError: the .onnx file cannot be read.
    """
    kind = (
        "torch"
        if source.startswith("torch:")
        else "sklearn"
        if source.startswith("sklearn:")
        else "onnx"
    )
    if kind == "onnx" and not source.endswith(".onnx"):
        raise ConfigError(
            f"{source!r} is not an .onnx file, torch:package.module:factory or "
            "sklearn:estimator.joblib."
        )
    if kind == "onnx":
        batch, dims = _batch_and_dims(source)
        if base is not None and Path(source).resolve().is_relative_to(base.resolve()):
            source = os.path.relpath(Path(source).resolve(), base.resolve())
        else:
            source = str(Path(source).resolve())
    else:
        batch, dims = True, []
    targets = ["installed", *runtimes]
    model_extra = {
        "onnx": "",
        "torch": (
            "# dynamic axes, as `export torch --dynamic`:\n"
            '# dynamic = ["input_ids:0=batch", "input_ids:1=seq"]\n'
            '# output_names = ["logits"]\n'
            "# opset = 18                 # default: the exporter's, capped by the oldest target\n"
        ),
        "sklearn": (
            'data = "rows.npz"            # the rows the conversion is proved on (required)\n'
            "# trust_pickle = false       # a pickled estimator runs code: only files you made\n"
        ),
    }[kind]
    bench_dims = "".join(f"# dims = {{ {d} = [128] }}\n" for d in dims[:1])
    return f"""\
# onnxgate gate config: `onnxgate gate gate.toml` runs every step below, writes a run folder
# (report.json, report.html, junit.xml, the artefacts) and registers the version if all passed.
# Unknown keys are errors. Relative paths are relative to this file.
version = {CONFIG_VERSION}

[model]
name = {_toml(_name_of(source))}          # the registry's name
source = {_toml(source)}
{model_extra}
[targets]
# `installed` and releases or packages, each installed once into an isolated environment:
# "onnxruntime==1.20.1", "onnxruntime-openvino==1.24.1"
runtimes = {_toml(targets)}
providers = []                 # e.g. ["cuda"]; CPU is appended

[steps.export]
# torch/sklearn: parity of the export against the source; .onnx: golden outputs for the contract,
# from the reference evaluator, confirmed by a second runner.
# [steps.export.tolerances]
# atol = 1e-4
# rtol = 1e-3
# metrics = ["output:cosine>=0.999"]

[steps.check]
# static checks against every target runtime
ignore = []
fail_on = "error"

[steps.compare]
# ONNX Runtime (all optimisations) against the reference evaluator; or "ort:disable",
# "torch:package.module:factory", another .onnx file
against = "reference"
localize = true                # on a miss, find and replay the first diverging node
# [steps.compare.feeds]
# inputs = "samples.npz"       # default: seeded synthetic feeds
# dims = {{ batch = [1, 4] }}

[steps.verify]
# the contract's golden samples on every target runtime (default: targets.runtimes)

[steps.placement]
# where each node runs; `require` fails the gate when a node is elsewhere (silent CPU fallback)
# require = "cuda"             # default: the first target provider
allow_ops = []

[steps.tune]
# search threads, optimisation level and fusions; the winner is recorded in the contract
enabled = true
objective = "latency"
time_budget = 180.0            # seconds the whole tuning may take
contest_seconds = 2.0          # seconds per side of the final contest
max_runs = 30
{"batch = 1" if batch else "# batch = 1"}

[steps.quantize]
# int8 inside an accuracy budget on held-apart data, and not slower than float
enabled = false                # turn on with your evaluation data
mode = "dynamic"
max_drop = 0.01                # 1 - cosine (or accuracy points with labels)
# eval = "heldout.npz"
# required = false             # a miss is reported without failing the gate

[steps.bench]
{"batches = [1]" if batch else "# batches = [1]"}
{bench_dims}budget = 2.0                   # seconds of timed runs per configuration
# vs = "torch:package.module:factory"   # a contender, each in its own process, interleaved
# min_speedup = 1.0            # fail unless at least this many times faster than `vs`
# max_p50_ms = 20.0
# max_p99_ms = 50.0
# max_size_mb = 100.0

[register]
# a passing gate registers a version; `onnxgate registry promote` moves aliases later
alias = "champion"
# registry = "postgresql+psycopg://user@host/db"   # default: $ONNXGATE_REGISTRY or SQLite

[output]
dir = "gate-runs"
"""


def write_starter(
    source: str, out: Path, runtimes: Sequence[str] = (), *, force: bool = False
) -> Path:
    """Write a starter config to ``out`` (atomically) after checking it validates.

    Raises:
        ConfigError: ``out`` exists (without ``force``), or the source is not a model.
    """
    if out.exists() and not force:
        raise ConfigError(f"{out} exists.", hint="Give another --out, or --force to replace it.")
    text = starter_config(source, runtimes, base=out.parent)
    atomic_write_text(out, text)
    load_config(out)  # a starter that does not validate is a bug, caught here rather than later
    return out
