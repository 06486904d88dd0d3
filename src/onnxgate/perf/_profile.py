"""Where the time goes inside one ONNX Runtime run: ONNX Runtime's own profiler, summarised.

The session profiles every run into a Chrome trace (``enable_profiling``). Warm-up runs are
profiled too, because profiling cannot be switched on mid-session; each run is marked by a
``model_run`` event spanning it, so only the kernel calls inside the last ``runs`` windows are
counted. The trace is read by the same parser as the placement audit's profiling method
(``placement/_trace.py``).

Node names and op types are those of the graph as ONNX Runtime optimised it at the requested
level (``Times212/MatMulAddFusion`` is a Gemm that fusion made; NCHWc rewrites appear under
``..._nchwc`` names), because that is the graph that ran. Times are kernel times; the rest of a
run (``run_ms - node_ms``) is ONNX Runtime's own work between kernels.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._words import setting
from onnxgate.compat.providers import CPU
from onnxgate.contract import contract_samples
from onnxgate.contract_store import contract_extras
from onnxgate.data import Sample, load_feeds, validate_feeds
from onnxgate.errors import ConfigError, FeedError, RunFailed
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.perf._bench import synthetic_sample
from onnxgate.placement import (
    MEMCPY,
    NodeEvent,
    TensorType,
    load_trace,
    node_events,
    run_windows,
    window_of,
    within,
)
from onnxgate.settings import FeedSettings, Part, SessionSettings

log = logging.getLogger(__name__)

SPREAD = 2.0
"""A counted run slower in kernels than this many times the median run earns a note."""


class ProfileConfig(Part):
    """What to profile, and on which session."""

    feeds: FeedSettings = FeedSettings()
    """A data file (its first sample is profiled), or synthetic feeds at one size per symbolic
    dimension. Without any, a model with a contract is profiled on its largest golden sample."""
    batch: int | None = Field(None, ge=1)
    """Size of the batch dimension (the first input's axis 0, when symbolic)."""
    session: SessionSettings = SessionSettings()
    warmup: int = Field(5, ge=0)
    """Runs profiled but not counted (the first run allocates and tunes)."""
    runs: int = Field(10, ge=1)
    """Runs counted; figures are per run, averaged over them."""
    top: int = Field(10, ge=0)
    """How many of the slowest nodes to list; 0 lists every node."""
    trace: Path | None = None
    """Keep ONNX Runtime's Chrome trace (all runs, warm-up included) here; otherwise deleted."""

    def _refuse_contradictions(self) -> None:
        self.feeds.one_size()
        self.feeds.refuse_with_inputs(*(["batch"] if self.batch is not None else []))
        if self.trace is not None:
            if self.trace.is_dir():
                raise ConfigError(
                    f"trace {self.trace} is a folder; it takes a file path.",
                    hint=f"Use e.g. {self.trace / 'profile.json'}.",
                    field="trace",
                )
            if not self.trace.parent.is_dir():
                raise ConfigError(
                    f"trace {self.trace}: the folder {self.trace.parent} does not exist.",
                    field="trace",
                )

    def checked_session(self) -> SessionSettings:
        """The session settings, checked against the installed ONNX Runtime.

        Raises:
            ConfigError: a level, thread count or provider option it cannot take.
        """
        from onnxgate.runners import check_session  # imports ONNX Runtime

        check_session(self.session)
        return self.session


class TensorShape(BaseModel):
    """A tensor a kernel read or wrote, as the trace records it."""

    model_config = ConfigDict(extra="forbid")

    dtype: str
    """Element type as ONNX Runtime names it (``float``, ``int64``); empty for a missing input."""
    shape: list[int]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]" if self.dtype else "-"


class TimeShare(BaseModel):
    """Time of one group of nodes (an op type, a provider) per run, and its share."""

    model_config = ConfigDict(extra="forbid")

    name: str
    nodes: int
    """Distinct nodes in the group that ran."""
    calls: int
    """Kernel calls over all profiled runs (nodes x runs, more inside loops)."""
    ms: float
    """Kernel time per run, milliseconds."""
    share: float
    """Fraction of all kernel time."""


