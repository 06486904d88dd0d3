"""Sizes for the dimensions nobody named: chosen to fit the model, and said out loud.

A symbolic dimension gets a size by its role. The first axis of an input is a batch and gets 3
(not 1, which broadcasts against anything and hides bugs). The height and width of an image input
(NCHW or NHWC, read from a small static channel axis) get 224, and the positions of token ids (an
integer input that indexes an embedding table) get 128: a 3×3 image or a 3-token sentence is a
shape no user runs, and times nothing. A size every golden sample of the model's contract has wins
over all of these.

The plan is then checked against the graph: ONNX shape inference, strict, on a copy of the graph
that carries only small initializers. A detector whose upsampled features are concatenated with
finer ones, or a classifier whose flattened features meet a fixed weight, rejects sizes that do not
fit. Then other sizes are tried for the height and width (or for the other free dimensions), and
the first the graph accepts is used. When none fits, the plan says so, so that a failed run can
say which shapes it tried and which ``--dim`` to give.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import GraphProto, ModelProto, TensorProto, helper

from onnxgate._native import native_step
from onnxgate.errors import first_line
from onnxgate.model import Signature, TensorSpec

BATCH_SIZE = 3
"""Size of a batch axis nobody named: not 1, which hides broadcasting bugs."""

IMAGE_SIZE = 224
"""Height and width of an image input, unless the graph needs another."""

SEQUENCE_LENGTH = 128
"""Positions of token ids, unless the graph needs another."""

OTHER_SIZE = 3
"""Any other free dimension, unless the graph needs another."""

CANDIDATES = (224, 256, 320, 384, 416, 448, 512, 640, 768, 1024, 299, 300, 192, 160, 128, 112)
CANDIDATES += (96, 64, 56, 48, 32, 28, 16, 8, 4, 2, 1)
"""Sizes tried, in order, when the first plan does not fit the graph."""

SEARCH_SECONDS = 3.0
"""Most time spent trying sizes against the graph."""

SMALL_INITIALIZER = 4096
"""Initializers up to this many elements keep their values in the copy used to check a plan:
shape constants need theirs, weights only their dims."""

BATCH = "batch, not 1"
"""Why a batch axis has its size (and how the hint for a failed run tells it from the others)."""

_CHANNELS = range(1, 5)


@dataclass(frozen=True)
class DimChoice:
    """The size given to one free dimension, and why."""

    size: int
    why: str


@dataclass(frozen=True)
class ShapePlan:
    """The size of every free dimension of a model's inputs.

    ``named`` holds symbolic dimensions by name; ``unnamed`` those with no name, by (input, axis).
    ``fits`` is True when strict shape inference accepted the plan, False when it did not (its
    message is ``problem``), None when it was not asked.
    """

    named: dict[str, DimChoice] = field(default_factory=dict)
    unnamed: dict[tuple[str, int], DimChoice] = field(default_factory=dict)
    fits: bool | None = None
    problem: str = ""

    def shape(self, spec: TensorSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
        """The shape of one input: static dims as declared, ``sizes`` first, then the plan's."""
        shape = []
        for axis, dim in enumerate(spec.shape or ()):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
            elif isinstance(dim, str) and dim in sizes:
                shape.append(sizes[dim])
            elif isinstance(dim, str) and dim in self.named:
                shape.append(self.named[dim].size)
            elif unnamed_label(spec.name, axis) in sizes:
                shape.append(sizes[unnamed_label(spec.name, axis)])
            else:
                choice = self.unnamed.get((spec.name, axis))
                shape.append(choice.size if choice else OTHER_SIZE)
        return tuple(shape)

    def reasons(self) -> list[str]:
        """One phrase per free dimension: ``height=224 (image height, typical)``."""
        said = [f"{name}={c.size} ({c.why})" for name, c in sorted(self.named.items())]
        said += [
            f"{unnamed_label(i, a)}={c.size} ({c.why})"
            for (i, a), c in sorted(self.unnamed.items())
        ]
        return said


def unnamed_label(input_name: str, axis: int) -> str:
    """How a dimension without a name is called, in messages and in ``--dim``: ``images[2]``."""
    return f"{input_name}[{axis}]"


