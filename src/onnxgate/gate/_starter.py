"""The text of a starter ``gate.toml``: every step's table, with what ``gate init``'s probe found.

Each table says why it holds what it holds: the header what was probed, ``[feeds]`` what the
export will prove (and what this machine's speed capped), ``[steps.export]`` and
``[steps.compare]`` where golden outputs and comparisons come from when the reference evaluator
cannot run the model, and the tolerances the probe measured within float noise.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from onnxgate._words import toml_key
from onnxgate.gate._config import CONFIG_VERSION
from onnxgate.gate._probe import Probe
from onnxgate.web import WEB_RELEASE


def _toml(value: object) -> str:
    """A TOML literal for strings, numbers, booleans and lists of them (JSON spells them alike)."""
    return json.dumps(value)


_GENERIC_MODULES = frozenset({"model", "models", "net", "nets", "network", "main", "__init__"})


_GENERIC_STEMS = frozenset({"model", "inference", "net", "network", "graph", "export", "onnx"})
"""File stems that name no model: ``model.onnx`` is what exporters and wheels call every model."""


_VARIANTS = ("_quantized", "_quant", "_int8", "_uint8", "_fp16", "_fp32", "_optimized", "_opt")
"""Suffixes of a generic stem that tell a variant apart (``model_quantized``): kept in the name."""


_GENERIC_FOLDERS = frozenset(
    {"models", "model", "onnx", "weights", "export", "exported", "output", "outputs", "assets"}
)
"""Folders that hold models without naming them (Hugging Face's ``REPO/onnx/model.onnx``)."""


def _folder_name(path: Path) -> str:
    """A file's stem, or for a generic one (``model.onnx``) the nearest folder that names it.

    ``magika/models/standard_v3_3/model.onnx`` is ``standard_v3_3``; ``minilm/onnx/
    model_quantized.onnx`` is ``minilm_quantized``; a folder with a generic name is passed over.
    """
    stem = path.stem
    base, variant = stem.lower(), ""
    for suffix in _VARIANTS:
        if base.endswith(suffix):
            base, variant = base.removesuffix(suffix), stem[len(base) - len(suffix) :]
            break
    if base not in _GENERIC_STEMS:
        return stem
    for folder in path.absolute().parents:
        if folder.name and folder.name.lower() not in _GENERIC_FOLDERS:
            return folder.name + variant
    return stem


def _name_of(source: str) -> str:
    """The registry's name for a source: the file's stem, or a torch entry point's module.

    ``torch:pkg.resnet:build`` is ``resnet``, not ``build`` (factories are called ``build``,
    ``create``, ``factory`` in every project); a generic module name (``pkg.models``) gives way
    to its package (``pkg``). A file with a generic stem (``model.onnx``) takes its folder's name
    (see ``_folder_name``).
    """
    if source.startswith("torch:"):
        parts = source.split(":")[1].split(".")
        stem = parts[-1]
        if stem in _GENERIC_MODULES and len(parts) > 1:
            stem = parts[-2]
    else:
        tail = source.split(":")[-1] if source.startswith("sklearn:") else source
        path = "/" in tail or tail.endswith((".onnx", ".joblib", ".pkl"))
        stem = _folder_name(Path(tail)) if path else tail
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "model"
    return name[:128]


def _comment(text: str, width: int = 98) -> str:
    """``text`` as ``#`` lines of at most ``width`` characters."""
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, width - 2))


def _dims_toml(dims: Mapping[str, Sequence[int]]) -> str:
    return "{ " + ", ".join(f"{toml_key(k)} = {_toml(list(v))}" for k, v in dims.items()) + " }"


