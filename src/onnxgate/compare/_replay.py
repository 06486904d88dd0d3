"""Replay the first diverging node alone, on both sides, with the same input tensors.

Localisation names the first node whose outputs disagree while the values it reads agree within
tolerance. That leaves two explanations: the two implementations of the operator differ, or the
inputs differed a little (within tolerance) and the node amplified it. Replay measures which: a
model holding that node alone (its weights embedded, every value it reads a graph input) runs on
each side, fed the reference side's tensors. Outputs that still disagree mean the implementations
(or the node's weights, when two files are compared) differ on identical inputs. Outputs that
agree mean the difference came in through the inputs; the reference side then runs the node on
the candidate's inputs as well, and the ratio of the output difference to the input difference is
the amplification, measured.

Where onnxgate knows a deviation of that operator version (``runners/_reference_fixes.py``), the
replay says which side the specification supports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

from onnxgate._words import setting
from onnxgate.compare._report import KnownDeviation, Replay
from onnxgate.compat.versions import opset_map
from onnxgate.errors import GateError, first_line
from onnxgate.model import LoadedModel, constant_values, node_reads

if TYPE_CHECKING:
    from onnxgate.runners import TensorTap
    from onnxgate.settings import Tolerances


def operator_label(node: NodeProto, model: onnx.ModelProto) -> tuple[str, int | None]:
    """``BatchNormalization-9`` and the schema version, from the model's opset for the domain."""
    from onnxgate.runners import schema_version

    domain = node.domain or "ai.onnx"
    opset = opset_map(model.opset_import).get(domain)
    version = schema_version(node.op_type, domain, opset) if opset is not None else None
    return (f"{node.op_type}-{version}" if version else node.op_type), version


def _deviation(node: NodeProto, version: int | None) -> KnownDeviation | None:
    """The deviation still in effect for this operator version (a corrected one otherwise)."""
    from onnxgate.runners import known_deviations

    if version is None:
        return None
    found = known_deviations(node.op_type, node.domain or "ai.onnx", version)
    if not found:
        return None
    chosen = next((d for d in found if not d.fixed), found[0])
    return KnownDeviation(
        wrong=chosen.wrong, summary=chosen.summary, spec=chosen.spec, fixed=chosen.fixed
    )


def deviations_in(model: onnx.ModelProto) -> list[str]:
    """Notes for the operator versions of a model's main graph with a deviation still in effect.

    ``compare`` adds them to a failing report: the cause may be a triaged deviation of one side.
    """
    notes = {}
    for node in model.graph.node:
        label, version = operator_label(node, model)
        deviation = _deviation(node, version)
        if deviation is None or deviation.fixed or label in notes:
            continue
        side = "ONNX Runtime" if deviation.wrong == "onnxruntime" else "the reference evaluator"
        notes[label] = (
            f"the model has {label} nodes, where {side} is known to deviate from the "
            f"specification: {deviation.summary} ({setting('localize')} replays the first "
            "diverging node)"
        )
    return list(notes.values())


def lone_node_model(
    model: LoadedModel, node: NodeProto, reads: list[str], values: Mapping[str, Any]
) -> LoadedModel:
    """A model holding ``node`` alone: what it reads becomes graph inputs, weights are embedded.

    A value computed from weights alone (a reshaped weight, say) is computed inside the lone
    model by the same constant nodes, so both sides start from the same weights.

    Raises:
        ValueError: a value the node reads is missing or is not a tensor.
    """
    graph = model.proto.graph
    weights = {t.name: t for t in graph.initializer}
    constant = constant_values(graph)
    producers = {o: n for n in graph.node for o in n.output if o}
    needed: list[NodeProto] = []
    wanted = [n for n in reads if n in constant and n not in weights]
    while wanted:
        name = wanted.pop()
        producer = producers[name]
        if producer not in needed:
            needed.append(producer)
            wanted.extend(i for i in producer.input if i and i not in weights)
    upstream = [n for n in graph.node if n in needed]  # the graph's own order
    embedded = {i for n in upstream for i in n.input if i in weights}
    embedded |= {n for n in reads if n in weights}
    inputs = []
    for name in reads:
        if name in constant:
            continue
        value = values.get(name)
        if not isinstance(value, np.ndarray) or value.dtype == object:
            raise ValueError(f"{name!r} is not a tensor on the reference side")
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        inputs.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    initializers = [
        numpy_helper.from_array(
            numpy_helper.to_array(weights[name], base_dir=str(model.path.parent)), name
        )
        for name in sorted(embedded)
    ]
    outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    lone = helper.make_graph(
        [*upstream, node], f"{node.name or node.op_type} alone", inputs, outputs, initializers
    )
    proto = helper.make_model(lone, opset_imports=list(model.proto.opset_import))
    proto.ir_version = model.proto.ir_version
    proto.functions.extend(model.proto.functions)
    label = (node.name or node.op_type).replace("/", "_")  # tf2onnx and torch names hold "/"
    return LoadedModel(
        path=model.path.with_name(f"{model.path.name}#{label}"),
        proto=proto,
        size_bytes=proto.ByteSize(),
    )