def unnamed_dims(signature: Signature) -> list[str]:
    """The labels of the free dimensions that have no name (``--dim images[2]=224`` sizes one)."""
    return [
        unnamed_label(spec.name, axis)
        for spec in signature.inputs
        for axis, dim in enumerate(spec.shape or ())
        if not (isinstance(dim, int) and dim > 0) and not (isinstance(dim, str) and dim)
    ]


def _image_axes(spec: TensorSpec) -> tuple[int, ...]:
    """The free height and width axes of an NCHW or NHWC image input, or () when it is not one.

    One side may be fixed: a text-line recogniser takes a fixed height and any width.
    """
    shape = spec.shape or ()
    if len(shape) != 4 or spec.dtype not in ("float32", "float16", "bfloat16", "uint8", "float64"):
        return ()

    def free(d: object) -> bool:
        return not (isinstance(d, int) and d > 0)

    def sides(axes: tuple[int, int]) -> tuple[int, ...]:
        return tuple(axis for axis in axes if free(shape[axis]))

    if isinstance(shape[1], int) and shape[1] in _CHANNELS:
        return sides((2, 3))
    if isinstance(shape[3], int) and shape[3] in _CHANNELS:
        return sides((1, 2))
    return ()


def _token_inputs(signature: Signature, indexed: set[str]) -> bool:
    """True when an integer input of rank 2 indexes an embedding table: a text model."""
    return any(
        spec.name in indexed and spec.dtype in ("int64", "int32") and len(spec.shape or ()) == 2
        for spec in signature.inputs
    )


_ROLES = {"image": 0, "sequence": 1, "batch": 2, "other": 3}
_DEFAULTS = {
    "image": DimChoice(IMAGE_SIZE, "typical image size"),
    "sequence": DimChoice(SEQUENCE_LENGTH, "typical sequence length"),
    "batch": DimChoice(BATCH_SIZE, BATCH),
    "other": DimChoice(OTHER_SIZE, "default"),
}


def dim_roles(
    signature: Signature,
    *,
    given: Mapping[str, object] | None = None,
    indexed: set[str] | None = None,
) -> dict[str | tuple[str, int], str]:
    """The role of every free dimension ``given`` leaves out: image, sequence, batch or other.

    Named dimensions are keyed by name, those without a name by (input, axis). A dimension used
    in several roles takes the most specific one (image, then sequence, then batch).
    """
    given = given or {}
    token_model = _token_inputs(signature, indexed or set())
    roles: dict[str | tuple[str, int], str] = {}
    for spec in signature.inputs:
        if spec.shape is None or not (spec.type or "").startswith("tensor("):
            continue
        image = _image_axes(spec)
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, int) and dim > 0:
                continue
            key: str | tuple[str, int] = dim if isinstance(dim, str) and dim else (spec.name, axis)
            if key in given or (isinstance(key, tuple) and unnamed_label(*key) in given):
                continue
            if axis in image:
                role = "image"
            elif (
                token_model
                and axis == 1
                and spec.dtype in ("int64", "int32")
                and len(spec.shape) == 2
            ):
                role = "sequence"
            elif axis == 0 and len(spec.shape) >= 2:
                role = "batch"
            else:
                role = "other"
            if key not in roles or _ROLES[role] < _ROLES[roles[key]]:
                roles[key] = role
    return roles


def plan_dims(
    signature: Signature,
    model: ModelProto | None = None,
    *,
    given: Mapping[str, int] | None = None,
    known: Mapping[str, DimChoice] | None = None,
    indexed: set[str] | None = None,
    default: int | None = None,
) -> ShapePlan:
    """Sizes for the free dimensions of ``signature`` that ``given`` leaves out.

    Args:
        signature: the model's inputs.
        model: the model, to check the plan against its graph; None plans by role alone.
        given: sizes the caller chose; they are not planned and win over everything.
        known: sizes learnt elsewhere (the contract's samples); they win over roles.
        indexed: inputs that index an embedding table (token ids).
        default: one size for every free dimension but an image's height and width, instead of
            the defaults (contracts prove their samples at 1 and at 7).
    """
    given = dict(given or {})
    known = dict(known or {})
    roles = dim_roles(signature, given=given, indexed=indexed)
    chosen: dict[str | tuple[str, int], DimChoice] = {}
    for key, role in roles.items():
        if isinstance(key, str) and key in known:
            chosen[key] = known[key]
        elif default is not None and role != "image":
            chosen[key] = DimChoice(default, "a contract size")
        else:
            chosen[key] = _DEFAULTS[role]
    plan = _plan(chosen)
    if model is None or not (given or any(role != "batch" for role in roles.values())):
        return plan
    return _fit(plan, chosen, roles, signature, model, given, known)


