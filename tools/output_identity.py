"""Is the text and JSON output of every onnxgate command the same before and after a change?

A refactor that must not change behaviour is checked by capturing what every command prints on a
fixed set of real models, once on the tree before and once on the tree after, and diffing the
two captures::

    PYTHONPATH=/before/src python tools/output_identity.py capture /tmp/before
    PYTHONPATH=/after/src  python tools/output_identity.py capture /tmp/after
    python tools/output_identity.py diff /tmp/before /tmp/after

Run both captures with this one script (the tree's own copy may differ); only ``PYTHONPATH``
changes. ``capture`` runs ``--help`` of every command and group (walked from the typer app), then
the fixed list in :func:`commands` in order (later commands read what earlier ones wrote:
contracts, a registry, a Triton repository), each as ``python -m onnxgate ...`` with the Python
running this script and its ``PYTHONPATH``, in a fresh working folder under the system's
temporary folder; it warns about any CLI command the list does not run. It writes, per command, ``NAME.stdout`` and ``NAME.stderr``
(normalised: see "Normalisation" below) and ``NAME.exit`` into OUTDIR; the untouched output under
``OUTDIR/raw`` (for reading, never diffed); and ``manifest.json`` (command lines, what was skipped
and why, seconds per command, what the normalisation needs; not diffed). ``diff`` compares two
such folders command by command and exits 1 when any command differs. ``normalise OUTDIR``
redoes the normalisation from ``raw`` and the manifest, for working on the rules.

Models (nothing is copied into the repository; the working folder gets copies, so contracts
written beside a model land there):

- ``../shared/corpus`` (or ``$ONNXGATE_CORPUS``): real models of other projects. On a machine
  without it, the commands that need it are recorded as skipped, on both sides alike.
- the onnx wheel's backend test data (a ``light`` model, a ``pytorch-converted`` model with its
  ``test_data_set_0``), present wherever onnx is installed;
- scikit-learn's bundled iris, fitted here with a fixed seed and exported by onnxgate itself
  (``export sklearn``, and a gate whose model source is ``sklearn:``): the capture needs the
  sklearn extra;
- ``tests/models.py``'s ``mlp``, and a tiny PyTorch module for ``export torch`` (without torch,
  the command's own exit-3 answer is what is captured).

Both captures must run on the same machine with the same packages: the figures of a model
(errors, cosines) are reproducible there, not across machines.

Normalisation removes what differs between two runs of the same code and nothing else, each rule
with its reason: :meth:`Context.always` for every command (the working folder, onnxgate's source
folder, times of the capture, digests of files holding such a time); :data:`TIMED` and
:data:`TIMED_DROPS` for the text of commands that print clock measurements (``Command.timed``);
:data:`MEASURED` and :data:`ABSENT` for keys of JSON documents; :data:`RANKED` for tables ordered
by a measured figure. JSON output is parsed, normalised and written back the way the CLI writes
it (``json.dumps``, indent 2), so key order, types and every value kept are compared exactly; a
document laid out otherwise is compared as text.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ONNXGATE_CORPUS", ROOT.parent / "shared" / "corpus"))
BACKEND = Path(onnx.__file__).parent / "backend" / "test" / "data"

COLUMNS = "250"
"""The width rich lays out for. Fixed, so output does not depend on the terminal; wide, so that a
table cell holding a measured sentence (a gate step's summary) is not wrapped at a place that
depends on the measurement."""

HMAC_KEY = "output-identity-key-0123456789"
"""A fixed contract key for ``contract sign`` and the signed ``verify`` (not a secret)."""

MEASURED_VALUE = "<measured>"


# --- what runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One onnxgate invocation of the capture."""

    name: str
    """File stem of its output in OUTDIR: unique and stable."""
    args: tuple[str, ...]
    """Arguments after ``python -m onnxgate``; paths relative to the working folder."""
    timed: bool = False
    """It prints figures measured on the clock: the :data:`TIMED` rules apply too."""
    ranked: bool = False
    """Its tables are ordered by a measured figure: their rows are compared as a set."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set for this command only."""
    needs: tuple[str, ...] = ()
    """Files (relative to the working folder) that must exist; when one is missing, skipped."""


@dataclass(frozen=True)
class Prepare:
    """A file operation between two commands, on what an earlier command wrote."""

    name: str
    act: Callable[[Path], None]


CORPUS_MODELS = (
    "mnist.onnx",
    "ultraface_rfb320.onnx",
    "superres_prepost_op18.onnx",
    "FastestDet.onnx",
    "ext_pytorch_super_resolution.onnx",
    "ext_bert_tokenizer.onnx",
    "super_resolution.onnx",
    "image_classifier32.onnx",
    "convcommon_test_model_0.onnx",
    "convcommon_test_model_1.onnx",
    "coreml_onehot_bikesharing.onnx",
)
"""The corpus models used (copied into the working folder's ``corpus/``)."""


def commands() -> list[Command | Prepare]:
    """Every command of the capture, in the order they run."""
    c: list[Command | Prepare] = []

    def add(name: str, *args: str, **kwargs: Any) -> None:
        c.append(Command(name, tuple(args), **kwargs))

    def both(name: str, *args: str, **kwargs: Any) -> None:
        """The command as text and as JSON (``--format json``)."""
        add(f"{name}.text", *args, **kwargs)
        add(f"{name}.json", *args, "--format", "json", **kwargs)

    mnist = ("corpus/mnist.onnx",)
    order = ("corpus/convcommon_test_model_0.onnx",)  # nodes not in topological order
    registry = ("--registry", "sqlite:///registry.db")

    both("runtimes", "runtimes")
    both("doctor", "doctor")

    # what a model is, and whether it will load
    for name in CORPUS_MODELS:
        path = f"corpus/{name}"
        add(f"inspect.{Path(name).stem}.text", "inspect", path, needs=(path,))
        add(f"check.{Path(name).stem}.text", "check", path, needs=(path,))
    both("inspect.mnist", "inspect", *mnist, needs=mnist)
    both("inspect.squeezenet", "inspect", "backend/light_squeezenet.onnx")
    add("inspect.missing.text", "inspect", "missing.onnx")
    both("inspect.not-onnx", "inspect", "not-a-model.onnx")
    both("check.convcommon0", "check", *order, needs=order)
    add("check.convcommon0.github", "check", *order, "--format", "github", needs=order)
    add("check.convcommon0.sarif", "check", *order, "--format", "sarif", needs=order)
    both("check.mnist-warning", "check", *mnist, "--fail-on", "warning", needs=mnist)
    both("check.squeezenet", "check", "backend/light_squeezenet.onnx")

    # exports: iris through skl2onnx, a tiny torch module
    iris = ("iris.joblib", "--data", "iris_X.npy")
    add("export.sklearn.text", "export", "sklearn", *iris, "--trust-pickle", "--out", "iris.onnx")
    add("export.sklearn.json", "export", "sklearn", *iris, "--trust-pickle", "--out", "iris2.onnx",
        "--format", "json")  # fmt: skip
    add("export.sklearn.no-pickle", "export", "sklearn", *iris, "--out", "iris3.onnx")
    net = ("export", "torch", "identity_net:net", "--dynamic", "x:0=batch")
    add("export.torch.text", *net, "--out", "net.onnx")
    add("export.torch.json", *net, "--out", "net2.onnx", "--format", "json")
    c.append(Prepare("iris-changed.onnx", changed_copy))

    # contracts of models exported elsewhere
    add("contract.init.mnist.text", "contract", "init", *mnist, needs=mnist)
    add("contract.init.mnist.exists", "contract", "init", *mnist, needs=mnist)
    add("contract.init.mlp.json", "contract", "init", "mlp.onnx", "--dim", "batch=1,5",
        "--format", "json")  # fmt: skip

    # do two executions agree
    both("compare.mnist", "compare", *mnist, needs=mnist)
    both("compare.iris", "compare", "iris.onnx", "--against", "ort:disable")
    conv = "backend/test_Conv2d"
    both("compare.conv2d", "compare", f"{conv}/model.onnx", "--inputs", f"{conv}/test_data_set_0")
    both("compare.convcommon0", "compare", *order, "--against", "ort:disable", needs=order)
    both("compare.mlp-metric", "compare", "mlp.onnx", "--metric", "y:cosine>=0.999")

    # where each node runs, and whether the contract holds
    both("placement.mnist", "placement", *mnist, needs=mnist)
    both("placement.iris", "placement", "iris.onnx", "--require", "cpu")
    both("verify.mnist", "verify", *mnist, needs=mnist)
    both("verify.iris", "verify", "iris.onnx")
    add("verify.mlp.text", "verify", "mlp.onnx", "--opt-level", "basic", "--threads", "1")
    key = {"ONNXGATE_CONTRACT_KEY": HMAC_KEY}
    add("contract.sign.text", "contract", "sign", "iris.onnx", env=key)
    add("contract.sign.json", "contract", "sign", *mnist, "--format", "json", env=key, needs=mnist)
    add("verify.signed.text", "verify", "iris.onnx", "--require-signature", env=key)
    add("verify.changed.text", "verify", "iris-changed.onnx")

    # timed: figures normalised away, the rest kept
    bench = ("--runs", "20", "--warmup", "2")
    both("bench.iris", "bench", "iris.onnx", *bench, timed=True)
    both("bench.mlp", "bench", "mlp.onnx", "--batch", "1,4", "--threads", "1", *bench, timed=True)
    add("bench.mlp-vs.text", "bench", "mlp.onnx", "--vs", "mlp-copy.onnx", *bench, timed=True)
    # basic: ONNX Runtime's layout pass names its reorder nodes differently from run to run
    profile = ("profile", *mnist, "--runs", "3", "--warmup", "1", "--top", "0", "--opt-level")
    both("profile.mnist", *profile, "basic", timed=True, ranked=True, needs=mnist)
    # no time budget: how far a budget lets the search go is measured
    tune = ("--threads", "1", "--budget", "0", "--contest-seconds", "0.1", "--no-fusions")
    both("tune.iris", "tune", "iris2.onnx", *tune, "--no-write", timed=True)

    # int8 within a budget: the accuracy gate alone, then with the speed gate (whose verdict is
    # measured: --allow-slower writes the model either way)
    quant = ("quantize", *mnist, "--mode", "dynamic", "--seed", "0")
    add("quantize.mnist.text", *quant, "--out", "mnist_int8.onnx", "--no-bench", needs=mnist)
    add("quantize.mnist.json", *quant, "--out", "mnist_int8b.onnx", "--bench-budget", "0.1",
        "--allow-slower", "--format", "json", timed=True, needs=mnist)  # fmt: skip
    add("quantize.iris.text", "quantize", "iris.onnx", "--out", "iris_int8.onnx", "--no-bench")
    both("compare.int8-localize", "compare", "mnist_int8.onnx", "--against", *mnist, "--localize",
         needs=("mnist_int8.onnx",))  # fmt: skip

    # the gate, its registry, and deployments of what it registered
    add("gate.init.text", "gate", "init", "mlp.onnx", "--no-probe", "--out", "starter.toml")
    add("gate.init.json", "gate", "init", *mnist, "--out", "starter2.toml", "--format", "json",
        needs=mnist)  # fmt: skip
    add("gate.init.exists", "gate", "init", "mlp.onnx", "--no-probe", "--out", "starter.toml")
    add("gate.run.iris", "gate", "run", "iris.toml", "--out", "run1", *registry, timed=True)
    add("gate.run.mlp", "gate", "run", "mlp.toml", "--out", "run2", *registry, timed=True)
    add("gate.run.mlp-cached.json", "gate", "run", "mlp.toml", "--out", "run3", *registry,
        "--format", "json", timed=True)  # fmt: skip
    add("gate.run.github", "gate", "run", "iris.toml", "--out", "run4", "--no-register",
        "--no-cache", "--format", "github", timed=True)  # fmt: skip
    add("gate.run.failing", "gate", "run", "failing.toml", "--out", "run5", *registry, timed=True,
        needs=mnist)  # fmt: skip
    add("gate.run.invalid", "gate", "run", "invalid.toml")
    both("registry.list", "registry", "list", *registry)
    both("registry.list-mlp", "registry", "list", "mlp", *registry)
    both("registry.show", "registry", "show", "iris@1", *registry, timed=True)
    add("registry.show.report", "registry", "show", "mlp", "--report", *registry, timed=True)
    add("registry.show.unknown", "registry", "show", "nobody@1", *registry)
    both("registry.promote", "registry", "promote", "iris@1", "champion", "--by", "identity",
         *registry)  # fmt: skip
    add("registry.promote.bad-alias", "registry", "promote", "iris@1", "9lives", *registry)
    add("registry.fetch.text", "registry", "fetch", "iris@champion", "--out", "fetched", *registry)
    add("registry.fetch.json", "registry", "fetch", "mlp@1", "--out", "fetched-mlp", *registry,
        "--format", "json")  # fmt: skip
    both("registry.fsck", "registry", "fsck", *registry)
    add("deploy.triton.text", "deploy", "triton", "iris@champion", "--out", "triton", *registry)
    add("deploy.triton.json", "deploy", "triton", "mlp@1", "--out", "triton", *registry,
        "--format", "json")  # fmt: skip
    both("deploy.check", "deploy", "check", "triton")
    both("deploy.kserve", "deploy", "kserve", "iris@champion", "--storage-uri",
         "s3://bucket/models", *registry)  # fmt: skip
    add("serve.ungated.json", "serve", "mlp.onnx", "--format", "json")
    return c


CLI_PATHS = """
import json, typer.main
from onnxgate.cli import app

def walk(command, path):
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, [*path, name])

print(json.dumps(list(walk(typer.main.get_command(app), []))))
"""
"""Every command and group of the CLI, walked from the typer app (nested groups included)."""


def cli_paths(env: dict[str, str]) -> list[list[str]]:
    """The CLI's commands and groups, the root first, as the tree under test declares them."""
    done = subprocess.run(
        [sys.executable, "-c", CLI_PATHS], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def help_commands(paths: list[list[str]]) -> list[Command]:
    """``--help`` of the root and of every command and group: their options are output too.

    At 100 columns, where ``cli/_help.py`` stacks each option's name and type above its help.
    """
    width = {"COLUMNS": "100"}
    return [Command(".".join(["help", *path]), (*path, "--help"), env=width) for path in paths]


def uncovered(paths: list[list[str]], listed: list[Command | Prepare]) -> list[str]:
    """Commands (leaves of the CLI's tree) that no command of the list runs."""
    leaves = [p for p in paths if p and not any(q[: len(p)] == p and q != p for q in paths)]
    ran = [c.args for c in listed if isinstance(c, Command)]
    return [" ".join(p) for p in leaves if not any(list(args[: len(p)]) == p for args in ran)]


# --- the working folder ----------------------------------------------------------------------

IRIS_TOML = """\
version = 1

[model]
name = "iris"
source = "sklearn:iris.joblib"
data = "iris_X.npy"
trust_pickle = true

[steps.bench]
batches = [1]
budget = 0.2

[register]
alias = "candidate"
description = "iris, exported by onnxgate's output identity capture"
tags = { data = "iris" }
"""
"""The gate through onnxgate's own export: every step but tune (its winner is measured, and would
change what is registered) and quantize (iris has nothing to quantise)."""

MLP_TOML = """\
version = 1

[model]
name = "mlp"
source = "mlp.onnx"

[steps.quantize]
enabled = true
bench = false

[steps.bench]
enabled = false

[register]
"""
"""A gate on an .onnx file, run twice: the second run is taken from the cache (the export of a
``sklearn:`` source always runs, and its contract's time makes every later step's key new). No
bench: a bench step is cached only when its timings were not spoiled, which is measured."""

FAILING_TOML = """\
version = 1

[model]
name = "mnist"
source = "corpus/mnist.onnx"

[steps.check]
fail_on = "warning"
"""
"""A gate that fails on a finding (mnist's fixed batch), so that its verdict is reproducible."""

INVALID_TOML = """\
version = 1
[model]
name = "m"
source = "mlp.onnx"
[steps.check]
fail_onn = 1
"""

TORCH_NET = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x)).softmax(-1)