def _run(tap: TensorTap, lone: LoadedModel, feeds: Mapping[str, Any]) -> dict[str, Any]:
    with tap.sibling(lone) as runner:
        return runner.infer(feeds).outputs


def _reference_node(tap: TensorTap, node: NodeProto) -> NodeProto | None:
    """The reference side's node writing the same tensors, or None.

    Its own attributes and weights when two files are compared: localisation matched tensors by
    name, and node names may differ between the files.
    """
    written = {o for o in node.output if o}
    for other in tap.model.proto.graph.node:
        if written & {o for o in other.output if o} and other.op_type == node.op_type:
            return other
    return None


def _not_replayed(label: str, drift: float, deviation: KnownDeviation | None, why: str) -> Replay:
    return Replay(
        operator=label,
        verdict="not replayed",
        input_difference=drift,
        deviation=deviation,
        statement=f"{label} could not be replayed alone: {why}",
    )


def replay(
    candidate: TensorTap,
    reference: TensorTap,
    node: NodeProto,
    a_all: Mapping[str, Any],
    b_all: Mapping[str, Any],
    *,
    config: Tolerances,
    tensor_error: Any,
    used: set[str] | None = None,
) -> Replay:
    """Run ``node`` alone on both sides with the reference side's input tensors; judge the result.

    Args:
        candidate: the side under test; ``node`` is from its graph.
        reference: the other side; its node writing the same tensors is replayed.
        node: the first diverging node.
        a_all: every tensor of the candidate's full run.
        b_all: every tensor of the reference's full run.
        config: the tolerance tensors are judged at.
        tensor_error: ``tensor_error(name, a, b, config)`` judges two tensors by the element rule.
        used: outputs something reads (or graph outputs); others, such as BatchNormalization's
            training outputs, are not judged. All outputs when None.
    """
    label, version = operator_label(node, candidate.model.proto)
    deviation = _deviation(node, version)
    constant = constant_values(candidate.model.proto.graph)
    reads = node_reads(node)
    computed = [n for n in reads if n not in constant]
    feeds = {n: b_all[n] for n in computed if n in b_all}
    drift = max(
        (tensor_error(n, a_all[n], b_all[n], config).max_abs or 0.0 for n in computed),
        default=0.0,
    )
    counterpart = _reference_node(reference, node)
    if counterpart is None:
        why = f"the reference side has no {node.op_type} node writing {', '.join(node.output)}"
        return _not_replayed(label, drift, deviation, why)
    try:
        mine = lone_node_model(candidate.model, node, reads, b_all)
        theirs = lone_node_model(reference.model, counterpart, node_reads(counterpart), b_all)
        a_out = _run(candidate, mine, feeds)
        b_out = _run(reference, theirs, feeds)
    except (GateError, ValueError) as err:
        return _not_replayed(
            label, drift, deviation, err.message if isinstance(err, GateError) else first_line(err)
        )
    judged = [n for n in b_out if n in a_out and (used is None or n in used)]
    if not judged:
        why = "no output it writes could be compared on both sides"
        return _not_replayed(label, drift, deviation, why)
    outputs = [tensor_error(n, a_out[n], b_out[n], config) for n in judged]
    worst = max((t.max_abs or 0.0 for t in outputs), default=0.0)
    if not all(t.agrees for t in outputs):
        return Replay(
            operator=label,
            verdict="differs on identical inputs",
            outputs=outputs,
            input_difference=drift,
            output_difference=worst,
            deviation=deviation,
            statement=_difference(
                label, node, counterpart, mine, theirs, outputs, worst, deviation
            ),
        )
    agree = f"on identical inputs both implementations of {label} agree (max_abs {worst:.3g})"
    if drift == 0:
        return Replay(
            operator=label,
            verdict="not reproduced alone",
            outputs=outputs,
            input_difference=0.0,
            deviation=deviation,
            statement=(
                f"{agree}, and its inputs were identical in the full run too: the difference "
                "comes from around the node (a rewrite of the full graph), not from the node"
            ),
        )
    # identical inputs agree: what does the reference implementation make of the input drift?
    try:
        moved = _run(reference, theirs, {n: a_all[n] for n in computed if n in a_all})
    except GateError as err:
        return _not_replayed(
            label, drift, deviation, f"{agree}, but not on the candidate's inputs: {err.message}"
        )
    carried = [tensor_error(n, moved[n], b_out[n], config) for n in judged if n in moved]
    grown = max((t.max_abs or 0.0 for t in carried), default=0.0)
    ratio = grown / drift
    verdict, words = _drift_verdict(carried, drift, grown, ratio)
    return Replay(
        operator=label,
        verdict=verdict,
        outputs=outputs,
        input_difference=drift,
        output_difference=grown,
        ratio=ratio,
        deviation=deviation,
        statement=f"{agree}; {words}",
    )