def _plan(
    chosen: Mapping[str | tuple[str, int], DimChoice], fits: bool | None = None, problem: str = ""
) -> ShapePlan:
    named = {k: v for k, v in chosen.items() if isinstance(k, str)}
    unnamed = {k: v for k, v in chosen.items() if isinstance(k, tuple)}
    return ShapePlan(named, unnamed, fits, problem)


def _fit(
    plan: ShapePlan,
    chosen: dict[str | tuple[str, int], DimChoice],
    roles: Mapping[str | tuple[str, int], str],
    signature: Signature,
    model: ModelProto,
    given: Mapping[str, int],
    known: Mapping[str, DimChoice],
) -> ShapePlan:
    """The plan checked against the graph; other sizes tried for one group when it does not fit."""
    skeleton = _skeleton(model)
    if skeleton is None or _rejects(skeleton, signature, None, given) is not None:
        return plan  # sparse weights, or shape inference fails whatever the sizes: it cannot tell
    problem = _rejects(skeleton, signature, plan, given)
    if problem is None:
        return _plan(chosen, fits=True)
    group = [
        k for k, r in roles.items() if r == "image" and not (isinstance(k, str) and k in known)
    ]
    if not group:
        group = [k for k, r in roles.items() if r in ("other", "sequence")]
        group = [k for k in group if not (isinstance(k, str) and k in known)]
    what = "image size" if group and roles[group[0]] == "image" else "size"
    start = time.monotonic()
    for size in CANDIDATES:
        if not group or time.monotonic() - start > SEARCH_SECONDS:
            break
        trial = dict(chosen) | dict.fromkeys(group, DimChoice(size, f"{what} that fits the graph"))
        if _rejects(skeleton, signature, _plan(trial), given) is None:
            return _plan(trial, fits=True)
    return _plan(chosen, fits=False, problem=problem)