def net():
    return Net().eval(), (torch.rand(2, 8),)
"""
"""``export torch``'s module, imported from the working folder (``python -m`` puts it first)."""


def prepare(work: Path) -> list[str]:
    """Fill the working folder with the models and files the commands read; what is missing."""
    missing = []
    (work / "corpus").mkdir()
    for name in CORPUS_MODELS:
        if (CORPUS / name).is_file():
            shutil.copy2(CORPUS / name, work / "corpus" / name)
        else:
            missing.append(f"corpus/{name}")
    (work / "backend").mkdir()
    shutil.copy2(BACKEND / "light" / "light_squeezenet.onnx", work / "backend")
    conv = BACKEND / "pytorch-converted" / "test_Conv2d"
    shutil.copytree(conv, work / "backend" / conv.name)

    sys.path.insert(0, str(ROOT / "tests"))
    from models import mlp, save  # tests/models.py: the suite's tiny models

    save(mlp(), work / "mlp.onnx")
    save(mlp(), work / "mlp-copy.onnx")
    _fit_iris(work)
    (work / "not-a-model.onnx").write_bytes(b"not a model\n")
    for name, text in [
        ("iris.toml", IRIS_TOML),
        ("mlp.toml", MLP_TOML),
        ("failing.toml", FAILING_TOML),
        ("invalid.toml", INVALID_TOML),
        ("identity_net.py", TORCH_NET),
    ]:
        (work / name).write_text(text)
    return missing