class NodeTime(BaseModel):
    """One node of the optimised graph: its time per run and the shapes it saw."""

    model_config = ConfigDict(extra="forbid")

    node: str
    op_type: str
    provider: str
    calls: int
    ms: float
    share: float
    inputs: list[TensorShape]
    """What the kernel read; a constant weight the kernel pre-packed (MatMul, Gemm, Conv on some
    providers) is no longer an input and is not listed."""
    outputs: list[TensorShape]


class MemcpyNode(NodeTime):
    """A copy ONNX Runtime inserted between providers, and the providers it bridges."""

    source: str
    """Provider whose memory the tensor leaves (CPU for ``MemcpyFromHost``)."""
    target: str
    """Provider whose memory it enters (CPU for ``MemcpyToHost``)."""


class ProfileReport(BaseModel):
    """The answer of ``onnxgate profile``."""

    model_config = ConfigDict(extra="forbid")

    model: str
    runtime: str
    providers: list[str]
    """What the session reports using."""
    optimization: str
    feeds: str
    """Where the profiled inputs came from."""
    shapes: dict[str, list[int]] = {}
    """Shape of each input fed."""
    warmup: int
    runs: int
    """Profiled runs the figures cover."""
    run_ms: float
    """Mean duration of a profiled ``run()``, as ONNX Runtime timed it (profiling overhead in)."""
    node_ms: float
    """Kernel time per run, the sum the shares are fractions of."""
    node_count: int
    """Distinct nodes that ran."""
    op_types: list[TimeShare]
    by_provider: list[TimeShare]
    nodes: list[NodeTime]
    """The slowest nodes, slowest first (``top`` of them; every node when ``top`` is 0)."""
    memcpy: list[MemcpyNode] = []
    trace: str | None = None
    """ONNX Runtime's Chrome trace, when kept (open it in chrome://tracing or Perfetto)."""
    notes: list[str] = []

    @property
    def passed(self) -> bool:
        """Always True: a profile describes where the time goes and judges nothing."""
        return True


def bridge(op_type: str, provider: str) -> tuple[str, str]:
    """``(source, target)`` of a Memcpy node assigned to ``provider``.

    ONNX Runtime assigns both copies to the device provider that needs them: ``MemcpyFromHost``
    brings a tensor from host (CPU) memory into that provider's memory, ``MemcpyToHost`` takes
    one back to the host.
    """
    if op_type == "MemcpyToHost":
        return provider, CPU
    return CPU, provider


def _shapes(types: Iterable[TensorType]) -> list[TensorShape]:
    return [TensorShape(dtype=t.dtype, shape=list(t.shape)) for t in types]


def _shares(
    calls: list[NodeEvent], key: Callable[[NodeEvent], str], runs: int, total: int
) -> list[TimeShare]:
    groups: dict[str, list[NodeEvent]] = {}
    for call in calls:
        groups.setdefault(key(call), []).append(call)
    rows = []
    for name, members in groups.items():
        dur = sum(c.dur for c in members)
        rows.append(
            TimeShare(
                name=name,
                nodes=len({c.node for c in members}),
                calls=len(members),
                ms=dur / runs / 1000,
                share=dur / total if total else 0.0,
            )
        )
    return sorted(rows, key=lambda r: (-r.ms, r.name))


def _windows(
    events: list[dict[str, Any]], warmup: int, runs: int, notes: list[str]
) -> list[tuple[int, int]]:
    """The ``model_run`` windows of the profiled runs: the last ``runs`` of them."""
    windows = run_windows(events)
    made = warmup + runs
    if len(windows) >= made:
        return windows[-runs:]
    # ONNX Runtime stops recording at a fixed number of events: the last runs are the lost ones
    kept = windows[warmup:]
    if not kept:
        raise RunFailed(
            f"ONNX Runtime's trace marks {len(windows)} run(s) (model_run events) of the "
            f"{made} made, none after the {warmup} warm-up run(s); nothing can be counted.",
            hint=f"Lower {setting('warmup')} or {setting('runs')}, or profile a smaller input.",
        )
    notes.append(
        f"the trace holds {len(windows)} of the {made} runs made (ONNX Runtime stops recording "
        f"after its event limit); figures cover the {len(kept)} after warm-up"
    )
    return kept


