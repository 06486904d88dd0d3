"""What ``gate init`` learns by running the model once, before it writes a starter config.

A starter that fails on a healthy model teaches the user nothing but where the source is. Two
things make a healthy model fail a default gate, and both show in one run: ONNX Runtime cannot run
the feeds the steps will use (synthetic sizes the graph refuses), and the ONNX reference evaluator,
the default source of golden outputs and the default second opinion, cannot run the model at all
(an operator domain it does not implement, or an operator it raises on). ``probe`` runs the model on
the feeds the export and compare steps will make (or on the data given) with ONNX Runtime, checks
the domains the evaluator implements, and runs the evaluator on the smallest sample, within a time
budget; the starter then says what was probed and sets what the probe found.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import GraphProto, ModelProto

from onnxgate.data import DimRange, Sample, listen_synthetic
from onnxgate.errors import ConfigError, GateError, SessionFailed, first_line
from onnxgate.model import LoadedModel

REFERENCE_BUDGET = 30.0
"""Seconds the reference evaluator's probe may take; past them it is reported as not probed."""

REFERENCE_SLOWDOWN = 150
"""How many times slower than ONNX Runtime the evaluator is on real networks, at worst (40-150x):
with ONNX Runtime's time on the same sample, it says in advance whether the probe fits the
budget."""

NOISE_ABS = 1e-3
"""Float noise, at most: the largest difference, relative to the output's largest magnitude (or
1, whichever is larger). float32 arithmetic done in another order (a reduction, an If's branch)
differs by a few ulps of the largest value that went into an element; a broken kernel differs by
far more than a thousandth of the output's scale."""

NOISE_COSINE = 0.9999
"""And the two outputs point the same way: cosine similarity of the flattened outputs."""

HEADROOM = 10
"""The tolerance written is this many times the difference measured (rounded up to one digit),
within ``NOISE_ABS``: the probe ran one sample, the export runs every sample."""

_STANDARD = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")
"""The domains ``onnx.reference`` implements (see ``runners._reference``), with model functions."""


@dataclass(frozen=True)
class Disagreement:
    """An output on which two runs differ beyond the default tolerances.

    Measured on the probe's sample: the reference evaluator against ONNX Runtime with graph
    optimisations off (the export's second opinion).
    """

    output: str
    max_abs: float
    """The largest absolute difference (inf when the shapes or kinds differ)."""
    scale: float
    """The output's largest magnitude, from the reference evaluator."""
    cosine: float
    """Cosine similarity of the two flattened outputs."""
    outside: int
    """Elements outside the default tolerances."""
    elements: int

    @property
    def noise(self) -> bool:
        """Within float32 noise of a healthy model (``NOISE_ABS``, ``NOISE_COSINE``)."""
        return self.max_abs <= NOISE_ABS * max(1.0, self.scale) and self.cosine >= NOISE_COSINE

    @property
    def atol(self) -> float:
        """The tolerance to write: ``HEADROOM`` times the difference, one digit, rounded up."""
        wanted = self.max_abs * HEADROOM
        digits = 10 ** np.floor(np.log10(wanted))
        rounded = float(f"{np.ceil(wanted / digits) * digits:.1g}")
        return min(rounded, NOISE_ABS * max(1.0, self.scale))

    def text(self) -> str:
        """``stateN: 3 of 1024 elements, max |difference| 8.5e-05 (largest |value| 0.91, ...)``."""
        return (
            f"{self.output}: {self.outside} of {self.elements} elements outside the default "
            f"tolerances, max |difference| {self.max_abs:.2g} (largest |value| {self.scale:.2g}, "
            f"cosine {self.cosine:.6f})"
        )


def _worse(one: Disagreement, other: Disagreement) -> bool:
    """``one`` is further from float noise than ``other``."""
    return (not one.noise, one.max_abs / max(1.0, one.scale)) > (
        not other.noise,
        other.max_abs / max(1.0, other.scale),
    )


