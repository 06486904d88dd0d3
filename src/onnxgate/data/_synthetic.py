"""Synthetic feeds generated from a model's signature.

Random inputs are only useful when they are inputs the model could meet, so three choices are
deliberate. Free dimensions get sizes that fit the model (``_dims``: a batch of 3, not 1, which
broadcasts against anything and hides the bugs a second batch size exposes; images at a size the
graph accepts; sentences of 128 tokens), and every run says which. Integer inputs that index an
embedding table (a ``Gather`` on an initializer) stay below the table's size, as token ids stay
below the vocabulary.
Inputs whose name contains ``mask`` are ones, as an attention mask over real tokens is; any other
choice is one ``--range`` away.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto

from onnxgate._words import setting
from onnxgate.data._dims import (
    BATCH,
    BATCH_SIZE,
    DimChoice,
    ShapePlan,
    describe_shapes,
    plan_dims,
    unnamed_dims,
    unnamed_label,
)
from onnxgate.data._feeds import Sample, describe_spec, numpy_dtype
from onnxgate.errors import (
    ConfigError,
    FeedError,
    GateError,
    ReferenceFailed,
    RunFailed,
    SessionFailed,
)
from onnxgate.model import Signature, TensorSpec

DEFAULT_DIM = BATCH_SIZE
"""Size given to a batch dimension nobody named: not 1, which hides broadcasting bugs."""

MAX_ELEMENTS = 2**28
"""Most elements of one synthetic input (1 GiB of float32): a typo in --dim is not a MemoryError."""

MAX_SHAPES = 64
"""Most shape combinations one run may ask for (the product of the sizes given per dimension)."""

_WORDS = np.array(["onnx", "gate", "runtime", "model", "a", "bb", "ccc", ""], dtype=object)


@dataclass(frozen=True)
class ValueRange:
    """Values of one input: uniform in ``[low, high)``, or the constant ``low`` when equal."""

    low: float
    high: float
    why: str = "given"

    @property
    def constant(self) -> bool:
        """True when every element takes the value ``low``."""
        return self.low == self.high

    def __str__(self) -> str:
        return f"{self.low:g}" if self.constant else f"[{self.low:g}, {self.high:g})"


FLOAT_RANGE = ValueRange(0.0, 1.0, "default for floats")
INT_RANGE = ValueRange(0, 10, "default for integers")


def parse_dims(items: Iterable[str] | None) -> dict[str, list[int]]:
    """``["batch=4", "seq=16,128"]`` → ``{"batch": [4], "seq": [16, 128]}``.

    Raises:
        ConfigError: an item is not ``name=size[,size...]`` with positive sizes.
    """
    dims: dict[str, list[int]] = {}
    for item in items or ():
        name, sep, sizes = item.partition("=")
        try:
            values = [int(v) for v in sizes.split(",") if v.strip()]
        except ValueError:
            values = []
        if not sep or not name.strip() or not values or min(values) < 1:
            raise ConfigError(
                f"--dim {item!r} is not NAME=SIZE[,SIZE...] with sizes of 1 or more.",
                hint="For example --dim batch=4 --dim seq=16,128.",
            )
        dims[name.strip()] = values
    return dims


def parse_ranges(items: Iterable[str] | None) -> dict[str, ValueRange]:
    """``["input_ids=0:30522", "attention_mask=1"]`` → value ranges per input.

    Raises:
        ConfigError: an item is not ``input=LOW:HIGH`` or ``input=VALUE``.
    """
    ranges: dict[str, ValueRange] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        low_text, colon, high_text = text.partition(":")
        try:
            low = float(low_text)
            high = float(high_text) if colon else low
        except ValueError:
            sep = ""
        if not sep or not name.strip() or not math.isfinite(low + high) or high < low:
            raise ConfigError(
                f"--range {item!r} is not INPUT=LOW:HIGH (HIGH excluded) or INPUT=VALUE.",
                hint="For example --range input_ids=0:30522 --range attention_mask=1.",
            )
        ranges[name.strip()] = ValueRange(low, high)
    return ranges


def infer_ranges(model: ModelProto) -> dict[str, ValueRange]:
    """Ranges the graph itself implies: an input used as ``Gather`` indices into an initializer.

    Returns:
        Input name → ``[0, rows)`` for each integer input that indexes a constant table.
    """
    graph = model.graph
    tables = {t.name: list(t.dims) for t in graph.initializer}
    inputs = {i.name for i in graph.input} - set(tables)
    ranges: dict[str, ValueRange] = {}
    for node in graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        data, indices = node.input[0], node.input[1]
        if indices not in inputs or data not in tables:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        shape = tables[data]
        if not shape or not -len(shape) <= axis < len(shape):
            continue
        rows = shape[axis]
        known = ranges.get(indices)
        if rows > 0 and (known is None or rows < known.high):
            ranges[indices] = ValueRange(0, rows, f"indexes {data} ({rows} rows)")
    return ranges


def default_range(spec: TensorSpec) -> ValueRange:
    """The range used when neither the user nor the graph gives one."""
    if "mask" in spec.name.lower():
        return ValueRange(1, 1, "mask: ones")
    dtype = numpy_dtype(spec.dtype or "float32")
    if dtype == np.dtype(bool):
        return ValueRange(0, 2, "random booleans")
    if dtype == np.dtype(object):
        return ValueRange(0, len(_WORDS), "random words")
    return INT_RANGE if dtype.kind in "iu" else FLOAT_RANGE


def _values(
    spec: TensorSpec, shape: tuple[int, ...], value_range: ValueRange, rng: np.random.Generator
) -> np.ndarray:
    dtype = numpy_dtype(spec.dtype or "")
    if dtype == np.dtype(object):
        return rng.choice(_WORDS, size=shape).astype(object)
    if dtype == np.dtype(bool):
        if value_range.constant:
            return np.full(shape, bool(value_range.low))
        return rng.integers(0, 2, size=shape).astype(bool)
    if value_range.constant:
        return np.full(shape, value_range.low).astype(dtype)
    if dtype.kind in "iu":
        low, high = int(np.ceil(value_range.low)), int(np.ceil(value_range.high))
        info = np.iinfo(dtype)
        low, high = max(low, int(info.min)), min(high, int(info.max) + 1)
        return rng.integers(low, max(high, low + 1), size=shape, dtype=np.int64).astype(dtype)
    values = rng.uniform(value_range.low, value_range.high, size=shape)
    return values.astype(np.float32).astype(dtype)


def synthetic_samples(
    signature: Signature,
    *,
    model: ModelProto | None = None,
    dims: Mapping[str, int | Sequence[int]] | None = None,
    ranges: Mapping[str, ValueRange] | None = None,
    seed: int = 0,
    default_dim: int | None = None,
    known: Mapping[str, DimChoice] | None = None,
) -> list[Sample]:
    """Seeded random feeds for every input, one sample per combination of dimension sizes.

    Args:
        signature: the model's inputs.
        model: the model, to infer ranges of indices into embedding tables.
        dims: sizes per symbolic dimension; several sizes give several samples (their product).
        ranges: value ranges per input; they win over inferred and default ones.
        seed: seed of the generator; the same seed gives the same feeds.
        default_dim: one size for every free dimension ``dims`` leaves out but an image's
            height and width; None plans each by its role. Either way the plan is checked against
            the graph (``plan_dims``).
        known: sizes learnt elsewhere, such as the contract's samples; they win over roles.

    Raises:
        ConfigError: a dimension or range names nothing in the model, or too many shapes.
        FeedError: an input is a sequence or map, which cannot be generated.
    """
    wanted = {k: [v] if isinstance(v, int) else list(v) for k, v in (dims or {}).items()}
    known_dims = {d for spec in signature.inputs for d in spec.symbolic_dims}
    unnamed = unnamed_dims(signature)
    unknown = sorted(set(wanted) - known_dims - set(unnamed))
    if unknown:
        free = sorted(known_dims) + unnamed
        raise ConfigError(
            f"dimension {unknown[0]!r} is not a free dimension of the model's inputs; "
            f"it has: {', '.join(free) or 'none (all inputs are fixed)'}"
            + (" (a dimension without a name is INPUT[AXIS])." if unnamed else "."),
            field="feeds.dims",
        )
    given = dict(ranges or {})
    names = {spec.name for spec in signature.inputs}
    stray = sorted(set(given) - names)
    if stray:
        raise ConfigError(
            f"feeds.ranges names {stray[0]!r}, which is not an input of the model; inputs: "
            f"{', '.join(sorted(names))}.",
            field="feeds.ranges",
        )
    if seed < 0:
        raise ConfigError(f"feeds.seed {seed} must be 0 or more.", field="feeds.seed")
    for spec in signature.inputs:
        if spec.type is not None and spec.type.startswith("tensor(") and spec.shape is None:
            raise FeedError(
                f"input {spec.name!r} declares no rank, so synthetic feeds cannot shape it.",
                hint=f"Pass real data with {setting('feeds.inputs')}.",
            )
        if spec.type is None or not spec.type.startswith("tensor("):
            raise FeedError(
                f"input {spec.name!r} is {describe_spec(spec)}; synthetic feeds are made only for "
                "tensors.",
                hint=f"Pass real data with {setting('feeds.inputs')}.",
            )
    chosen = chosen_ranges(signature, model, given)
    combos = list(itertools.product(*wanted.values())) or [()]
    if len(combos) > MAX_SHAPES:
        raise ConfigError(
            f"feeds.dims asks for {len(combos)} shapes; at most {MAX_SHAPES} per run.",
            field="feeds.dims",
        )
    plan = plan_dims(
        signature,
        model,
        given=dict(zip(wanted, combos[0], strict=True)),
        known=known,
        indexed=set(infer_ranges(model)) if model is not None else set(),
        default=default_dim,
    )
    samples = []
    for combo in combos:
        sizes = dict(zip(wanted, combo, strict=True))
        sizes |= {d: plan.named[d].size for d in sorted(known_dims - set(sizes))}
        rng = np.random.default_rng(seed)
        feeds = {}
        for spec in signature.inputs:
            shape = plan.shape(spec, sizes)
            count = math.prod(shape)
            if count > MAX_ELEMENTS:
                raise ConfigError(
                    f"input {spec.name!r} would have shape {list(shape)} ({count:,} elements); "
                    f"synthetic feeds stop at {MAX_ELEMENTS:,} per input."
                )
            feeds[spec.name] = _values(spec, shape, chosen[spec.name], rng)
        parts = [f"{k}={v}" for k, v in sorted(sizes.items())]
        parts += [f"{unnamed_label(*k)}={c.size}" for k, c in sorted(plan.unnamed.items())]
        label = ",".join(parts) or "synthetic"
        samples.append(Sample(label, feeds, dims=sizes))
        _announce(signature, plan, samples[-1], known_dims | set(unnamed))
    return samples


@dataclass(frozen=True)
class Synthesized:
    """What a run was fed when nobody gave data: for the note on stderr and for failure hints."""

    shapes: str
    """``images float32[3,3,224,224]``."""
    reasons: list[str]
    """Why each free dimension has its size: ``height=224 (typical image size)``."""
    free: list[str]
    """Free dimensions the user can size (``feeds.dims``), batches left out if there are others."""
    fits: bool | None
    problem: str

    @staticmethod
    def may_explain(error: GateError) -> bool:
        """Whether these feeds may be why ``error`` happened: a run failed, not a session.

        A runtime that refuses the model (an operator it lacks, an output it cannot return)
        refuses it whatever the inputs; real data would change nothing.
        """
        return isinstance(error, RunFailed | ReferenceFailed) and not isinstance(
            error, SessionFailed
        )

    def hint(self) -> str:
        """What to try after a run on these feeds failed."""
        text = f"The inputs were synthesized: {self.shapes}"
        if self.reasons:
            text += f"; {', '.join(self.reasons)}"
        text += "."
        if self.fits is False:
            text += f" Shape inference rejects these sizes: {self.problem}"
            text += "" if text.endswith(".") else "."
        inputs = setting("feeds.inputs")
        if not self.free:
            return f"{text} Give real data with {inputs}."
        dims = setting("feeds.dims", self.free)
        return f"{text} Give sizes that fit with {dims}, or real data with {inputs}."

    def notice(self) -> str:
        """The note a run on these feeds leaves: what they are, and how to choose others."""
        why = f": {', '.join(self.reasons)}" if self.reasons else ""
        dims = setting("feeds.dims", self.free) if self.free else ""
        choose = f"{dims} or {setting('feeds.inputs')}" if dims else setting("feeds.inputs")
        return f"synthetic {self.shapes}{why}; {choose} to choose"


_LISTENER: ContextVar[Callable[[Synthesized], None] | None] = ContextVar(
    "onnxgate_synthetic_listener", default=None
)


@contextmanager
def listen_synthetic(callback: Callable[[Synthesized], None]) -> Iterator[None]:
    """Call ``callback`` with every set of synthetic feeds made inside the block."""
    token = _LISTENER.set(callback)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def _announce(signature: Signature, plan: ShapePlan, sample: Sample, dims: set[str]) -> None:
    callback = _LISTENER.get()
    if callback is None:
        return
    batches = {unnamed_label(*k) for k, c in plan.unnamed.items() if c.why == BATCH}
    batches |= {d for d, c in plan.named.items() if c.why == BATCH}
    sized = [d for d in sorted(dims) if d not in batches]
    callback(
        Synthesized(
            shapes=describe_shapes(signature, sample.shapes()),
            reasons=plan.reasons(),
            free=sized or sorted(dims),
            fits=plan.fits,
            problem=plan.problem,
        )
    )


def chosen_ranges(
    signature: Signature, model: ModelProto | None, ranges: Mapping[str, ValueRange] | None
) -> dict[str, ValueRange]:
    """The range each input's synthetic values come from, with the reason, for reports."""
    implied = infer_ranges(model) if model is not None else {}
    given = ranges or {}
    return {
        spec.name: given.get(spec.name) or implied.get(spec.name) or default_range(spec)
        for spec in signature.inputs
        if spec.type and spec.type.startswith("tensor(")
    }