def _spread(calls: list[NodeEvent], windows: list[tuple[int, int]]) -> list[str]:
    """A note when one counted run took far longer than the median run (whole, or in kernels)."""
    kernels = [0] * len(windows)
    for call in calls:
        index = window_of(call.ts, windows)
        if index is not None:
            kernels[index] += call.dur
    whole = [end - start for start, end in windows]
    notes = []
    for what, per_run in (("in all", whole), ("in kernels", kernels)):
        median = statistics.median(per_run) if len(per_run) > 1 else 0
        slowest = max(per_run, default=0)
        if median > 0 and slowest > SPREAD * median:
            notes.append(
                f"one counted run took {slowest / 1000:.3f} ms {what}, the median run "
                f"{median / 1000:.3f} ms: the machine was busy, and the means above carry it; "
                f"profile again or raise {setting('runs')}"
            )
    return notes


CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def _self_time(calls: list[NodeEvent], notes: list[str]) -> list[NodeEvent]:
    """Calls with a control-flow node's time reduced to its own, so nothing counts twice.

    ONNX Runtime records the nodes of an If/Loop/Scan body as calls of their own *and* the
    parent's call spanning them; summing both would put more than 100% of a run in kernels.
    A call that lies inside a control-flow call's span is its body's; only control-flow parents
    are considered, since unrelated calls overlap in time under parallel execution.
    """
    if not any(c.op_type in CONTROL_FLOW for c in calls):
        return calls
    order = sorted(range(len(calls)), key=lambda i: (calls[i].ts, -calls[i].dur))
    inner = [0] * len(calls)
    open_parents: list[int] = []
    for i in order:
        call = calls[i]
        while open_parents and calls[open_parents[-1]].ts + calls[open_parents[-1]].dur < call.ts:
            open_parents.pop()
        if (
            open_parents
            and call.ts + call.dur <= calls[open_parents[-1]].ts + calls[open_parents[-1]].dur
        ):
            inner[open_parents[-1]] += call.dur
        if call.op_type in CONTROL_FLOW:
            open_parents.append(i)
    notes.append(
        "If/Loop/Scan rows show their own time only; the nodes of their bodies are listed apart"
    )
    return [
        dataclasses.replace(c, dur=max(0, c.dur - inner[i])) if inner[i] else c
        for i, c in enumerate(calls)
    ]


def report_from_trace(
    events: list[dict[str, Any]],
    *,
    warmup: int,
    runs: int,
    top: int = 10,
    model: str = "",
    runtime: str = "",
    providers: Iterable[str] = (),
    optimization: str = "",
    feeds: str = "",
    shapes: Mapping[str, list[int]] | None = None,
    trace: str | None = None,
    notes: Iterable[str] = (),
) -> ProfileReport:
    """Summarise the events of a trace: the last ``runs`` runs count, earlier ones are warm-up.

    Raises:
        RunFailed: the trace marks no run after the warm-up.
    """
    notes = list(notes)
    kept = _windows(events, warmup, runs, notes)
    counted = len(kept)
    calls = _self_time(within(node_events(events), kept), notes)
    total = sum(c.dur for c in calls)
    per_node: dict[tuple[str, str, str], list[NodeEvent]] = {}
    for call in calls:
        per_node.setdefault((call.node, call.op_type, call.provider), []).append(call)
    rows: list[NodeTime] = []
    memcpy: list[MemcpyNode] = []
    for (node, op_type, provider), members in per_node.items():
        dur = sum(c.dur for c in members)
        last = members[-1]
        fields: dict[str, Any] = {
            "node": node,
            "op_type": op_type,
            "provider": provider,
            "calls": len(members),
            "ms": dur / counted / 1000,
            "share": dur / total if total else 0.0,
            "inputs": _shapes(last.inputs),
            "outputs": _shapes(last.outputs),
        }
        rows.append(NodeTime(**fields))
        if op_type in MEMCPY:
            source, target = bridge(op_type, provider)
            memcpy.append(MemcpyNode(**fields, source=source, target=target))
    rows.sort(key=lambda r: (-r.ms, r.node))
    memcpy.sort(key=lambda r: (-r.ms, r.node))
    if not calls:
        notes.append("no kernel call was recorded inside the profiled runs")
    notes.extend(_spread(calls, kept))
    return ProfileReport(
        model=model,
        runtime=runtime,
        providers=list(providers),
        optimization=optimization,
        feeds=feeds,
        shapes=dict(shapes or {}),
        warmup=warmup,
        runs=counted,
        run_ms=statistics.fmean(end - start for start, end in kept) / 1000,
        node_ms=total / counted / 1000,
        node_count=len(per_node),
        op_types=_shares(calls, lambda c: c.op_type, counted, total),
        by_provider=_shares(calls, lambda c: c.provider, counted, total),
        nodes=rows[:top] if top else rows,
        memcpy=memcpy,
        trace=trace,
        notes=notes,
    )