def disagreements(reference: Mapping[str, object], second: Mapping[str, object]) -> list:
    """The outputs on which two runs differ beyond the default tolerances (``compare``'s)."""
    from onnxgate.compare import as_array
    from onnxgate.settings import default_tolerance

    found: list[Disagreement] = []
    for name, value in reference.items():
        if name not in second:
            continue
        try:
            ref, _ = as_array(value)
            other, _ = as_array(second[name])
        except ValueError:
            continue  # maps with different keys: compare reports them
        if ref.dtype == object or other.dtype == object:
            continue  # strings: compared exactly by the steps
        floats = ref.dtype.kind == "f" and other.dtype.kind == "f"
        if ref.shape != other.shape or not floats:
            if ref.shape != other.shape or not np.array_equal(ref, other):
                found.append(Disagreement(name, float("inf"), 0.0, 0.0, ref.size, ref.size))
            continue
        a, b = ref.astype(np.float64).ravel(), other.astype(np.float64).ravel()
        tol = default_tolerance(ref.dtype, other.dtype)
        close = np.isclose(b, a, atol=tol.atol, rtol=tol.rtol, equal_nan=True)
        if close.all():
            continue
        finite = np.isfinite(a) & np.isfinite(b)
        if not finite.all() and not np.array_equal(a[~finite], b[~finite], equal_nan=True):
            found.append(Disagreement(name, float("inf"), 0.0, 0.0, int((~close).sum()), a.size))
            continue
        a, b = a[finite], b[finite]
        norm = float(np.linalg.norm(a) * np.linalg.norm(b))
        cosine = float(a @ b / norm) if norm else 1.0
        found.append(
            Disagreement(
                name,
                float(np.abs(a - b).max()),
                float(np.abs(a).max()),
                cosine,
                int((~close).sum()),
                int(close.size),
            )
        )
    return found


@dataclass(frozen=True)
class Probe:
    """What one run of the model on the gate's feeds showed."""

    feeds: str
    """The shapes ONNX Runtime was run at: ``input float32[1,3,240,320]; [7,3,240,320]``."""
    runtime: str
    """``onnxruntime 1.31.1``."""
    free: list[str] = field(default_factory=list)
    """The model's free dimensions (``batch``, ``x[2]`` for one without a name)."""
    loads: bool = True
    """ONNX Runtime creates a session for the model."""
    ort_error: str | None = None
    """Why ONNX Runtime did not run the feeds (the input shapes, then its message), or None."""
    reference_error: str | None = None
    """Why the reference evaluator cannot run the model (one line), or None."""
    reference_skipped: str | None = None
    """Why the evaluator was not run (too slow for the budget), or None."""
    reference_feeds: str = ""
    """The shapes the evaluator was run at."""
    disagreements: list[Disagreement] = field(default_factory=list)
    """Outputs on which the evaluator and ONNX Runtime without optimisations (the export's second
    opinion) differ beyond the default tolerances, on the evaluator's sample."""
    seconds: float = 0.0
    ranges: dict[str, DimRange] = field(default_factory=dict)
    """The range each free dimension's golden samples will prove, as the export will choose them
    at the speed measured here (``contract.proven_ranges``); empty when it cannot be told."""
    sample_seconds: float | None = None
    """Seconds the reference evaluator took on one golden sample (``reference_feeds``), or its
    estimate when it was not run (``sample_estimated``): what caps the starter ranges."""
    sample_estimated: bool = False
    """``sample_seconds`` is an estimate (ONNX Runtime's time x ``REFERENCE_SLOWDOWN``), or a
    lower bound (the probe's budget) when the evaluator ran out of it."""

    @property
    def reference_ran(self) -> bool:
        """The evaluator ran the smallest sample."""
        return self.reference_error is None and self.reference_skipped is None


def _shapes(sample: Sample) -> str:
    return ", ".join(
        f"{name} {value.dtype}[{','.join(map(str, value.shape))}]"
        for name, value in sample.feeds.items()
        if isinstance(value, np.ndarray)
    )


def _nodes(graph: GraphProto):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.g.node:
                yield from _nodes(attribute.g)
            for sub in attribute.graphs:
                yield from _nodes(sub)