def _fit_iris(work: Path) -> None:
    """Iris, scaled and classified (seeded); every fifth row as the rows to prove parity on."""
    import joblib
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    estimator = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500, random_state=0))
    joblib.dump(estimator.fit(x, y), work / "iris.joblib")
    np.save(work / "iris_X.npy", x[::5].astype(np.float32))


def changed_copy(work: Path) -> None:
    """iris.onnx under another name with another producer, beside a copy of iris's contract."""
    proto = onnx.load(work / "iris.onnx")
    proto.producer_version = "changed"
    onnx.save(proto, work / "iris-changed.onnx")
    for suffix in (".contract.json", ".golden.npz"):
        shutil.copy2(work / f"iris{suffix}", work / f"iris-changed{suffix}")


# --- normalisation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A substitution on text (and on every string inside a JSON document), and why."""

    pattern: str
    replace: str
    why: str
    text_only: bool = False
    """Not applied to JSON strings: a JSON document keeps its figures under keys (see
    :data:`MEASURED`), and its sentences name fixed figures (``max_drop 0.01``) more often than
    measured ones."""


@dataclass(frozen=True)
class Drop:
    """Lines (or strings in a JSON list) that exist only because of a measurement, and why."""

    pattern: str
    why: str


TIMED = [
    Rule(
        r"; unreliable \((?:[^()]|\(s\))*\)",
        "",
        "the gate's bench summary names the machine's load when it spoiled the timings",
    ),
    Rule(
        r" \(timings unreliable\)",
        "",
        "the same verdict on the timings, in the bench summary's figures",
    ),
    Rule(
        r"(round \d+: \d+ × \d+ runs, best ).*",
        r"\1<measured>",
        "tune: the best candidate of a search round and its score are measured",
    ),
    Rule(
        r"^(defaults\s.*\s)\d+$",
        r"\1#",
        "tune: the contest row ends with the runs its time slices allowed",
    ),
    Rule(
        r"^(tuned: .*|defaults kept.*)$",
        "<decision>",
        "tune: whether the winner replaced the defaults is decided on measured figures",
    ),
    Rule(
        r"(?<![\w.])\d+(?:\.\d+)?(?= ?ms\b)",
        "#",
        "latencies in milliseconds (a gate step's ``p50 0.12 ms``)",
    ),
    Rule(
        r"(?<![\w.])\d+(?:\.\d+)?s(?!\w)",
        "#s",
        "durations of gate steps (``4.1s``)",
    ),
    Rule(
        r"\(\d+ s\)",
        "(# s)",
        "the gate's duration in whole seconds",
    ),
    Rule(
        r"(?<![\w.])\d+(?:\.\d+)?x\??(?!\w)",
        "#x",
        "ratios of two latencies (bench --vs); '?' marks one the machine spoiled",
        text_only=True,
    ),
    Rule(
        r"(?<![\w.])\d+(?:\.\d+)?%",
        "#%",
        "percentages in timed text: coefficients of variation, shares of run time",
        text_only=True,
    ),
    Rule(
        r"(?<![\w.])\d+\.\d+(?![\w.])",
        "#",
        "decimals in timed text, whose tables hold latencies, throughputs and durations without "
        "a unit. Integers (runs, batches, threads, node counts) and figures in exponent notation "
        "(parity errors) are kept",
        text_only=True,
    ),
]
"""Substitutions on the output of timed commands, in this order."""