def _elements(sample: Sample) -> int:
    return sum(int(np.asarray(v).size) for v in sample.feeds.values())


def _sample(
    loaded: LoadedModel, signature: Signature, config: ProfileConfig, notes: list[str]
) -> Sample:
    feeds = config.feeds
    if feeds.inputs is not None:
        samples = load_feeds(feeds.inputs, signature=signature)
        if not samples:
            raise FeedError(f"{feeds.inputs} holds no sample.")
        if len(samples) > 1:
            notes.append(
                f"{feeds.inputs} holds {len(samples)} samples; the first "
                f"({samples[0].label}) was profiled"
            )
        return samples[0]
    if not feeds.dims and config.batch is None and not feeds.ranges:
        golden = contract_samples(loaded.path)
        if golden:
            sample = max(golden, key=_elements)
            notes.append(
                f"profiled on the contract's golden sample {sample.label} (the largest of "
                f"{len(golden)}): shapes the model was proven at; {setting('feeds.dims')} or "
                f"{setting('feeds.inputs')} choose others"
            )
            return sample
    return synthetic_sample(loaded, signature, feeds, config.batch)


def _read_trace(path: Path, what: Path) -> list[dict[str, Any]]:
    try:
        return load_trace(str(path))
    except (OSError, ValueError) as err:
        raise RunFailed(
            f"ONNX Runtime's profile of {what} at {path} cannot be read: {err}."
        ) from err


def _keep(path: Path, destination: Path) -> str:
    try:
        shutil.move(path, destination)
    except OSError as err:
        raise ConfigError(
            f"cannot write the trace to trace {destination}: {err.strerror or err}.",
            hint="Choose a writable file path for trace.",
            field="trace",
        ) from err
    return str(destination)


def profile(
    model: str | Path | LoadedModel,
    config: ProfileConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> ProfileReport:
    """Profile the model on ONNX Runtime; the library function behind ``onnxgate profile``.

    Args:
        model: the ONNX model.
        config: feeds, session settings, run counts, how many nodes to list, where to keep the
            trace.
        progress: called with a short message before slow steps.

    Raises:
        ConfigError: bad options (``--batch`` on a model without a batch dimension, an unknown
            level, threads out of range, an unwritable ``--trace``).
        FeedError: ``--inputs`` does not fit the model.
        ProviderUnavailable: a requested provider is not in this ONNX Runtime build (exit 3).
        RunFailed: ONNX Runtime cannot create a session for the model or run it.
    """
    from onnxgate.runners import OrtRunner, open_runner, runtime_version  # imports ONNX Runtime

    config = config or ProfileConfig()
    options = config.checked_session()
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    signature = Signature.from_graph(loaded.proto.graph)
    notes: list[str] = []
    sample = _sample(loaded, signature, config, notes)
    feeds = validate_feeds(signature, sample.feeds, where=sample.label)
    say = progress or (lambda message: log.info("%s", message))
    with tempfile.TemporaryDirectory(prefix="onnxgate-profile-") as tmp:
        extras = contract_extras(profile_prefix=Path(tmp) / "ort")
        profiled = cast(OrtRunner, open_runner(loaded, options, extras=extras))
        with profiled as runner:
            providers = runner.providers()
            say(
                f"profiling {loaded.path.name} on {', '.join(providers)}: {config.warmup} "
                f"warm-up and {config.runs} counted run(s)"
            )
            for _ in range(config.warmup + config.runs):
                runner.infer(feeds)
            path = runner.end_profiling()
        events = _read_trace(path, loaded.path)
        kept = _keep(path, config.trace) if config.trace is not None else None
    return report_from_trace(
        events,
        warmup=config.warmup,
        runs=config.runs,
        top=config.top,
        model=str(loaded.path),
        runtime=f"onnxruntime {runtime_version()}",
        providers=providers,
        optimization=config.session.opt_level,
        feeds=sample.label,
        shapes=sample.shapes(),
        trace=kept,
        notes=notes,
    )