def _implemented() -> dict[str, set[str]]:
    """The operators ``onnx.reference`` implements in ai.onnx and ai.onnx.ml, by name.

    Its classes are named ``Op`` or ``Op_VERSION``; onnxgate's corrections replace some of them
    and add none, so the evaluator's own lists are the whole set.
    """
    import inspect

    import onnx.reference.ops._op_list as standard
    import onnx.reference.ops.aionnxml._op_list as ml

    def names(module: object) -> set[str]:
        found = set()
        for name, value in vars(module).items():
            if inspect.isclass(value):
                base, _, version = name.rpartition("_")
                found.add(base if base and version.isdigit() else name)
        return found

    ops = names(standard)
    return {"": ops, "ai.onnx": ops, "ai.onnx.ml": names(ml)}


def unknown_domain(model: ModelProto) -> str | None:
    """The first operator the reference evaluator does not implement, described, or None.

    The evaluator implements the standard domains (not every operator of ai.onnx.ml: ZipMap,
    for one, it refuses) and the model's own functions; anything else (``com.microsoft``,
    ``ai.onnx.contrib``) it refuses when it loads the model.
    """
    local = {(f.domain, f.name) for f in model.functions}
    bodies = [n for f in model.functions for n in f.node]
    implemented = _implemented()
    for node in [*_nodes(model.graph), *bodies]:
        if (node.domain, node.op_type) in local:
            continue
        name = f"node {node.name!r}" if node.name else "a node"
        if node.domain in implemented and node.op_type not in implemented[node.domain]:
            domain = node.domain or "ai.onnx"
            return f"it does not implement {domain}:{node.op_type} ({name})"
        if node.domain not in _STANDARD:
            return f"it does not implement the domain {node.domain} ({name}, {node.op_type})"
    return None


def _samples(
    path: Path,
    inputs: Path | None,
    dims: Mapping[str, Sequence[int]],
    ranges: Mapping[str, str],
    seed: int,
) -> list[Sample]:
    """The feeds the gate's steps will use: the export's golden samples, and compare's.

    With data given, the export's samples are the data and the sizes it leaves unproven, made
    from it (``golden_samples``): those are probed, and the dims checked against the model, as
    the export will. Without, the export's and compare's synthetic feeds.
    """
    from onnxgate.contract import golden_samples
    from onnxgate.data import parse_ranges, synthetic_samples
    from onnxgate.model import Signature, load_model

    loaded = load_model(path, load_weights=False)
    signature = Signature.from_graph(loaded.proto.graph)
    sizes = {name: list(s) for name, s in dims.items()} or None
    if inputs is not None:
        return golden_samples(loaded, inputs=inputs, dims=sizes, seed=seed)
    value_ranges = parse_ranges(f"{k}={v}" for k, v in ranges.items()) or None
    samples = golden_samples(loaded, dims=sizes, ranges=value_ranges, seed=seed)
    samples += synthetic_samples(
        signature, model=loaded.proto, dims=sizes, ranges=value_ranges, seed=seed
    )
    unique: dict[str, Sample] = {}
    for sample in samples:
        unique.setdefault(_shapes(sample), sample)
    return list(unique.values())


def _reference(
    path: Path, sample: Sample, budget: float
) -> tuple[str | None, str | None, dict[str, object], float]:
    """Run the evaluator on one sample within ``budget`` seconds.

    Returns (error, skipped, outputs, seconds the inference took).
    """
    from onnxgate.model import load_model
    from onnxgate.runners import ReferenceRunner

    found: dict[str, str] = {}
    outputs: dict[str, object] = {}
    took: list[float] = []

    def run() -> None:
        try:
            with ReferenceRunner(load_model(path)) as runner:
                start = time.perf_counter()
                outputs.update(runner.infer(sample.feeds).outputs)
                took.append(time.perf_counter() - start)
        except GateError as error:
            said = error.message  # the path is the config's source: the node is what tells
            for prefix in ("failed on", "cannot load"):
                said = said.replace(f"the ONNX reference evaluator {prefix} {path} ", "")
            found["error"] = first_line(said, 400)
        except Exception as error:  # noqa: BLE001 - the evaluator's own failure, reported
            found["error"] = first_line(error, 400, with_type=True)

    # a thread, so the probe stops waiting at the budget; the evaluator cannot be interrupted
    worker = threading.Thread(target=run, name="onnxgate-reference-probe", daemon=True)
    worker.start()
    worker.join(budget)
    if worker.is_alive():
        return None, f"it took more than {budget:.0f} s on {_shapes(sample)}", {}, budget
    return found.get("error"), None, outputs, took[0] if took else 0.0