def _ranges_comment(probe: Probe | None) -> str:
    """What the export will prove without ``[feeds] dims``, and which tops this machine capped.

    A starter range stops where one golden sample would take more than ``SAMPLE_SECONDS``: on
    a slower machine it is narrower. Said here so a narrow range is never taken for the model's.
    """
    from onnxgate.contract import SAMPLE_SECONDS

    if probe is None or not any(not r.given for r in probe.ranges.values()):
        return ""
    listed = ", ".join(f"{k} {r.low}..{r.high}" for k, r in probe.ranges.items())
    text = f"The export will prove {listed}, each at both ends and between."
    capped = {k: r for k, r in probe.ranges.items() if r.uncapped is not None}
    if capped:
        said = "; ".join(
            f"{k} at {r.high}, not {r.uncapped}" for k, r in capped.items() if r.uncapped
        )
        took = (
            f"one golden sample would take the ONNX reference evaluator about "
            f"{probe.sample_seconds:.2g} s or more ({probe.reference_skipped})"
            if probe.sample_estimated
            # the evaluator ran the smallest sample first; the time is that sample's
            else f"the ONNX reference evaluator took {probe.sample_seconds:.2g} s on one golden "
            f"sample ({probe.reference_feeds.split('; ')[0]})"
        )
        text += (
            f" Capped by this machine's speed, not by the model: {said}. gate init's probe: "
            f"{took}, and a starter range stops where one sample would take more than "
            f"{SAMPLE_SECONDS:.0f} s (the export measures again). A faster machine proves more; "
            'so do [steps.export] reference = "ort:disable" with second_opinion = false (golden '
            "outputs from ONNX Runtime without optimisations, far faster, with no independent "
            "check), and dims with the sizes you serve (proven whatever they cost)."
        )
    return _comment(text)


def _starter_dims(probe: Probe | None, free: Sequence[str]) -> str:
    """``# dims = {...}``: placeholders, or the starter ranges uncapped when this machine capped one."""
    ranges = probe.ranges if probe is not None else {}
    capped = any(r.uncapped is not None for r in ranges.values())
    if not capped or set(free) - set(ranges):
        return "{ " + ", ".join(f"{toml_key(d)} = [MIN, MAX]" for d in free) + " }"
    return _dims_toml({k: [r.low, r.uncapped or r.high] for k, r in ranges.items()})


def feeds_table(
    probe: Probe | None,
    free: Sequence[str] | None,
    *,
    inputs: str | None,
    dims: Mapping[str, Sequence[int]],
    ranges: Mapping[str, str],
    seed: int,
) -> str:
    """``[feeds]``: as given, left to fill, or a commented template naming the free dimensions.

    It is left to fill (uncommented, with a placeholder file) when ONNX Runtime cannot run the
    feeds the steps would synthesize.
    """
    listed = (", ".join(free) or "none") if free is not None else "known once it is exported"
    placeholder = _starter_dims(probe, free or ())
    failed = probe is not None and probe.loads and probe.ort_error is not None
    head = _comment(
        "The feeds of every step (a step's own [steps.X.feeds] overrides them). Free "
        f"dimensions of the model's inputs: {listed}."
    ) + _ranges_comment(probe)
    if inputs is not None or dims or ranges:
        lines = ["[feeds]\n", head]
        if failed:
            lines.append(_comment(f"ONNX Runtime cannot run these feeds: {probe.ort_error}"))
        if inputs is not None:
            lines.append(f"inputs = {_toml(inputs)}\n")
        if dims:
            lines.append(f"dims = {_dims_toml(dims)}   # serving range: [MIN, MAX], or [SIZE]\n")
        if ranges:
            lines.append(
                "ranges = { "
                + ", ".join(f"{toml_key(k)} = {_toml(v)}" for k, v in ranges.items())
                + " }\n"
            )
        if seed:
            lines.append(f"seed = {seed}\n")
        return "".join(lines) + "\n"
    if failed:
        return (
            "[feeds]\n"
            + head
            + _comment(
                "gate init ran the model on the feeds the steps would synthesize, and ONNX "
                f"Runtime cannot run them: {probe.ort_error}. Put real inputs in the file below "
                "(an .npz with one array per input), or give each free dimension the sizes you "
                "serve in `dims` instead, then run the gate."
            )
            + 'inputs = "samples.npz"\n'
            + (f"# dims = {placeholder}\n" if free else "")
            + "\n"
        )
    return (
        "# [feeds]\n"
        + head
        + '# inputs = "samples.npz"       # real inputs; default: seeded synthetic feeds\n'
        + (f"# dims = {placeholder}   # the sizes you serve\n" if free else "")
        + "\n"
    )


