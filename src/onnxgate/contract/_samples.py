"""Golden samples that prove the sizes a model will be served at.

A contract's samples are its proof: ``serve`` and ``deploy`` accept exactly the sizes they were
made at (``signature.dims``: the smallest to the largest per symbolic dimension). So the samples
take every free dimension to both ends of its serving range and once between: the range given in
``[feeds] dims``, or a starter range from the dimension's role (``serving_ranges``). The reference
evaluator is tens of times slower than ONNX Runtime, so the points are not every corner
(``range_points``) and a starter range stops where one sample would cost the reference more than
``SAMPLE_SECONDS``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from onnxgate.data import (
    Sample,
    ValueRange,
    infer_ranges,
    load_feeds,
    synthetic_samples,
    validate_feeds,
)
from onnxgate.data._dims import (
    free_sizes,
    input_elements,
    plan_dims,
    range_points,
    serving_ranges,
    unnamed_dims,
    unnamed_label,
)
from onnxgate.errors import ConfigError, GateError
from onnxgate.model import LoadedModel, Signature
from onnxgate.runners import Runner

SAMPLE_SECONDS = 30.0
"""The most time one golden sample at the top of a starter range may take the reference (as
estimated from one sample at the low end); a given range is proven whatever it costs."""


def golden_samples(
    loaded: LoadedModel,
    *,
    inputs: str | Path | None = None,
    dims: Mapping[str, int | Sequence[int]] | None = None,
    ranges: Mapping[str, ValueRange] | None = None,
    seed: int = 0,
    probe: Callable[[Sample], float] | None = None,
    progress: Callable[[str], None] | None = None,
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

    Raises:
        ConfigError: a dimension names nothing in the model, or the data lies outside a given
            range.
    """
    signature = Signature.from_graph(loaded.proto.graph)
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
            wanted = serving_ranges(
                signature,
                loaded.proto,
                given=given,
                indexed=indexed,
                affordable=_affordable(signature, first, seconds),
            )
    if progress is not None and wanted:
        progress(
            "proving " + ", ".join(f"{k} {r.low}..{r.high} ({r.why})" for k, r in wanted.items())
        )
    if inputs is None:
        return [sample for point in range_points(wanted) for sample in synthesized(point)]
    if not data:
        return data
    seen = [free_sizes(signature, s.feeds) for s in data]
    for sizes, sample in zip(seen, data, strict=True):
        for name, (low, high) in given.items():
            if name in sizes and not low <= sizes[name] <= high:
                raise ConfigError(
                    f"{inputs}: sample {sample.label} has {name}={sizes[name]}, outside the "
                    f"range feeds.dims gives it ({low}..{high}).",
                    hint="Widen the range, or give data inside it.",
                    field="feeds.dims",
                )
    kept = {}
    for name, found in wanted.items():
        sizes = [s[name] for s in seen if name in s]
        if found.given:
            kept[name] = found
        elif found.role == "batch" and sizes:
            kept[name] = dataclasses.replace(
                found, low=min([found.low, *sizes]), high=max([found.high, *sizes])
            )
    ties = _ties(seen, kept, set(unnamed_dims(signature)))
    made = []
    for point in range_points(kept):
        point = point | {other: point[name] for name, others in ties.items() for other in others}
        if any(all(s.get(k) == v for k, v in point.items()) for s in seen):
            continue
        made.append(_resized(signature, data[0], point))
    return data + made


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


def _affordable(
    signature: Signature, probed: Sample, seconds: float
) -> Callable[[Mapping[str, int]], bool]:
    """Whether a sample at some sizes would take the reference at most ``SAMPLE_SECONDS``.

    Estimated from ``probed``, which took ``seconds``, in proportion to the inputs' elements.
    """
    plan = plan_dims(signature)
    base = input_elements(plan, signature, free_sizes(signature, probed.feeds)) or 1

    def affordable(sizes: Mapping[str, int]) -> bool:
        return seconds * input_elements(plan, signature, sizes) / base <= SAMPLE_SECONDS

    return affordable


def reference_probe(runner: Runner, signature: Signature) -> Callable[[Sample], float]:
    """Seconds ``runner`` takes on one sample (0.0 when it fails: ``write_contract`` says why)."""

    def probe(sample: Sample) -> float:
        try:
            feeds = validate_feeds(signature, sample.feeds, where=sample.label)
            with runner:
                start = time.perf_counter()
                runner.infer(feeds)
                return time.perf_counter() - start
        except GateError:
            return 0.0

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