TIMED_DROPS = [
    Drop(r"latencies vary by", "bench's noise warning: the CV of measured latencies"),
    Drop(r"UNRELIABLE", "the verdict that other load spoiled the timings"),
    Drop(r"^ratio\?: unreliable", "bench --vs: why its ratios are not measurements"),
    Drop(r"final contest was (timed twice|spoiled)", "tune: the contest was repeated under load"),
    Drop(r"^\s*best: ", "tune: the measured winner"),
    Drop(r"^\s*(unreliable: )?improvement ", "tune: the winner's measured improvement"),
    Drop(r"^best\s", "tune: the winner's contest row, printed when it is not the defaults"),
    Drop(r"the best candidate measured ", "tune: the winner's improvement, when too small"),
    Drop(r"^the search's winner \(", "tune: the winner (measured) failed parity"),
    Drop(r"(candidates measured before|the parity gate stopped after)", "tune: a budget ran out"),
    Drop(r"the machine was busy, and the means above", "profile: one run far slower than the rest"),
    Drop(
        r"^performance \(per machine fingerprint\)|^MACHINE\s+STEP\s+FIGURES|^[0-9a-f]{16}\s+\w+\s+\w+=",
        "registry show: performance is recorded only from a gate whose timings were not spoiled",
    ),
    Drop(
        r"speed unreliable|(slower|faster) than the float model (beyond noise|at every shape)",
        "quantize: the speed gate's verdict, on measured latencies",
    ),
]
"""Lines of timed output that appear or not depending on measurements."""