def _skeleton(model: ModelProto) -> ModelProto | None:
    """A copy of the model for shape inference: large initializers become typed inputs."""
    graph = model.graph
    if graph.sparse_initializer:
        return None
    light = GraphProto(name=graph.name)
    light.node.extend(graph.node)
    light.output.extend(graph.output)
    light.value_info.extend(graph.value_info)
    light.input.extend(graph.input)
    declared = {i.name for i in graph.input}
    for tensor in graph.initializer:
        count = math.prod(tensor.dims)
        external = tensor.data_location == TensorProto.EXTERNAL
        if count <= SMALL_INITIALIZER and not external:
            light.initializer.append(tensor)
        elif tensor.name not in declared:
            light.input.append(
                helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
    return ModelProto(
        ir_version=model.ir_version,
        opset_import=model.opset_import,
        functions=model.functions,
        graph=light,
    )


def _rejects(
    skeleton: ModelProto, signature: Signature, plan: ShapePlan | None, given: Mapping[str, int]
) -> str | None:
    """None when strict shape inference accepts the inputs at the plan's sizes, else its message.

    With no plan, the inputs keep their declared dims.
    """
    trial = ModelProto()
    trial.CopyFrom(skeleton)
    if plan is None:
        return _infer(trial)
    specs = {s.name: s for s in signature.inputs}
    for value in trial.graph.input:
        spec = specs.get(value.name)
        if spec is None or spec.shape is None or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        for dim, size in zip(dims, plan.shape(spec, given), strict=False):
            dim.Clear()
            dim.dim_value = size
    return _infer(trial)


def _infer(model: ModelProto) -> str | None:
    try:
        with native_step("onnx shape inference (sizing synthetic feeds)"):
            onnx.shape_inference.infer_shapes(
                model, check_type=False, strict_mode=True, data_prop=True
            )
    except Exception as error:  # onnx raises InferenceError, and others on odd graphs
        return first_line(error, 300)
    return None


def describe_shapes(signature: Signature, shapes: Mapping[str, Sequence[int]]) -> str:
    """``input_ids int64[3,128], attention_mask int64[3,128]``."""
    specs = {s.name: s for s in signature.inputs}
    return ", ".join(
        f"{name} {specs[name].dtype if name in specs else ''}[{','.join(map(str, shape))}]"
        for name, shape in shapes.items()
    )


# --- serving ranges ------------------------------------------------------------------------------

BATCH_MAX = (32, 16, 8, 4, 2)
"""Largest batch a starter range proves: the first of these the graph accepts."""

IMAGE_MAX = (640, 512, 416, 320)
"""Largest image side a starter range proves (at least the planned side): the first the graph
accepts. Detectors are served at 320 to 640, so 224 alone would refuse most of their requests."""

SEQUENCE_MAX = (512, 256, 128)
"""Most token positions a starter range proves: the first the graph accepts."""

OTHER_MAX = (64, 32, 16)
"""Largest size a starter range proves for a dimension of no known role."""

BETWEEN_BATCH = 7
"""The batch between the ends of a range: small, odd and not a power of two."""


@dataclass(frozen=True)
class DimRange:
    """The sizes of one free dimension a contract must prove, ``low`` to ``high``, and why."""

    low: int
    high: int
    role: str
    """``batch``, ``image``, ``sequence`` or ``other``."""
    why: str
    given: bool = False
    """The user gave the range (``[feeds] dims``); it is not a starter range."""
    uncapped: int | None = None
    """The top the role and the graph allow, when the cost of a golden sample lowered ``high``
    below it (None when it did not): the speed of the machine that proved it, not the model, set
    ``high``."""

    @property
    def between(self) -> int:
        """A size strictly between the ends when there is one (else ``low``).

        A batch takes 7 when it lies inside; other sizes the midpoint rounded to a multiple of
        the ends' common divisor, so a detector proven at 224 and 640 is proven at 416 too.
        """
        if self.high - self.low < 2:
            return self.low
        if self.role == "batch" and self.low < BETWEEN_BATCH < self.high:
            return BETWEEN_BATCH
        step = math.gcd(self.low, self.high)
        middle = self.low + ((self.high - self.low) // 2 // step) * step
        return middle if self.low < middle < self.high else (self.low + self.high) // 2


def range_key_label(key: str | tuple[str, int]) -> str:
    """A dimension's key as ``--dim`` and ``[feeds] dims`` name it: ``batch`` or ``images[2]``."""
    return key if isinstance(key, str) else unnamed_label(*key)


JOINT_ORDER = ("batch", "other", "sequence", "image")
"""The order starter tops are lowered in when a point ``range_points`` proves takes several tops
at once and together they cost too much, though each alone fits: the batch first (how many inputs
are stacked matters less to a request than their size), then a dimension of no known role, then
token positions, and image sides last, never below the planned (declared or typical) size. Each
steps down through its starter sizes (``BATCH_MAX``, ``OTHER_MAX``...) before any goes below
them. ``range_points`` never pairs the batch's top with another's, so in practice the non-batch
tops give way, in this order."""

_WHY = {
    "batch": "a batch, starter range",
    "image": "an image side, from the planned size to a typical serving size",
    "sequence": "token positions, starter range",
    "other": "starter range",
}

_TOPS = (
    ("batch", BATCH_MAX),
    ("image", IMAGE_MAX),
    ("sequence", SEQUENCE_MAX),
    ("other", OTHER_MAX),
)


def serving_ranges(
    signature: Signature,
    model: ModelProto | None = None,
    *,
    given: Mapping[str, tuple[int, int]] | None = None,
    indexed: set[str] | None = None,
    cost: Callable[[Mapping[str, int]], float] | None = None,
    budget: float = math.inf,
) -> dict[str, DimRange]:
    """The range every free dimension of the inputs is to be proven over, by label.

    ``given`` ranges (``[feeds] dims``) are taken as they are. The others come from the
    dimension's role: a batch 1 to 32, an image side from the planned size (``plan_dims``) to
    640, token positions 1 to 512, any other 1 to 64. Each top is lowered to the first size strict
    shape inference accepts (with the other dimensions at their low ends), when it can tell, and
    that keeps ``cost`` within ``budget``: ``cost`` estimates the seconds one golden sample takes
    (the reference, or its second opinion) at the sizes of every free dimension, by label. A top the cost lowered keeps
    the size it would have had in ``DimRange.uncapped``, and its ``why`` says so.

    Then every point ``range_points`` will prove is costed as a whole, since a point takes
    several tops at once (an image's sides with token positions): while one costs more than
    ``budget``, the first starter top at its end in that point, in ``JOINT_ORDER``, is lowered
    to its next size the graph accepts. Given ranges are never lowered, and are costed at their
    low ends: a given range that alone costs more than ``budget`` narrows no starter range.
    """
    given = dict(given or {})
    every = {range_key_label(k): r for k, r in dim_roles(signature, indexed=indexed).items()}
    roles = dim_roles(signature, given=given, indexed=indexed)
    plan = plan_dims(signature, model, given={k: v[0] for k, v in given.items()}, indexed=indexed)
    ranges = {
        name: DimRange(low, high, every.get(name, "other"), "[feeds] dims", given=True)
        for name, (low, high) in given.items()
    }
    skeleton = _skeleton(model) if model is not None and roles else None
    if skeleton is not None and _rejects(skeleton, signature, None, {}) is not None:
        skeleton = None  # shape inference fails whatever the sizes: it cannot tell
    planned: dict[str | tuple[str, int], DimChoice] = dict(plan.named) | dict(plan.unnamed)
    base = {k: v[0] for k, v in given.items()}
    lows = {k: (planned[k].size if r == "image" and k in planned else 1) for k, r in roles.items()}
    floor = {range_key_label(k): v for k, v in lows.items()} | base

    judged: dict[tuple[tuple[str, int], ...], bool] = {}

    def accepted(sizes: Mapping[str, int]) -> bool:
        """Strict shape inference accepts the inputs at ``sizes`` (by label), the plan's else."""
        if skeleton is None:
            return True
        key = tuple(sorted(sizes.items()))
        if key not in judged:
            judged[key] = _rejects(skeleton, signature, plan, sizes) is None
        return judged[key]

    def affordable(sizes: Mapping[str, int]) -> bool:
        return cost is None or cost(sizes) <= budget

    groups: dict[str, list[str]] = {}
    candidates: dict[str, list[int]] = {}
    for role, tops in _TOPS:
        keys = [k for k, r in roles.items() if r == role]
        if not keys:
            continue
        labels = [range_key_label(k) for k in keys]
        least = max(lows[k] for k in keys)
        sizes = [t for t in tops if t >= least and accepted(base | dict.fromkeys(labels, t))]
        groups[role], candidates[role] = labels, sizes
        reach = sizes[0] if sizes else least  # the graph's top, whatever it costs
        high = next((t for t in sizes if affordable(floor | dict.fromkeys(labels, t))), least)
        why = _WHY[role]
        if reach < max(tops[0], least):
            why += f", at most {reach} (what the graph accepts)"
        uncapped = None
        if high < reach and cost is not None:
            uncapped = reach
            at = floor | dict.fromkeys(labels, reach)
            why += (
                f"; capped at {high} by what a golden sample costs: one at "
                f"{'='.join(labels)}={reach} would take about {cost(at):.0f} s, over the "
                f"{budget:.0f} s a starter range may cost"
            )
        for key in keys:
            ranges[range_key_label(key)] = DimRange(lows[key], high, role, why, uncapped=uncapped)

    def starters(point: Mapping[str, int]) -> dict[str, int]:
        """``point`` with given ranges at their low ends.

        What the starter ranges add is costed, not the sizes the user asked for, which are
        proven whatever they cost.
        """
        return {k: base.get(k, v) for k, v in point.items()}

    while cost is not None:
        over = next(
            (
                starters(p)
                for p in range_points(ranges)
                if not _fits(starters(p), ranges, groups, affordable)
            ),
            None,
        )
        if over is None:
            break  # every point fits, or only given ranges are at their tops in those that do not
        at_top = [
            r
            for r in JOINT_ORDER
            if r in groups and over[groups[r][0]] == _top(ranges[groups[r][0]])
        ]
        # a top steps down through its starter sizes first; only when none has a smaller one left
        # does one go below them, to its low end
        role = next(
            (r for r in at_top if any(t < ranges[groups[r][0]].high for t in candidates[r])),
            at_top[0],
        )
        ranges = _lowered(ranges, groups[role], candidates[role], over, cost, budget)
    return ranges


def _fits(
    point: Mapping[str, int],
    ranges: Mapping[str, DimRange],
    groups: Mapping[str, Sequence[str]],
    affordable: Callable[[Mapping[str, int]], bool],
) -> bool:
    """``point`` is affordable, or nothing in it can be lowered (given ranges are proven as given)."""
    if affordable(point):
        return True
    return not any(point[labels[0]] == _top(ranges[labels[0]]) for labels in groups.values())


def _top(found: DimRange) -> int | None:
    """The top of a range that can be lowered: a starter range's above its low end."""
    return found.high if not found.given and found.high > found.low else None


def _lowered(
    ranges: Mapping[str, DimRange],
    labels: Sequence[str],
    candidates: Sequence[int],
    over: Mapping[str, int],
    cost: Callable[[Mapping[str, int]], float],
    budget: float,
) -> dict[str, DimRange]:
    """``ranges`` with the tops of ``labels`` at their next size below, saying why."""
    was = ranges[labels[0]]
    high = max(next((t for t in candidates if t < was.high), was.low), was.low)
    together = ", ".join(f"{k}={v}" for k, v in over.items() if v == ranges[k].high > ranges[k].low)
    said = (
        f"; lowered to {high}: a golden sample at {together} together would take about "
        f"{cost(over):.0f} s, over the {budget:.0f} s a starter range may cost"
    )
    return dict(ranges) | {
        label: dataclasses.replace(
            ranges[label],
            high=high,
            why=ranges[label].why.split("; lowered to ")[0] + said,
            uncapped=was.uncapped or was.high,
        )
        for label in labels
    }


def input_elements(plan: ShapePlan, signature: Signature, sizes: Mapping[str, int]) -> int:
    """The elements of every input together at ``sizes`` (the plan's for the others)."""
    return sum(
        math.prod(plan.shape(spec, sizes))
        for spec in signature.inputs
        if spec.shape is not None and (spec.type or "").startswith("tensor(")
    )


def range_points(ranges: Mapping[str, DimRange]) -> list[dict[str, int]]:
    """The size combinations that prove ``ranges``, each dimension at its ends and between.

    Not every corner: the reference evaluator is tens of times slower than ONNX Runtime. Every
    dimension at its low end; the batch at its top with the others low, and the others at their
    tops with the batch low; and each group once between its ends with the other low.
    """
    batch = [k for k, r in ranges.items() if r.role == "batch"]
    others = [k for k in ranges if k not in batch]
    low = {k: r.low for k, r in ranges.items()}
    points = [low]
    groups = [g for g in (batch, others) if g]
    for group in groups:
        points.append(low | {k: ranges[k].high for k in group})
    for group in groups:
        points.append(low | {k: ranges[k].between for k in group})
    unique: list[dict[str, int]] = []
    for point in points:
        if point not in unique:
            unique.append(point)
    return unique


def free_sizes(signature: Signature, feeds: Mapping[str, object]) -> dict[str, int]:
    """The size of every free dimension in ``feeds``, by label (first use wins).

    A named dimension is its name (``batch``); one without a name ``INPUT[AXIS]`` (``images[2]``).
    """
    sizes: dict[str, int] = {}
    for spec in signature.inputs:
        value = feeds.get(spec.name)
        shape = getattr(value, "shape", None)
        if spec.shape is None or shape is None:
            continue
        for axis, (dim, size) in enumerate(zip(spec.shape, shape, strict=False)):
            if isinstance(dim, int) and dim > 0:
                continue
            label = dim if isinstance(dim, str) and dim else unnamed_label(spec.name, axis)
            sizes.setdefault(label, int(size))
    return sizes
