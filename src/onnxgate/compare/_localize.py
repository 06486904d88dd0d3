"""Find the first node whose outputs disagree while the values it computed from agree.

Both executions are asked for every intermediate tensor, by a method that does not change what
is measured for the candidate's graph as written: the reference evaluator returns its
``intermediate=True`` tensors, and ONNX Runtime runs a copy of the model in which every node output
is also a graph output, with the same providers and options. The report states both methods.

Tensors are matched by name and judged with the element rule at the comparison's tolerance
(per-dtype defaults unless ``--atol``/``--rtol`` are given). Walking the candidate's main graph in
topological order, the first node with a disagreeing output whose computed inputs all agree is
the one that introduced the difference; a weight that differs between two model files is shown
among its inputs (``initializer: true``), since weights are not computed values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import ModelProto, NodeProto, numpy_helper

from onnxgate.compare._metrics import as_array, figures, kind
from onnxgate.compare._report import Divergence, TensorError
from onnxgate.data import Sample
from onnxgate.model import dependency_order, graph_sources

if TYPE_CHECKING:
    from onnxgate.compare._compare import CompareConfig
    from onnxgate.runners import TensorTap

MAX_CHAIN = 50


def _tensor_error(name: str, a: Any, b: Any, config: CompareConfig) -> TensorError:
    try:
        x, _ = as_array(a)
        y, _ = as_array(b)
    except ValueError as err:
        return TensorError(name=name, agrees=False, note=str(err))
    if kind(x.dtype) != kind(y.dtype) or x.shape != y.shape:
        return TensorError(
            name=name,
            agrees=False,
            note=f"{x.dtype} {list(x.shape)} vs reference {y.dtype} {list(y.shape)}",
        )
    found = figures(x, y, config.tolerance(name, x.dtype, y.dtype))
    return TensorError(
        name=name,
        agrees=found.mismatches == 0,
        max_abs=found.max_abs,
        max_rel=found.max_rel,
        mismatches=found.mismatches,
        elements=found.elements,
    )


def _initializers(model: ModelProto) -> dict[str, np.ndarray]:
    """Embedded weights of the main graph (external ones are not read)."""
    found = {}
    for tensor in model.graph.initializer:
        if tensor.data_location != tensor.EXTERNAL:
            found[tensor.name] = numpy_helper.to_array(tensor)
    return found


def _reference_model(runner: TensorTap) -> ModelProto | None:
    model = getattr(runner, "model", None)
    return getattr(model, "proto", None)


def localize(
    candidate: TensorTap,
    reference: TensorTap,
    model: ModelProto,
    sample: Sample,
    *,
    config: CompareConfig,
) -> Divergence:
    """The first diverging node of ``model`` (the candidate's graph) on one sample."""
    method = (
        f"both: {candidate.method}"
        if candidate.method == reference.method
        else f"candidate: {candidate.method}; reference: {reference.method}"
    )
    a_all = candidate.infer_all(sample.feeds)
    b_all = reference.infer_all(sample.feeds)
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    ordered, stuck = dependency_order(list(graph.node), graph_sources(graph))
    nodes: list[NodeProto] = [*ordered, *stuck]

    weight_errors: dict[str, TensorError] = {}
    other = _reference_model(reference)
    if other is not None and other is not model:
        mine, theirs = _initializers(model), _initializers(other)
        for name in sorted(set(mine) & set(theirs)):
            error = _tensor_error(name, mine[name], theirs[name], config)
            weight_errors[name] = error.model_copy(update={"initializer": True})

    errors: dict[str, TensorError] = {}
    for name in a_all.keys() & b_all.keys():
        if name not in weights:
            errors[name] = _tensor_error(name, a_all[name], b_all[name], config)

    # An output nothing reads (Dropout's mask, say) cannot make a difference downstream.
    used = {name for node in nodes for name in node.input} | {o.name for o in graph.output}

    def disagrees(node: NodeProto) -> bool:
        return any(not errors[o].agrees for o in node.output if o in errors and o in used)

    def input_errors(node: NodeProto) -> list[TensorError]:
        found = []
        for name in node.input:
            if name in errors:
                found.append(errors[name])
            elif name in weight_errors:
                found.append(weight_errors[name])
        return found

    base = Divergence(found=False, method=method, sample=sample.label, compared=len(errors))
    for position, node in enumerate(nodes):
        if not disagrees(node):
            continue
        computed = [errors[n] for n in node.input if n in errors]
        if not all(e.agrees for e in computed):
            continue
        chain = _downstream(nodes[position + 1 :], set(node.output), disagrees)
        changed_weights = [w for w in input_errors(node) if w.initializer and not w.agrees]
        note = None
        if changed_weights:
            note = "its weight(s) " + ", ".join(w.name for w in changed_weights) + " differ"
        return base.model_copy(
            update={
                "found": True,
                "node": node.name or f"#{position} {node.op_type}",
                "op_type": node.op_type,
                "domain": node.domain or "ai.onnx",
                "position": position,
                "inputs": input_errors(node),
                "outputs": [errors[o] for o in node.output if o in errors],
                "chain": chain,
                "note": note,
            }
        )
    outputs_differ = any(not errors[o.name].agrees for o in graph.output if o.name in errors)
    note = (
        "the graph outputs differ, but no node's output differs while its inputs agree: the "
        "tensors that would tell are missing on one side (renamed or fused)"
        if outputs_differ
        else "with every tensor exposed, all compared tensors agree: the difference comes from a "
        "transformation of the graph that exposing tensors prevents (such as a fusion); compare "
        "at optimisation levels disable, basic and extended to find which one"
    )
    return base.model_copy(update={"note": note})


def _downstream(nodes: list[NodeProto], tainted: set[str], disagrees: Any) -> list[str]:
    """Names of later nodes that consume a tainted value and disagree themselves."""
    chain = []
    tainted = set(tainted)
    for offset, node in enumerate(nodes):
        if any(name in tainted for name in node.input) and disagrees(node):
            tainted.update(node.output)
            chain.append(node.name or f"{node.op_type} (unnamed #{offset})")
            if len(chain) >= MAX_CHAIN:
                break
    return chain