MEASURED: dict[str, str] = {
    # any command
    "candidate_ms": "how long one sample ran on the candidate (compare, export parity)",
    "reference_ms": "how long one sample ran on the reference",
    "seconds": "durations of a gate, a step, a tune run, a timing",
    # bench, tune, the gate's bench step, the registry's performance records
    "p50_ms": "latency percentile",
    "p90_ms": "latency percentile",
    "p99_ms": "latency percentile",
    "mean_ms": "mean latency",
    "min_ms": "fastest run",
    "latencies_ms": "every timed run",
    "throughput": "samples per second at the mean latency",
    "cv": "coefficient of variation of the latencies",
    "noisy": "whether the CV crossed the noise threshold",
    "conditions": "the machine's load, steal and drift while timing",
    "reliable": "whether that load spoiled the timings",
    "unreliable": "the same, in a gate step's figures",
    "steps[].report.results[].runs": "the gate's bench runs as many runs as its budget allows",
    ".ratio": "bench --vs ratios, tune's improvement",
    # tune: everything the search and the contest decided
    "tune .interval": "tune: bootstrap interval of the improvement",
    "tune .rounds[].best": "tune: a round's best candidate",
    "tune .rounds[].best_score": "tune: its score",
    "tune .defaults.runs": "tune: contest runs of the defaults",
    "tune .best": "tune: the winner, its settings and figures",
    "tune .settings": "tune: the settings kept (the defaults or the winner)",
    "tune .graph": "tune: the graph kept",
    "tune .replaced_defaults": "tune: the decision",
    "tune .decision": "tune: the decision, in words",
    "tune .phases": "tune: seconds per phase",
    # profile
    "profile run_ms": "profile: time per run",
    "profile node_ms": "profile: time in kernels per run",
    "profile .op_types[].ms": "profile: time per op type",
    "profile .op_types[].share": "profile: its share",
    "profile .by_provider[].ms": "profile: time per provider",
    "profile .by_provider[].share": "profile: its share",
    "profile .nodes[].ms": "profile: time per node",
    "profile .nodes[].share": "profile: its share",
    # quantize's speed gate
    "quantize .latency": "quantize: float and int8 latencies per shape, their ratio and runs",
    "quantize .speed.verdict": "quantize: slower, faster or within noise, on measured latencies",
    "quantize .speed.note": "quantize: the verdict in words, with the latencies",
    "quantize .speed.cost": "quantize: when slower, both models profiled",
    # signatures
    "registry .performance": "per machine, recorded only from gates whose timings were sound",
    "signing.value": "a signature covers the contract's creation time",
    "signing.content_sha256": "the digest of the signed content, creation time included",
}
"""JSON values replaced by ``<measured>``, by key: ``a.b`` matches a path ending in ``.a.b``, a
leading dot anchors at the document's root, ``[]`` stands for any list index; a command name and
a space before it limit the key to that command's output."""

