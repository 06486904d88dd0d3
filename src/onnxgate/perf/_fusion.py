"""Graph candidates for ``tune``: the model as given, and ONNX Runtime's offline transformer fusions.

ONNX Runtime fuses some patterns when it creates a session (the optimisation level), but its
transformer optimizer (``onnxruntime.transformers.optimizer``) knows more of them for BERT-like
encoders: Attention, SkipLayerNormalization, BiasGelu, and, on request, the tanh approximation
of GELU (``FastGelu``, which Optimum's O3 level ships). Those rewrite the arithmetic, so every
graph made here is only a *candidate*: ``tune`` compares it with the model as given before its
speed counts.

The optimizer cannot always find the number of heads and the width itself (exports that compute
the attention reshape at run time leave it guessing), so both are read from the graph here and
passed in.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from onnxgate._stdout import quiet_tools
from onnxgate.errors import first_line
from onnxgate.model import LoadedModel

log = logging.getLogger(__name__)

AS_GIVEN = "as given"
"""The label of the model as given among the graph candidates."""


@dataclass(frozen=True)
class GraphCandidate:
    """A graph ``tune`` may run instead of the model as given."""

    label: str
    """``as given``, ``attention-fusion``, ``bert-fusion``, ``bert-fusion+gelu-approx``…"""
    proto: onnx.ModelProto | None
    """The rewritten model; None for the model as given (run from its own file)."""
    note: str = ""
    """How the graph was made, for the report."""


@dataclass(frozen=True)
class EncoderShape:
    """What the transformer optimizer needs to know about a BERT-like encoder."""

    heads: int
    hidden: int


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant node outputs with a tensor value, as arrays."""
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
    return found


def _shape_tail(name: str, constants: dict[str, np.ndarray], producers: dict) -> list[int] | None:
    """The last two entries of a 4-entry reshape target, constant or a Concat of pieces."""
    if name in constants:
        values = constants[name].reshape(-1).tolist()
        return [int(v) for v in values[-2:]] if len(values) == 4 else None
    node = producers.get(name)
    if node is None or node.op_type != "Concat" or len(node.input) < 2:
        return None
    pieces = []
    for part in node.input:
        if part in constants:
            pieces.extend(int(v) for v in constants[part].reshape(-1).tolist())
        else:
            pieces.append(None)  # a piece computed at run time (batch, sequence)
    if len(pieces) != 4 or pieces[2] is None or pieces[3] is None:
        return None
    return [pieces[2], pieces[3]]


def encoder_shape(model: onnx.ModelProto) -> EncoderShape | None:
    """Heads and width of a BERT-like encoder, or None when the graph does not look like one.

    BERT-like means LayerNormalization (or a Skip/Embed variant), Softmax and many MatMuls. The
    width is the LayerNormalization scale's length; the heads come from an Attention node's
    ``num_heads``, else from the Reshape to ``[.., .., H, W/H]`` that feeds the attention
    Transpose (either of H and W/H may be -1 and is then derived from the width).
    """
    graph = model.graph
    ops = Counter(node.op_type for node in graph.node)
    norms = sum(ops[o] for o in ("LayerNormalization", "SkipLayerNormalization"))
    if norms < 2 or ops["MatMul"] + ops["Attention"] * 4 < 4:
        return None
    if not ops["Softmax"] and not ops["Attention"]:
        return None
    constants = _constants(graph)
    hidden = None
    for node in graph.node:
        if node.op_type in ("LayerNormalization", "SkipLayerNormalization"):
            scale = node.input[1] if node.op_type == "LayerNormalization" else node.input[2]
            if scale in constants and constants[scale].ndim == 1:
                hidden = int(constants[scale].shape[0])
                break
    if hidden is None:
        return None
    for node in graph.node:
        if node.op_type == "Attention":
            for attr in node.attribute:
                if attr.name == "num_heads" and attr.i > 0:
                    return EncoderShape(heads=int(attr.i), hidden=hidden)
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    votes: Counter[int] = Counter()
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        if not any(c.op_type == "Transpose" for c in consumers.get(node.output[0], [])):
            continue
        tail = _shape_tail(node.input[1], constants, producers)
        if tail is None:
            continue
        heads, size = tail
        if heads <= 0 and size > 0 and hidden % size == 0:
            heads = hidden // size
        if heads > 0 and hidden % heads == 0 and (size <= 0 or heads * size == hidden):
            votes[heads] += 1
    if not votes:
        return None
    return EncoderShape(heads=votes.most_common(1)[0][0], hidden=hidden)


def _fused(
    loaded: LoadedModel, shape: EncoderShape, *, opt_level: int, gelu_approximation: bool
) -> onnx.ModelProto:
    # the ONNX Runtime's own tools, imported only when a graph is to be rewritten
    from onnxruntime.transformers.fusion_options import FusionOptions  # noqa: TID251  (ORT tools)
    from onnxruntime.transformers.optimizer import optimize_model  # noqa: TID251  (ORT tools)

    options = FusionOptions("bert")
    options.enable_gelu_approximation = gelu_approximation
    with quiet_tools():
        # by path: given a proto, the optimizer saves it with external data first, and ONNX
        # Runtime's constant folding then cannot read it
        optimized = optimize_model(
            str(loaded.path),
            model_type="bert",
            num_heads=shape.heads,
            hidden_size=shape.hidden,
            optimization_options=options,
            opt_level=opt_level,
            only_onnxruntime=False,
        )
    return optimized.model


