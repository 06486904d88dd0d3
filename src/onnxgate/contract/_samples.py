"""Golden samples that prove the sizes a model will be served at.

A contract's samples are its proof: ``serve`` and ``deploy`` accept exactly the sizes they were
made at (``signature.dims``: the smallest to the largest per symbolic dimension). So the samples
take every free dimension to both ends of its serving range and once between: the range given in
``[feeds] dims``, or a starter range from the dimension's role (``serving_ranges``). The reference
evaluator is tens of times slower than ONNX Runtime, so the points are not every corner
(``range_points``) and a starter range stops where one sample would take the reference (or the
second opinion that checks it, whichever is slower) more than ``SAMPLE_SECONDS``. That cap is
this machine's speed, not the model's: a capped range says so in its reason, which the contract
records (``DimBound.why``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from onnx import ModelProto

from onnxgate.data import (
    DimRange,
    Sample,
    ValueRange,
    free_sizes,
    infer_ranges,
    input_elements,
    load_feeds,
    plan_dims,
    range_points,
    serving_ranges,
    synthetic_samples,
    unnamed_dims,
    unnamed_label,
    validate_feeds,
)
from onnxgate.errors import ConfigError, GateError
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners import Runner

SAMPLE_SECONDS = 30.0
"""The most time one golden sample at the top of a starter range may take the reference or its
second opinion (as estimated from one sample at the low end); a given range is proven whatever it
costs."""


def golden_samples(
    loaded: LoadedModel,
    *,
    inputs: str | Path | None = None,
    dims: Mapping[str, int | Sequence[int]] | None = None,
    ranges: Mapping[str, ValueRange] | None = None,
    seed: int = 0,
    probe: Callable[[Sample], float] | None = None,
    progress: Callable[[str], None] | None = None,
    on_ranges: Callable[[dict[str, DimRange]], None] | None = None,
) -> list[Sample]:
    """Samples for a contract that prove the sizes the model will be served at.

    ``dims`` gives the serving range of a dimension (``[min, max]``, or one size; several sizes
    span their smallest to their largest). Every free dimension it leaves out gets a starter
    range from its role (``serving_ranges``: a batch 1 to 32, an image side up to 640, token
    positions up to 512). The samples take each dimension to both ends of its range and once
    between (``range_points``). With ``inputs``, the data's samples are kept as they are, and the
    sizes they leave unproven are made from the first of them, repeated or cut along the
    dimension; only a batch gets a starter range then, since repeating rows is all it changes.

    ``probe`` times the reference on one sample (the data's first, or every dimension at its
    low end): starter ranges then stop where one sample would take the reference more than
    ``SAMPLE_SECONDS`` (estimated by input size), since the ONNX reference evaluator is 40 to 150
    times slower than ONNX Runtime. Given ranges are proven whatever they cost.

    ``on_ranges`` is called with the range each free dimension is proven over, and why (what
    the contract records in ``signature.dims``).

    Raises:
        ConfigError: a dimension names nothing in the model, or the data lies outside a given
            range.
    """
    signature = Signature.from_graph(loaded.proto.graph)
    given = _given(signature, dims)
    indexed = set(infer_ranges(loaded.proto))
    wanted = serving_ranges(signature, loaded.proto, given=given, indexed=indexed)
    data = (
        []
        if inputs is None
        else [s.sized(signature) for s in load_feeds(inputs, signature=signature)]
    )
    made: dict[tuple[tuple[str, int], ...], list[Sample]] = {}

    def synthesized(point: Mapping[str, int]) -> list[Sample]:
        key = tuple(sorted(point.items()))
        if key not in made:  # each shape made (and announced) once
            made[key] = synthetic_samples(
                signature, model=loaded.proto, dims=point, ranges=ranges, seed=seed
            )
        return made[key]

    if probe is not None and not all(r.given for r in wanted.values()):
        first = data[0] if data else synthesized(range_points(wanted)[0])[0]
        seconds = probe(first)
        if seconds > 0:
            wanted = measured_ranges(
                signature, loaded.proto, first, seconds, given=given, indexed=indexed
            )
    if inputs is None:
        _said(wanted, progress, on_ranges)
        return [sample for point in range_points(wanted) for sample in synthesized(point)]
    if not data:
        _said(wanted, progress, on_ranges)
        return data
    seen = [free_sizes(signature, s.feeds) for s in data]
    kept, proven = _with_data(wanted, seen, given, data, inputs)
    _said(kept | proven, progress, on_ranges)
    ties = _ties(seen, kept, set(unnamed_dims(signature)))
    resized = []
    for point in range_points(kept):
        point = point | {other: point[name] for name, others in ties.items() for other in others}
        if any(all(s.get(k) == v for k, v in point.items()) for s in seen):
            continue
        resized.append(_resized(signature, data[0], point))
    return data + resized


def proven_ranges(
    loaded: LoadedModel,
    probed: Sample,
    seconds: float,
    *,
    inputs: str | Path | None = None,
    dims: Mapping[str, int | Sequence[int]] | None = None,
) -> dict[str, DimRange]:
    """The ranges ``golden_samples`` proves when the reference takes ``seconds`` on ``probed``.

    What ``gate init`` tells before any export runs: the starter ranges, and which of them this
    machine's speed caps.

    Raises:
        ConfigError: a dimension names nothing in the model, or the data lies outside a given
            range.
    """
    signature = Signature.from_graph(loaded.proto.graph)
    given = _given(signature, dims)
    indexed = set(infer_ranges(loaded.proto))
    wanted = measured_ranges(signature, loaded.proto, probed, seconds, given=given, indexed=indexed)
    data = [] if inputs is None else load_feeds(inputs, signature=signature)
    if not data:
        return wanted
    kept, proven = _with_data(
        wanted, [free_sizes(signature, s.feeds) for s in data], given, data, inputs
    )
    return kept | proven


def _given(
    signature: Signature, dims: Mapping[str, int | Sequence[int]] | None
) -> dict[str, tuple[int, int]]:
    """``dims`` as ranges (``[min, max]``, one size, or sizes spanning their ends), checked."""
    given = {
        name: (min(sizes), max(sizes))
        for name, sizes in (
            (k, [v] if isinstance(v, int) else list(v)) for k, v in (dims or {}).items()
        )
    }
    free = set(unnamed_dims(signature)) | {d for s in signature.inputs for d in s.symbolic_dims}
    unknown = sorted(set(given) - free)
    if unknown:
        raise ConfigError(
            f"dimension {unknown[0]!r} is not a free dimension of the model's inputs; it has: "
            f"{', '.join(sorted(free)) or 'none (all inputs are fixed)'}.",
            field="feeds.dims",
        )
    return given


def _with_data(
    wanted: Mapping[str, DimRange],
    seen: Sequence[Mapping[str, int]],
    given: Mapping[str, tuple[int, int]],
    data: Sequence[Sample],
    inputs: str | Path | None,
) -> tuple[dict[str, DimRange], dict[str, DimRange]]:
    """The ranges proven with data: (those resized to, those only the data's sizes prove).

    Given ranges stay as given, and a batch's starter range widens to the data's batches; any
    other dimension is proven at the sizes the data has.

    Raises:
        ConfigError: the data lies outside a given range.
    """
    for sizes, sample in zip(seen, data, strict=True):
        for name, (low, high) in given.items():
            if name in sizes and not low <= sizes[name] <= high:
                raise ConfigError(
                    f"{inputs}: sample {sample.label} has {name}={sizes[name]}, outside the "
                    f"range feeds.dims gives it ({low}..{high}).",
                    hint="Widen the range, or give data inside it.",
                    field="feeds.dims",
                )
    kept: dict[str, DimRange] = {}
    proven: dict[str, DimRange] = {}
    for name, found in wanted.items():
        sizes = [s[name] for s in seen if name in s]
        if found.given:
            kept[name] = found
        elif found.role == "batch" and sizes:
            low, high = min([found.low, *sizes]), max([found.high, *sizes])
            why = found.why if high == found.high else f"{found.why}, widened to the data's {high}"
            capped = found.uncapped if found.uncapped and high < found.uncapped else None
            kept[name] = dataclasses.replace(found, low=low, high=high, why=why, uncapped=capped)
        elif sizes:
            why = "the sizes of the data given"
            proven[name] = DimRange(min(sizes), max(sizes), found.role, why)
    return kept, proven


def _said(
    ranges: dict[str, DimRange],
    progress: Callable[[str], None] | None,
    on_ranges: Callable[[dict[str, DimRange]], None] | None,
) -> None:
    if progress is not None and ranges:
        progress(
            "proving " + ", ".join(f"{k} {r.low}..{r.high} ({r.why})" for k, r in ranges.items())
        )
    if on_ranges is not None:
        on_ranges(dict(ranges))


def _ties(
    seen: Sequence[Mapping[str, int]], kept: Mapping[str, object], unnamed: set[str]
) -> dict[str, list[str]]:
    """The unnamed dimensions the data shows are one with a dimension resized: they follow it.

    An exporter that names no dimension leaves a batch shared by two inputs as two unnamed ones
    (silero's ``input[0]`` and ``state[1]``). Resizing one alone makes feeds the model refuses, so
    an unnamed dimension of the same size as a resized one in every sample, over at least two
    sizes, is resized with it.
    """
    ties: dict[str, list[str]] = {}
    for name in kept:
        sizes = [s.get(name) for s in seen]
        if None in sizes or len(set(sizes)) < 2:
            continue  # one size is no evidence: a 1 matches every other 1
        ties[name] = [
            other
            for other in sorted(unnamed - {name} - set(kept))
            if all(s.get(other) == size for s, size in zip(seen, sizes, strict=True))
        ]
    return ties


def measured_ranges(
    signature: Signature,
    model: ModelProto,
    probed: Sample,
    seconds: float,
    *,
    given: Mapping[str, tuple[int, int]] | None = None,
    indexed: set[str] | None = None,
) -> dict[str, DimRange]:
    """``serving_ranges`` with starter tops capped by what one golden sample costs.

    A top stops where one sample would take more than ``SAMPLE_SECONDS``, estimated (by input
    size) from ``probed``, which took ``seconds``. A capped range's ``why`` names what was
    measured: that machine's speed set its top, not the model.
    """
    plan = plan_dims(signature)
    sizes = free_sizes(signature, probed.feeds)
    base = input_elements(plan, signature, sizes) or 1

    def cost(at: Mapping[str, int]) -> float:
        return seconds * input_elements(plan, signature, at) / base

    ranges = serving_ranges(
        signature, model, given=given, indexed=indexed, cost=cost, budget=SAMPLE_SECONDS
    )
    shown = ",".join(f"{k}={v}" for k, v in sizes.items()) or probed.label
    measured = f" (one sample took {seconds:.2g} s at {shown}, on the machine that proved it)"
    return {
        name: dataclasses.replace(found, why=found.why + measured)
        if found.uncapped is not None
        else found
        for name, found in ranges.items()
    }


def reference_probe(signature: Signature, *runners: Runner) -> Callable[[Sample], float]:
    """Seconds the slowest of ``runners`` takes on one sample (0.0 when all fail).

    ``write_contract`` says why they failed. The runners are those that run every golden sample: the reference, and the second opinion
    that checks it (the reference evaluator, when ONNX Runtime makes the golden outputs).
    """

    def probe(sample: Sample) -> float:
        taken = 0.0
        for runner in runners:
            try:
                feeds = validate_feeds(signature, sample.feeds, where=sample.label)
                with runner:
                    start = time.perf_counter()
                    runner.infer(feeds)
                    taken = max(taken, time.perf_counter() - start)
            except GateError:
                continue
        return taken

    return probe


def _resized(signature: Signature, sample: Sample, point: Mapping[str, int]) -> Sample:
    """``sample`` with each dimension of ``point`` at its size: the data repeated, or cut."""
    feeds = dict(sample.feeds)
    for spec in signature.inputs:
        value = feeds.get(spec.name)
        if spec.shape is None or not isinstance(value, np.ndarray):
            continue
        for axis, dim in enumerate(spec.shape):
            label = dim if isinstance(dim, str) and dim else unnamed_label(spec.name, axis)
            size = point.get(label) if not (isinstance(dim, int) and dim > 0) else None
            if size is not None and axis < value.ndim and value.shape[axis] != size:
                value = np.take(value, np.arange(size) % value.shape[axis], axis=axis)
        feeds[spec.name] = value
    shown = ",".join(f"{k}={v}" for k, v in point.items())
    return Sample(f"{sample.label} resized to {shown}", feeds).sized(signature)