def probe(
    path: str | Path,
    *,
    inputs: Path | None = None,
    dims: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, str] | None = None,
    seed: int = 0,
    reference_budget: float = REFERENCE_BUDGET,
) -> Probe:
    """Run an .onnx model once on the feeds its gate will use, with ONNX Runtime and the evaluator.

    Raises:
        ConfigError: ``dims`` or ``ranges`` name nothing in the model.
        FeedError: ``inputs`` cannot be read, or does not fit the model's inputs.
        ModelLoadError: the model cannot be read.
    """
    from onnxgate.data import unnamed_dims
    from onnxgate.model import Signature, load_model
    from onnxgate.runners import open_runner, runtime_version

    path = Path(path)
    clock = time.perf_counter()
    loaded = load_model(path)
    signature = Signature.from_graph(loaded.proto.graph)
    free = sorted({d for s in signature.inputs for d in s.symbolic_dims}) + unnamed_dims(signature)
    runtime = f"onnxruntime {runtime_version()}"
    unknown = unknown_domain(loaded.proto)
    try:
        # the probe's feeds are said in its report, not noted one by one as a command's are
        with listen_synthetic(lambda made: None):
            samples = _samples(path, inputs, dims or {}, ranges or {}, seed)
    except ConfigError:
        raise
    except GateError as error:  # feeds that cannot be made for this model
        if inputs is not None:
            raise  # the data given cannot be read: the user's to fix before anything is written
        return Probe(
            feeds="(none)",
            runtime=runtime,
            free=free,
            ort_error=first_line(error.message, 400),
            reference_error=unknown,
            reference_skipped=None if unknown else "the feeds could not be made",
            seconds=time.perf_counter() - clock,
        )
    feeds = "; ".join(_shapes(s) for s in samples)
    ran = _run_onnxruntime(loaded, samples)
    if ran.error is not None:
        return Probe(
            feeds=feeds,
            runtime=runtime,
            free=free,
            loads=ran.loads,
            ort_error=ran.error,
            reference_error=unknown,
            reference_skipped=None if unknown else ran.skipped,
            seconds=ran.at - clock,
        )
    timed = ran.timed
    if unknown is not None:
        return Probe(
            feeds, runtime, free, reference_error=unknown, seconds=time.perf_counter() - clock
        )
    _, smallest = min(timed, key=lambda t: sum(np.size(v) for v in t[1].feeds.values()))
    with open_runner(loaded) as runner:  # timed again: the first run of a session pays its set-up
        runner.infer(smallest.feeds)
        seconds = runner.infer(smallest.feeds).latency_ns / 1e9
    estimate = seconds * REFERENCE_SLOWDOWN
    if estimate > reference_budget:
        skipped = (
            f"estimated {estimate:.0f} s on {_shapes(smallest)} (ONNX Runtime's {seconds:.2f} s "
            f"x {REFERENCE_SLOWDOWN}), over the {reference_budget:.0f} s budget"
        )
        return Probe(
            feeds,
            runtime,
            free,
            reference_skipped=skipped,
            seconds=time.perf_counter() - clock,
            ranges=_ranges(loaded, smallest, estimate, inputs, dims),
            sample_seconds=estimate,
            sample_estimated=True,
        )
    began = time.perf_counter()
    error, skipped, outputs, took = _reference(path, smallest, reference_budget)
    differ: dict[str, Disagreement] = {}
    ran_on: list[Sample] = []
    if error is None and skipped is None:
        differ, ran_on = _second_opinion(
            loaded, path, smallest, outputs, timed, budget=reference_budget, began=began
        )
    return Probe(
        feeds,
        runtime,
        free,
        reference_error=error,
        reference_skipped=skipped,
        reference_feeds="; ".join(_shapes(s) for s in ran_on or [smallest]),
        disagreements=list(differ.values()),
        seconds=time.perf_counter() - clock,
        ranges={} if error is not None else _ranges(loaded, smallest, took, inputs, dims),
        sample_seconds=None if error is not None else took,
        sample_estimated=skipped is not None,
    )