ABSENT: dict[str, str] = {
    "figures.reliable": "a gate step's figures hold reliable = false only when load spoiled them",
    "figures.unreliable": "and then why",
}
"""JSON keys left out wherever they are, in :data:`MEASURED`'s notation: whether they are
written at all is measured."""

RANKED = (".op_types", ".by_provider", ".nodes")
"""JSON lists ordered by a measured figure (profile's, slowest first): compared sorted."""

RANKED_HEADERS = r"^(op type|provider|node)\s|^shapes \(inputs"
"""Text tables ordered by a measured figure (profile's): the rows under these headers, up to a
blank line or the next header, are compared sorted."""


@dataclass(frozen=True)
class Context:
    """What a capture knows that its output's volatile parts are made of."""

    work: str
    """The temporary working folder: a new name in every capture."""
    src: str
    """The folder onnxgate was imported from: two trees compared live in two folders."""
    dates: tuple[str, ...]
    """The UTC dates the capture ran on."""
    stamped: frozenset[str]
    """sha256 of every file the capture's commands wrote with a date of the capture inside."""

    def always(self) -> list[Rule]:
        """:data:`TIMED`'s counterpart for every command (it needs this capture's values)."""
        days = "|".join(re.escape(d) for d in self.dates)
        return [
            Rule(re.escape(self.work), "<work>", "the working folder is a new temporary folder"),
            Rule(re.escape(self.src), "<src>", "where onnxgate's source lives differs by tree"),
            Rule(
                rf"(?:{days})[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)?",
                "<time>",
                "times of this capture: contract creation, registration, gate start",
            ),
        ]


def stamped_hashes(text: str, stamped: frozenset[str]) -> str:
    """sha256 digests (or a prefix of 8+ hex digits) of files whose bytes hold a capture time.

    A contract records when it was created, and a gate report when the gate started: their
    sha256, and what names them (registry artefacts, fetch listings), differ every run. Digests
    of everything else (models, golden samples, configs) are kept.
    """
    if not stamped:
        return text

    def swap(match: re.Match[str]) -> str:
        digits = match.group(0)
        timed = any(digest.startswith(digits) for digest in stamped)
        return "<sha256 of a timestamped file>" if timed else digits

    return re.sub(r"(?<![0-9a-f])[0-9a-f]{8,64}(?![0-9a-f])", swap, text)


class Normaliser:
    """The rules for one command of one capture."""

    def __init__(self, context: Context, command: Command) -> None:
        self.context = context
        self.command = command
        self.rules = context.always() + (TIMED if command.timed else [])
        self.drops = TIMED_DROPS if command.timed else []

    def string(self, text: str, *, in_json: bool = False) -> str | None:
        """One line or JSON string, normalised; None when it exists only for a measurement."""
        if any(re.search(d.pattern, text) for d in self.drops):
            return None
        for rule in self.rules:
            if not (in_json and rule.text_only):
                text = re.sub(rule.pattern, rule.replace, text)
        return stamped_hashes(text, self.context.stamped)

    def text(self, text: str) -> str:
        """Line by line; in timed output, runs of spaces are one space, runs of blank lines one.

        rich sizes a column to its widest cell, which in timed tables is often a measured figure,
        so the padding of every cell in such a table is measured too; and a section left out for
        a measurement leaves the blank line that separated it.
        """
        lines: list[str] = []
        for line in text.split("\n"):
            kept = self.string(line)
            if kept is None:
                continue
            if self.command.timed:
                kept = re.sub(r" {2,}", " ", kept).rstrip()
                if not kept and lines and not lines[-1]:
                    continue
            lines.append(kept)
        if self.command.ranked:
            lines = _sort_ranked(lines)
        return "\n".join(lines)

    def document(self, text: str) -> str | None:
        """A JSON document as the CLI writes it, normalised; None when it is not one."""
        try:
            document = json.loads(text)
        except ValueError:
            return None
        if json.dumps(document, indent=2) + "\n" != text:
            return None  # not the CLI's layout: compared as text, layout included
        return json.dumps(self.value(document, ""), indent=2) + "\n"

    def value(self, value: Any, path: str) -> Any:
        """A JSON value at ``path`` (``.a[].b``), normalised; ``_DROPPED`` to leave it out."""
        if any(_matches(path, key, self.command.args[0]) for key in MEASURED):
            return MEASURED_VALUE
        if isinstance(value, dict):
            command = self.command.args[0]
            items = {
                k: self.value(v, f"{path}.{k}")
                for k, v in value.items()
                if not any(_matches(f"{path}.{k}", key, command) for key in ABSENT)
            }
            return {k: MEASURED_VALUE if v is _DROPPED else v for k, v in items.items()}
        if isinstance(value, list):
            items = [self.value(v, f"{path}[]") for v in value]
            kept = [v for v in items if v is not _DROPPED]
            if self.command.ranked and path in RANKED:
                kept.sort(key=lambda v: json.dumps(v, sort_keys=True))
            return kept
        if isinstance(value, str):
            kept = self.string(value, in_json=True)
            return _DROPPED if kept is None else kept
        return value


