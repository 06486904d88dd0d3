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

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

from onnxgate.compare._report import KnownDeviation, Replay
from onnxgate.compat.versions import opset_map
from onnxgate.errors import GateError, first_line
from onnxgate.model import LoadedModel, constant_values

if TYPE_CHECKING:
    from onnxgate.compare._compare import CompareConfig
    from onnxgate.runners import TensorTap


def operator_label(node: NodeProto, model: onnx.ModelProto) -> tuple[str, int | None]:
    """``BatchNormalization-9`` and the schema version, from the model's opset for the domain."""
    from onnxgate.runners._reference_fixes import schema_version

    domain = node.domain or "ai.onnx"
    opset = opset_map(model.opset_import).get(domain)
    version = schema_version(node.op_type, domain, opset) if opset is not None else None
    return (f"{node.op_type}-{version}" if version else node.op_type), version


def _deviation(node: NodeProto, version: int | None) -> KnownDeviation | None:
    from onnxgate.runners._reference_fixes import known_deviation

    if version is None:
        return None
    found = known_deviation(node.op_type, node.domain or "ai.onnx", version)
    if found is None:
        return None
    return KnownDeviation(
        wrong=found.wrong, summary=found.summary, spec=found.spec, fixed=found.fixed
    )


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
    return LoadedModel(
        path=model.path.with_name(f"{model.path.name}#{node.name or node.op_type}"),
        proto=proto,
        size_bytes=proto.ByteSize(),
    )


def _run(tap: TensorTap, lone: LoadedModel, feeds: Mapping[str, Any]) -> dict[str, Any]:
    with tap.sibling(lone) as runner:
        return runner.infer(feeds).outputs


def _reference_node(tap: TensorTap, node: NodeProto) -> NodeProto:
    """The reference side's node of the same name (its own weights when two files are compared)."""
    for other in tap.model.proto.graph.node:
        if node.name and other.name == node.name and other.op_type == node.op_type:
            return other
    return node


def replay(
    candidate: TensorTap,
    reference: TensorTap,
    node: NodeProto,
    reads: list[str],
    a_all: Mapping[str, Any],
    b_all: Mapping[str, Any],
    *,
    config: CompareConfig,
    tensor_error: Any,
) -> Replay:
    """Run ``node`` alone on both sides with the reference side's input tensors; judge the result.

    ``tensor_error(name, a, b, config)`` judges two tensors by the element rule.
    """
    label, version = operator_label(node, candidate.model.proto)
    deviation = _deviation(node, version)
    constant = constant_values(candidate.model.proto.graph)
    computed = [n for n in reads if n not in constant]
    feeds = {n: b_all[n] for n in computed if n in b_all}
    drift = max(
        (tensor_error(n, a_all[n], b_all[n], config).max_abs or 0.0 for n in computed),
        default=0.0,
    )
    try:
        mine = lone_node_model(candidate.model, node, reads, b_all)
        theirs = lone_node_model(reference.model, _reference_node(reference, node), reads, b_all)
        a_out = _run(candidate, mine, feeds)
        b_out = _run(reference, theirs, feeds)
    except (GateError, ValueError) as err:
        why = err.message if isinstance(err, GateError) else first_line(err)
        return Replay(
            operator=label,
            verdict="not replayed",
            input_difference=drift,
            deviation=deviation,
            statement=f"{label} could not be replayed alone: {why}",
        )
    outputs = [tensor_error(n, a_out[n], b_out[n], config) for n in b_out if n in a_out]
    worst = max((t.max_abs or 0.0 for t in outputs), default=0.0)
    if not all(t.agrees for t in outputs):
        failing = [t for t in outputs if not t.agrees]
        counts = ", ".join(f"{t.name}: {t.mismatches} of {t.elements}" for t in failing)
        measured = f"max_abs {worst:.3g} ({counts} element(s) outside the tolerance)"
        attributes = _differing_attributes(node, _reference_node(reference, node))
        changed = _differing_weights(mine, theirs)
        if attributes:
            statement = (
                f"{label} differs between the two files (attribute(s) {', '.join(attributes)}); "
                f"replayed alone on identical inputs its outputs differ by {measured}"
            )
        elif changed:
            statement = (
                f"{label} reads different weights in the two files ({', '.join(changed)}); "
                f"replayed alone on identical inputs its outputs differ by {measured}"
            )
        else:
            statement = (
                f"the two implementations of {label} disagree on identical inputs: {measured}"
                + _deviation_words(deviation)
            )
        return Replay(
            operator=label,
            verdict="differs on identical inputs",
            outputs=outputs,
            input_difference=drift,
            output_difference=worst,
            deviation=deviation,
            statement=statement,
        )
    # identical inputs agree: measure what the reference implementation does to the input drift
    try:
        moved = _run(reference, theirs, {n: a_all[n] for n in computed if n in a_all})
    except GateError as err:
        moved, why = None, err.message
    if moved is None:
        return Replay(
            operator=label,
            verdict="amplified",
            outputs=outputs,
            input_difference=drift,
            deviation=deviation,
            statement=(
                f"on identical inputs both implementations of {label} agree (max_abs "
                f"{worst:.3g}); the amplification was not measured: {why}"
            ),
        )
    grown = max(
        (tensor_error(n, moved[n], b_out[n], config).max_abs or 0.0 for n in b_out if n in moved),
        default=0.0,
    )
    ratio = grown / drift if drift > 0 else math.inf if grown > 0 else None
    shown = "" if ratio is None else f" (x{ratio:.3g})"
    return Replay(
        operator=label,
        verdict="amplified",
        outputs=outputs,
        input_difference=drift,
        output_difference=grown,
        ratio=ratio if ratio is None or math.isfinite(ratio) else None,
        deviation=deviation,
        statement=(
            f"on identical inputs both implementations of {label} agree (max_abs {worst:.3g}); "
            f"its inputs differed by {drift:.3g} and the node amplified that to {grown:.3g}"
            f"{shown}"
        ),
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