@dataclass(frozen=True)
class _OrtRun:
    """ONNX Runtime on every sample: the seconds each took, or why it failed and when."""

    timed: list[tuple[float, Sample]]
    error: str | None = None
    """Why ONNX Runtime did not run the feeds, or None."""
    loads: bool = True
    skipped: str = ""
    """Why the evaluator is then not run."""
    at: float = 0.0
    """``time.perf_counter()`` when it failed."""


def _run_onnxruntime(loaded: LoadedModel, samples: Sequence[Sample]) -> _OrtRun:
    """Run ONNX Runtime on every sample, in one session, until one fails."""
    from onnxgate.runners import open_runner

    timed: list[tuple[float, Sample]] = []
    try:
        with open_runner(loaded) as runner:
            for sample in samples:
                try:
                    result = runner.infer(sample.feeds)
                except GateError as error:
                    cause = error.__cause__
                    why = first_line(cause, 600) if cause is not None else error.message
                    return _OrtRun(
                        timed,
                        error=f"{_shapes(sample)}: {why}",
                        skipped="ONNX Runtime failed on the feeds",
                        at=time.perf_counter(),
                    )
                timed.append((result.latency_ns / 1e9, sample))
    except SessionFailed as error:
        return _OrtRun(
            timed,
            error=first_line(error.message, 400),
            loads=False,
            skipped="ONNX Runtime does not load the model",
            at=time.perf_counter(),
        )
    return _OrtRun(timed)


def _second_opinion(
    loaded: LoadedModel,
    path: Path,
    smallest: Sample,
    outputs: Mapping[str, object],
    timed: Sequence[tuple[float, Sample]],
    *,
    budget: float,
    began: float,
) -> tuple[dict[str, Disagreement], list[Sample]]:
    """Does the export's second opinion confirm the evaluator's golden outputs?

    ONNX Runtime with graph optimisations off against the evaluator's ``outputs`` on
    ``smallest``, then on every larger sample the budget (from ``began``) allows, the
    evaluator run on each (a larger batch shows more of the noise: silero-vad's did).

    Returns:
        The worst disagreement per output, and the samples compared.
    """
    from onnxgate.runners import open_runner
    from onnxgate.settings import SessionSettings

    differ: dict[str, Disagreement] = {}
    ran_on: list[Sample] = []
    others = sorted(
        (t for t in timed if t[1] is not smallest),
        key=lambda t: sum(np.size(v) for v in t[1].feeds.values()),
    )
    try:
        with open_runner(loaded, SessionSettings(opt_level="disable")) as runner:
            sample = smallest
            ran_on.append(sample)
            while True:
                second = runner.infer(sample.feeds).outputs
                for found in disagreements(outputs, second):
                    held = differ.get(found.output)
                    if held is None or _worse(found, held):
                        differ[found.output] = found
                left = budget - (time.perf_counter() - began)
                if not others or others[0][0] * REFERENCE_SLOWDOWN > left:
                    break
                sample = others.pop(0)[1]
                failed, late, outputs, _ = _reference(path, sample, left)
                if failed is not None or late is not None:
                    break  # the smallest sample ran: the evaluator's verdict stands
                ran_on.append(sample)
    except GateError:  # the export step reports it, with its own message
        pass
    return differ, ran_on


def _ranges(
    loaded: LoadedModel,
    sample: Sample,
    seconds: float,
    inputs: Path | None,
    dims: Mapping[str, Sequence[int]] | None,
) -> dict[str, DimRange]:
    """The ranges the export will prove if one golden sample like ``sample`` takes ``seconds``."""
    from onnxgate.contract import proven_ranges

    sizes = {name: list(s) for name, s in (dims or {}).items()} or None
    try:
        return proven_ranges(loaded, sample, seconds, inputs=inputs, dims=sizes)
    except GateError:  # the samples were made from the same data and dims: not expected
        return {}