_DROPPED = object()


def _matches(path: str, key: str, command: str) -> bool:
    scope, _, key = key.rpartition(" ")
    if scope and scope != command:
        return False
    return path == key if key.startswith(".") else path.endswith(f".{key}")


def _sort_ranked(lines: list[str]) -> list[str]:
    """The rows of each table under :data:`RANKED_HEADERS`, sorted."""
    out: list[str] = []
    rows: list[str] = []
    ranked = False
    for line in lines:
        header = re.search(RANKED_HEADERS, line) is not None
        if ranked and line.strip() and not header:
            rows.append(line)
            continue
        out.extend(sorted(rows))
        rows = []
        out.append(line)
        ranked = header
    return out + sorted(rows)


def normalise(raw: Path, outdir: Path, manifest: dict[str, Any]) -> None:
    """Write each command's normalised output from its raw output."""
    context = Context(
        work=manifest["work"],
        src=manifest["src"],
        dates=tuple(manifest["dates"]),
        stamped=frozenset(manifest["stamped"]),
    )
    for name, entry in manifest["commands"].items():
        if "skipped" in entry:
            continue
        command = Command(name, tuple(entry["args"]), timed=entry["timed"], ranked=entry["ranked"])
        normaliser = Normaliser(context, command)
        stdout = (raw / f"{name}.stdout").read_text()
        document = normaliser.document(stdout)
        (outdir / f"{name}.stdout").write_text(
            normaliser.text(stdout) if document is None else document
        )
        (outdir / f"{name}.stderr").write_text(
            normaliser.text((raw / f"{name}.stderr").read_text())
        )
        (outdir / f"{name}.exit").write_text(f"{entry['exit']}\n")


# --- capture ---------------------------------------------------------------------------------


def environment(work: Path) -> dict[str, str]:
    """This process's environment, less what would make the output depend on the user's setup.

    Onnxgate's cache (runtime profiles, the gate's cache) and user data are private to the
    capture, so the first probe and the first gate run behave the same in every capture; keys,
    a registry or a store set by the user are left out.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNXGATE_")}
    if "ONNXGATE_ENV_DIR" in os.environ:  # isolated runtimes are built once per machine
        env["ONNXGATE_ENV_DIR"] = os.environ["ONNXGATE_ENV_DIR"]
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        env.pop(name, None)
    env.update(
        ONNXGATE_CACHE_DIR=str(work / ".cache"),
        XDG_DATA_HOME=str(work / ".data"),
        COLUMNS=COLUMNS,
        LINES="50",
        TZ="UTC",
    )
    return env


class Stamps:
    """Files the commands write, and which of them hold a date of this capture."""

    def __init__(self, work: Path, started: datetime) -> None:
        self.work = work
        self.started = started
        self.seen: dict[Path, tuple[int, int]] = {}
        self.stamped: set[str] = set()

    def dates(self) -> list[str]:
        """The UTC dates from the capture's start to now."""
        days = (datetime.now(UTC).date() - self.started.date()).days
        return [str(self.started.date() + timedelta(days=d)) for d in range(days + 1)]

    def scan(self) -> None:
        """Hash what changed since the last scan; keep the digests of files with a stamp."""
        stamp = re.compile(rf"(?:{'|'.join(self.dates())})[T ]\d\d:\d\d".encode())
        for path in self.work.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            status = path.stat()
            key = (status.st_mtime_ns, status.st_size)
            if self.seen.get(path) == key:
                continue
            self.seen[path] = key
            data = path.read_bytes()
            if stamp.search(data):
                self.stamped.add(hashlib.sha256(data).hexdigest())