class _Pace:
    """Whether another rewrite starts: none that would end past the deadline.

    The next rewrite is expected to take as long as those made took on average, the first one
    ``first_s``; the labels of the rewrites it stopped are kept for the notes.
    """

    def __init__(
        self, deadline: float | None, clock: Callable[[], float], first_s: float = 0.0
    ) -> None:
        self.deadline = deadline
        self.clock = clock
        self.first_s = first_s
        self.took: list[float] = []
        self.skipped: list[str] = []

    def allows(self, label: str) -> bool:
        expected = statistics.fmean(self.took) if self.took else self.first_s
        if self.deadline is None or self.clock() + expected <= self.deadline:
            return True
        self.skipped.append(label)
        return False

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.took.append(self.clock() - start)


def _attention_candidates(
    loaded: LoadedModel,
    found: list[GraphCandidate],
    seen: list[Counter[str]],
    notes: list[str],
    pace: _Pace,
) -> None:
    """Attention-fused candidates (onnxscript's rewriter): packed QKV, and multi-head.

    Tried on any graph with a Softmax: the rules match only attention, so a graph without it
    costs one rewrite pass and gives no candidate.
    """
    if not any(node.op_type == "Softmax" for node in loaded.proto.graph.node):
        return
    from onnxgate.perf._attention import fuse_attention

    variants = (
        ("attention-fusion", True, "attention fused with packed QKV (onnxscript rewriter)"),
        ("attention-fusion-mha", False, "attention fused, Q/K/V projections kept (onnxscript)"),
    )
    for label, packed, note in variants:
        if not pace.allows(label):
            continue
        try:
            with pace.timing():
                fusion = fuse_attention(loaded.proto, packed=packed)
        except Exception as err:  # onnxscript raises anything; a missing variant is a note
            notes.append(f"{label}: the rewrite failed: {first_line(err)}")
            continue
        if not fusion.attention:
            notes.append(f"{label}: no attention pattern matched; not tried")
            return
        ops = Counter(n.op_type for n in fusion.proto.graph.node)
        if ops in seen:
            notes.append(f"{label}: fuses nothing beyond an earlier graph; not tried")
            continue
        seen.append(ops)
        log.info("%s: %s", label, fusion.describe())
        found.append(GraphCandidate(label, fusion.proto, f"{note}; {fusion.describe()}"))


def graph_candidates(
    loaded: LoadedModel,
    *,
    notes: list[str] | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    first_s: float = 0.0,
) -> list[GraphCandidate]:
    """The model as given, its attention-fused variants, and ONNX Runtime's transformer fusions.

    Attention fusion (:mod:`onnxgate.perf._attention`) is tried on any graph with a Softmax,
    packed and multi-head. For a BERT-like encoder, the transformer optimizer's variants follow:
    its Python fusions alone (``opt_level=0``), after ONNX Runtime's basic level
    (``opt_level=1``, kept only when it fuses differently), and the first with the GELU
    approximation. A variant that cannot be made, or that repeats an earlier graph, becomes a
    note, not an error. No rewrite starts that would end past ``deadline`` (a ``clock()``
    reading) at the pace of those made, the first expected to take ``first_s`` (tune: as long
    as ONNX Runtime took to load the model, whose graph each rewrite walks too, in Python); the
    ones left out are noted.
    """
    notes = notes if notes is not None else []
    found = [GraphCandidate(AS_GIVEN, None, "the model file as given")]
    if loaded.external_data:
        notes.append(
            "the model keeps weights in external data; transformer fusions are not tried "
            "(session settings are)"
        )
        return found
    seen: list[Counter[str]] = [Counter(n.op_type for n in loaded.proto.graph.node)]
    pace = _Pace(deadline, clock, first_s)
    _attention_candidates(loaded, found, seen, notes, pace)
    shape = encoder_shape(loaded.proto)
    if shape is not None:
        _encoder_candidates(loaded, shape, found, seen, notes, pace)
    if pace.skipped:
        notes.append(
            "the deadline for graph candidates (a third of the time budget) came before these "
            "rewrites were made: " + ", ".join(pace.skipped)
        )
    return found


def _encoder_candidates(
    loaded: LoadedModel,
    shape: EncoderShape,
    found: list[GraphCandidate],
    seen: list[Counter[str]],
    notes: list[str],
    pace: _Pace,
) -> None:
    """ONNX Runtime's transformer optimizer's variants for a BERT-like encoder."""
    log.info("BERT-like encoder: %s heads, width %s", shape.heads, shape.hidden)
    what = f"{shape.heads} heads, width {shape.hidden}"
    variants = (
        ("bert-fusion", 0, False, f"ONNX Runtime transformer fusions ({what})"),
        ("bert-fusion-basic", 1, False, f"ONNX Runtime basic level, then its fusions ({what})"),
        (
            "bert-fusion+gelu-approx",
            0,
            True,
            f"transformer fusions with the tanh approximation of GELU ({what})",
        ),
    )
    for label, level, approx, note in variants:
        if not pace.allows(label):
            continue
        try:
            with pace.timing():
                proto = _fused(loaded, shape, opt_level=level, gelu_approximation=approx)
        except Exception as err:  # the optimizer raises anything; a missing variant is a note
            notes.append(f"{label}: the transformer optimizer failed: {first_line(err)}")
            continue
        ops = Counter(n.op_type for n in proto.graph.node)
        if ops in seen:
            notes.append(f"{label}: fuses nothing beyond an earlier graph; not tried")
            continue
        seen.append(ops)
        fused = sorted(set(ops) - set(seen[0]))
        found.append(
            GraphCandidate(label, proto, note + (f"; adds {', '.join(fused)}" if fused else ""))
        )