def _header(kind: str, probe: Probe | None) -> str:
    """What ``gate init`` probed, so the file promises no more than that."""
    if probe is None:
        what = {"torch": "PyTorch", "sklearn": "scikit-learn"}.get(kind, kind)
        return _comment(
            f"Not probed: gate init does not export {what} sources (the export step does). The "
            "steps below are the library's defaults; the first run says what to change."
        )
    ran = (
        f"gate init ran the model once with {probe.runtime} on the feeds the steps will use "
        f"({probe.feeds})"
    )
    if not probe.loads:
        return _comment(
            f"{ran}: ONNX Runtime does not load it ({probe.ort_error}). No step below can pass "
            "on this machine until it does."
        )
    if probe.ort_error is not None:
        return _comment(
            f"{ran}: ONNX Runtime cannot run them. Fill in [feeds] below: until then no step "
            "passes."
        )
    if probe.reference_error is not None:
        said = "golden outputs and comparisons come from ONNX Runtime without graph optimisations"
        return _comment(
            f"{ran}: ONNX Runtime ran them; the ONNX reference evaluator cannot run the model, "
            f"so {said} (see [steps.export] and [steps.compare]). The steps below pass as "
            "written unless the two disagree (a finding) or a threshold you set is missed."
        )
    if probe.reference_skipped is not None:
        return _comment(
            f"{ran}: ONNX Runtime ran them. The reference evaluator, the default source of "
            f"golden outputs, was not probed ({probe.reference_skipped}): see [steps.export]."
        )
    beyond = [d for d in probe.disagreements if not d.noise]
    if beyond:
        said = "; ".join(d.text() for d in beyond)
        return _comment(
            f"{ran}, and the ONNX reference evaluator on {probe.reference_feeds}: both ran, but "
            f"the evaluator and ONNX Runtime without optimisations (the export's second opinion) "
            f"disagree beyond float noise: {said}. The export fails on this until one of them is "
            "found wrong: `onnxgate compare` localizes the first diverging node."
        )
    noise = (
        " They differ by float noise on "
        + ", ".join(d.output for d in probe.disagreements)
        + ": see [steps.export.tolerances]."
        if probe.disagreements
        else ""
    )
    return _comment(
        f"{ran}, and the ONNX reference evaluator on {probe.reference_feeds}: both ran, so the "
        "steps below pass as written unless the two disagree (a finding) or a threshold you set "
        f"is missed.{noise}"
    )


def _tolerances(probe: Probe | None, step: str) -> str:
    """A ``[steps.STEP.tolerances]`` table for the outputs the probe found within float noise."""
    from onnxgate.gate._probe import HEADROOM, NOISE_ABS, NOISE_COSINE

    noise = [d for d in (probe.disagreements if probe is not None else []) if d.noise]
    if not noise:
        return ""
    rtol = 1e-4  # the float32 default, kept: only the absolute floor was too tight
    said = "; ".join(d.text() for d in noise)
    entries = ", ".join(f"{_toml(d.output)} = [{d.atol:g}, {rtol:g}]" for d in noise)
    return (
        _comment(
            f"gate init's probe: the reference evaluator and ONNX Runtime without optimisations "
            f"differ by float noise ({said}; noise: at most {NOISE_ABS:g} of the output's scale, "
            f"cosine >= {NOISE_COSINE}), so each such output's atol is {HEADROOM} times the "
            "difference measured."
            if step == "export"
            else "The same outputs, the same float noise (see [steps.export.tolerances])."
        )
        + f"[steps.{step}.tolerances]\nper_output = {{ {entries} }}\n"
    )


_TOLERANCES_EXAMPLE = """# [steps.export.tolerances]
# atol = 1e-4
# rtol = 1e-3
# metrics = ["output:cosine>=0.999"]
"""


def _export_table(probe: Probe | None) -> str:
    if probe is not None and probe.reference_error is not None:
        return (
            _comment(
                f"The ONNX reference evaluator cannot run this model (gate init's probe: "
                f"{probe.reference_error}), so golden outputs come from ONNX Runtime without "
                "graph optimisations. No second opinion can run: it would be the reference "
                "evaluator."
            )
            + 'reference = "ort:disable"\n'
            + "second_opinion = false\n"
        )
    if probe is not None and probe.reference_skipped is not None:
        return _comment(
            f"gate init did not run the reference evaluator ({probe.reference_skipped}). If it "
            'cannot run this model, set reference = "ort:disable" and second_opinion = false '
            '(and [steps.compare] against = "ort:disable").'
        )
    return ""


def _compare_against(probe: Probe | None) -> str:
    if probe is not None and probe.reference_error is not None:
        return (
            _comment(
                "The reference evaluator cannot run this model (see [steps.export]): ONNX "
                "Runtime with all optimisations is compared with ONNX Runtime without any, the "
                "second opinion that remains."
            )
            + 'against = "ort:disable"\n'
        )
    return (
        '# ONNX Runtime (all optimisations) against the reference evaluator; or "ort:disable",\n'
        '# "torch:package.module:factory", another .onnx file\n'
        'against = "reference"\n'
    )