def _difference(
    label: str,
    node: NodeProto,
    counterpart: NodeProto,
    mine: LoadedModel,
    theirs: LoadedModel,
    outputs: Sequence[Any],
    worst: float,
    deviation: KnownDeviation | None,
) -> str:
    """Why the node differs on identical inputs (by ``worst``): attributes, weights or kernels."""
    failing = [t for t in outputs if not t.agrees]
    counts = ", ".join(f"{t.name}: {t.mismatches} of {t.elements}" for t in failing)
    measured = f"max_abs {worst:.3g} ({counts} element(s) outside the tolerance)"
    attributes = _differing_attributes(node, counterpart)
    changed = _differing_weights(mine, theirs)
    if attributes:
        return (
            f"{label} differs between the two files (attribute(s) {', '.join(attributes)}); "
            f"replayed alone on identical inputs its outputs differ by {measured}"
        )
    if changed:
        return (
            f"{label} reads different weights in the two files ({', '.join(changed)}); "
            f"replayed alone on identical inputs its outputs differ by {measured}"
        )
    return (
        f"the two implementations of {label} disagree on identical inputs: {measured}"
        + _deviation_words(deviation)
    )


def _drift_verdict(
    carried: Sequence[Any], drift: float, grown: float, ratio: float
) -> tuple[str, str]:
    """What the node made of its inputs' drift (``drift``, grown to ``grown``): verdict, words."""
    if all(t.agrees for t in carried):
        return (
            "not reproduced alone",
            f"on the candidate's inputs (which differed by {drift:.3g}) its outputs stay within "
            f"the tolerance (max_abs {grown:.3g}): the difference is not this node's doing",
        )
    if ratio > 1:
        return (
            "amplified",
            f"its inputs differed by {drift:.3g} and the node amplified that to {grown:.3g} "
            f"(x{ratio:.3g})",
        )
    return (
        "carried through",
        f"its inputs differed by {drift:.3g} and the node carried that through ({grown:.3g}, "
        f"x{ratio:.3g}) past the tolerance of its outputs",
    )


def _differing_attributes(mine: NodeProto, theirs: NodeProto) -> list[str]:
    """Names of attributes set differently on the two sides' node."""
    a = {x.name: x.SerializeToString() for x in mine.attribute}
    b = {x.name: x.SerializeToString() for x in theirs.attribute}
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def _differing_weights(mine: LoadedModel, theirs: LoadedModel) -> list[str]:
    """Names of the lone node's embedded weights whose bytes differ between the two sides."""
    a = {t.name: t.SerializeToString() for t in mine.proto.graph.initializer}
    b = {t.name: t.SerializeToString() for t in theirs.proto.graph.initializer}
    return sorted(name for name in a.keys() & b.keys() if a[name] != b[name])


def _deviation_words(deviation: KnownDeviation | None) -> str:
    if deviation is None:
        return ""
    side = "the reference evaluator" if deviation.wrong == "reference" else "ONNX Runtime"
    right = "ONNX Runtime" if deviation.wrong == "reference" else "the reference evaluator"
    fixed = " (onnxgate's reference runner corrects it)" if deviation.fixed else ""
    return (
        f". A known deviation: {deviation.summary} The specification supports {right}, not "
        f"{side}{fixed}: {deviation.spec}"
    )