def run(command: Command, work: Path, env: dict[str, str]) -> tuple[str, str, int]:
    """``python -m onnxgate ARGS`` in the working folder: stdout, stderr, exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "onnxgate", *command.args],
        cwd=work,
        env={**env, **command.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=900,
    )
    decode = lambda data: data.decode("utf-8", "backslashreplace")  # noqa: E731
    return decode(done.stdout), decode(done.stderr), done.returncode


def onnxgate_source(env: dict[str, str]) -> str:
    """The folder holding the ``onnxgate`` package the commands import."""
    code = "import onnxgate, pathlib; print(pathlib.Path(onnxgate.__file__).parents[1])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def capture(outdir: Path, *, keep: bool = False) -> int:
    """Run every command, write its output into ``outdir``; 0, or 2 when it cannot start."""
    if outdir.exists() and any(outdir.iterdir()):
        print(f"{outdir} is not empty; give a new folder", file=sys.stderr)
        return 2
    (outdir / "raw").mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="onnxgate-identity-")).resolve()
    try:
        manifest = _capture(work, outdir)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    normalise(outdir / "raw", outdir, manifest)
    ran = sum("skipped" not in e for e in manifest["commands"].values())
    print(f"captured {ran} of {len(manifest['commands'])} commands in {manifest['seconds']} s")
    if manifest["uncovered"]:
        print(f"warning: commands the list does not run: {', '.join(manifest['uncovered'])}")
    return 0


def _capture(work: Path, outdir: Path) -> dict[str, Any]:
    """Run the commands in ``work``, their raw output into ``outdir/raw``; the manifest."""
    clock = time.perf_counter()
    stamps = Stamps(work, datetime.now(UTC))
    missing = prepare(work)
    env = environment(work)
    stamps.scan()
    manifest: dict[str, Any] = {
        "python": sys.executable,
        "src": onnxgate_source(env),
        "work": str(work),
        "missing": missing,
        "commands": {},
    }
    print(f"onnxgate from {manifest['src']}, working in {work}", flush=True)
    paths = cli_paths(env)
    listed = commands()
    manifest["uncovered"] = uncovered(paths, listed)
    for item in help_commands(paths) + listed:
        if isinstance(item, Prepare):
            item.act(work)
            stamps.scan()
            continue
        entry: dict[str, Any] = {
            "args": list(item.args),
            "env": sorted(item.env),
            "timed": item.timed,
            "ranked": item.ranked,
        }
        manifest["commands"][item.name] = entry
        absent = [need for need in item.needs if not (work / need).exists()]
        if absent:
            entry["skipped"] = f"missing: {', '.join(absent)}"
            print(f"           skip  {item.name} ({entry['skipped']})", flush=True)
            continue
        start = time.perf_counter()
        stdout, stderr, entry["exit"] = run(item, work, env)
        entry["seconds"] = round(time.perf_counter() - start, 2)
        (outdir / "raw" / f"{item.name}.stdout").write_text(stdout)
        (outdir / "raw" / f"{item.name}.stderr").write_text(stderr)
        stamps.scan()
        print(f"  {entry['seconds']:6.1f} s  exit {entry['exit']}  {item.name}", flush=True)
    manifest["dates"] = stamps.dates()
    manifest["stamped"] = sorted(stamps.stamped)
    manifest["seconds"] = round(time.perf_counter() - clock, 1)
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# --- diff ------------------------------------------------------------------------------------


def _outputs(folder: Path) -> dict[str, str]:
    """Every normalised output file of a capture, by name (``NAME.stdout`` ...)."""
    return {
        p.name: p.read_text()
        for p in sorted(folder.iterdir())
        if p.is_file() and p.suffix in (".stdout", ".stderr", ".exit")
    }


def _skipped(folder: Path) -> dict[str, str]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return {n: e["skipped"] for n, e in manifest["commands"].items() if "skipped" in e}


def diff(a: Path, b: Path, *, context: int = 3, limit: int = 60) -> int:
    """Print what differs between two captures, per command; 1 if anything does, else 0."""
    left, right = _outputs(a), _outputs(b)
    differing: dict[str, list[str]] = {}
    for name in sorted(set(left) | set(right)):
        command = name.rsplit(".", 1)[0]
        if name not in left or name not in right:
            where = a if name not in left else b
            differing.setdefault(command, []).append(f"  {name}: not in {where}")
            continue
        if left[name] == right[name]:
            continue
        lines = list(
            difflib.unified_diff(
                left[name].splitlines(),
                right[name].splitlines(),
                f"{a.name}/{name}",
                f"{b.name}/{name}",
                n=context,
                lineterm="",
            )
        )
        shown = [f"  {line}" for line in lines[:limit]]
        if len(lines) > limit:
            shown.append(f"  ... {len(lines) - limit} more diff lines")
        differing.setdefault(command, []).extend(shown)
    for name, why in sorted(_skipped(a).items() ^ _skipped(b).items()):
        differing.setdefault(name, []).append(f"  skipped on one side only: {why}")
    total = len({n.rsplit(".", 1)[0] for n in set(left) | set(right)})
    for command, lines in differing.items():
        print(f"=== {command}")
        print("\n".join(lines))
    print(f"{len(differing)} of {total} commands differ")
    return 1 if differing else 0


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    capturing = sub.add_parser("capture", help="run every command, write its normalised output")
    capturing.add_argument("outdir", type=Path)
    capturing.add_argument("--keep", action="store_true", help="keep the working folder")
    again = sub.add_parser("normalise", help="redo a capture's normalisation from its raw output")
    again.add_argument("outdir", type=Path)
    comparing = sub.add_parser("diff", help="compare two captures; exit 1 when they differ")
    comparing.add_argument("a", type=Path)
    comparing.add_argument("b", type=Path)
    args = parser.parse_args(None if argv is None else list(argv))
    if args.mode == "capture":
        return capture(args.outdir, keep=args.keep)
    if args.mode == "normalise":
        manifest = json.loads((args.outdir / "manifest.json").read_text())
        normalise(args.outdir / "raw", args.outdir, manifest)
        return 0
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