_MODEL_EXTRA = {
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
}
"""The ``[model]`` keys a starter shows for each kind of source, beyond name and source."""


def starter_text(
    kind: str,
    source: str,
    found: Probe | None,
    feeds: str,
    *,
    runtimes: Sequence[str],
    others: Sequence[str],
) -> str:
    """The starter file: every step's table, with what the probe ``found`` set and said.

    ``source`` as written in the file, ``feeds`` the ``[feeds]`` table, ``others`` the model's
    free dimensions read from its file (the first one shows in ``[steps.bench]``).
    """
    targets = ["installed", *runtimes]
    model_extra = _MODEL_EXTRA[kind]
    bench_dims = "".join(f"# dims = {{ {toml_key(d)} = [128] }}\n" for d in others[:1])
    return f"""\
# onnxgate gate config: `onnxgate gate gate.toml` runs every step below, writes a run folder
# (report.json, report.html, junit.xml, the artefacts) and registers the version if all passed.
# Unknown keys are errors. Relative paths are relative to this file.
{_header(kind, found)}version = {CONFIG_VERSION}

[model]
name = {_toml(_name_of(source))}          # the registry's name
source = {_toml(source)}
{model_extra}
[targets]
# `installed` and releases or packages, each installed once into an isolated environment:
# "onnxruntime==1.20.1", "onnxruntime-openvino==1.24.1"
runtimes = {_toml(targets)}
providers = []                 # e.g. ["cuda"]; CPU is appended

{feeds}[steps.export]
# torch/sklearn: parity of the export against the source; .onnx: golden outputs for the contract,
# from the reference evaluator, confirmed by a second runner.
{_export_table(found)}{_tolerances(found, "export") or _TOLERANCES_EXAMPLE}
[steps.check]
# static checks against every target runtime
ignore = []
fail_on = "error"

[steps.compare]
{_compare_against(found)}\
localize = true                # on a miss, find and replay the first diverging node
# feeds: [feeds] above; a [steps.compare.feeds] table overrides it for this step
{_tolerances(found, "compare")}
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
# batch = 1                  # default: a golden sample of the contract, a size it proves

[steps.quantize]
# int8 (or fp16) inside an accuracy budget on held-apart data, and not slower than float
enabled = false                # turn on with your evaluation data
# to = "int8"                  # or "fp16" (NAME.fp16.onnx, the worst nodes kept in float32)
mode = "dynamic"
max_drop = 0.01                # 1 - cosine (or accuracy points with labels)
# eval = "heldout.npz"
# required = false             # a miss is reported without failing the gate

[steps.bench]
# batches = [1]              # default: the contract's golden samples, the sizes it proves
{bench_dims}budget = 2.0                   # seconds of timed runs per configuration
# vs = "torch:package.module:factory"   # a contender, each in its own process, interleaved
# runtimes = ["installed"]     # default: targets.runtimes; each other one timed as a figure
# min_speedup = 1.0            # fail unless at least this many times faster than `vs`
# max_p50_ms = 20.0
# max_p99_ms = 50.0
# max_size_mb = 100.0

[steps.mobile]
# ONNX Runtime's ORT format (NAME.ort, NAME.required_operators.config) for mobile and minimal
# builds, proven on the golden samples, measured in a fresh process on one thread
enabled = false
optimization_style = "Fixed"   # or "Runtime" (NNAPI, CoreML)
# max_size_mb = 10.0           # the .ort file
# max_peak_rss_mb = 200.0      # the model's share: peak RSS less the worker's before loading it
# max_p50_ms = 20.0            # single-thread p50 of the slowest golden sample

[steps.web]
# what a web app loads (web/NAME.onnx, or .ort; web/NAME.inputs.json, the input spec), written
# only when the golden samples pass on it in onnxruntime-web in a headless Chromium
enabled = false
format = "onnx"                # or "ort"
# runtime = "onnxruntime-web=={WEB_RELEASE}"
# threads = 1                  # wasm threads of the proof

[register]
# a passing gate registers a version; `onnxgate registry promote` moves aliases later
alias = "champion"
# registry = "postgresql+psycopg://user@host/db"   # default: $ONNXGATE_REGISTRY or SQLite

[output]
dir = "gate-runs"
"""
