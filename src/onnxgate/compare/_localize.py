"""Find the first node whose outputs disagree while the values it reads agree.

Both executions are asked for every intermediate tensor: the reference evaluator returns its
``intermediate=True`` tensors, and ONNX Runtime runs a copy of the model in which every node output
of the main graph is also a graph output, with the same providers and options. ONNX Runtime does
not fuse away a node whose output is a graph output, so fusions are undone in that run; other
rewrites of the level (layout changes, constant folding) still apply. The report states the method.

Tensors are matched by name and judged with the element rule at the global tolerance (per-dtype
defaults unless ``--atol``/``--rtol`` are given), whatever rule the failing output had. Walking the
candidate's main graph in topological order, the first node with a disagreeing output (one that
something reads) whose read values were all compared and all agree is reported. That is where the
difference first exceeds the tolerance: where it is introduced, or where a difference within
tolerance was amplified. Which of the two is measured, not guessed: the node is replayed alone on
both sides with the same input tensors (``_replay.py``). Weights that differ between two model
files are shown among the node's inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import NodeProto, numpy_helper

from onnxgate._words import setting
from onnxgate.compare._metrics import as_array, figures
from onnxgate.compare._replay import Replay, replay
from onnxgate.compare._report import Divergence, TensorError
from onnxgate.data import Sample
from onnxgate.model import (
    LoadedModel,
    constant_values,
    dependency_order,
    graph_sources,
    node_reads,
)
from onnxgate.settings import kind

if TYPE_CHECKING:
    from onnxgate.runners import TensorTap
    from onnxgate.settings import Tolerances

MAX_CHAIN = 50


def _tensor_error(name: str, a: Any, b: Any, config: Tolerances) -> TensorError:
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
    found = figures(x, y, config.tolerance(name, x.dtype, y.dtype), errors_only=True)
    return TensorError(
        name=name,
        agrees=found.mismatches == 0,
        max_abs=found.max_abs,
        max_rel=found.max_rel,
        mismatches=found.mismatches,
        elements=found.elements,
    )


def _weight(model: LoadedModel, name: str) -> np.ndarray | None:
    """An initializer of the main graph as an array, external data included (None if absent)."""
    for tensor in model.proto.graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor, base_dir=str(model.path.parent))
    return None


def localize(
    candidate: TensorTap,
    reference: TensorTap,
    sample: Sample,
    *,
    config: Tolerances,
    failing_output: str | None = None,
) -> Divergence:
    """The first diverging node of the candidate's main graph on one sample.

    ``failing_output`` names the output that failed its own rule, for the note when every tensor
    agrees at the global tolerance.
    """
    method = (
        f"both: {candidate.method}"
        if candidate.method == reference.method
        else f"candidate: {candidate.method}; reference: {reference.method}"
    )
    a_all = candidate.infer_all(sample.feeds)
    b_all = reference.infer_all(sample.feeds)
    graph = candidate.model.proto.graph
    # values computed from weights alone are weights too: not exposed, the same on every run
    weights = constant_values(graph)
    ordered, stuck = dependency_order(list(graph.node), graph_sources(graph))
    nodes: list[NodeProto] = [*ordered, *stuck]
    reads = {id(node): node_reads(node) for node in nodes}

    errors: dict[str, TensorError] = {}
    for name in a_all.keys() & b_all.keys():
        if name not in weights:
            errors[name] = _tensor_error(name, a_all[name], b_all[name], config)

    # An output nothing reads (Dropout's mask, say) cannot make a difference downstream.
    used = {name for node in nodes for name in reads[id(node)]} | {o.name for o in graph.output}

    def disagrees(node: NodeProto) -> bool:
        return any(not errors[o].agrees for o in node.output if o in errors and o in used)

    base = Divergence(found=False, method=method, sample=sample.label, compared=len(errors))
    uncompared = 0
    for position, node in enumerate(nodes):
        if not disagrees(node):
            continue
        computed = [n for n in reads[id(node)] if n not in weights]
        if any(n not in errors for n in computed):
            uncompared += 1  # an input missing on one side: cannot tell whether it agreed
            continue
        if not all(errors[n].agrees for n in computed):
            continue
        inputs = [errors[n] for n in computed]
        inputs += _weight_errors(candidate, reference, node, b_all, config)
        outputs = [errors[o] for o in node.output if o in errors]
        replayed = replay(
            candidate,
            reference,
            node,
            a_all,
            b_all,
            config=config,
            tensor_error=_tensor_error,
            used=used,
        )
        return base.model_copy(
            update={
                "found": True,
                "node": node.name or f"#{position} {node.op_type}",
                "op_type": node.op_type,
                "domain": node.domain or "ai.onnx",
                "position": position,
                "inputs": inputs,
                "outputs": outputs,
                "chain": _downstream(nodes[position + 1 :], set(node.output), disagrees, reads),
                "replay": replayed,
                "note": _explain(inputs, replayed),
            }
        )
    outputs_differ = any(not errors[o.name].agrees for o in graph.output if o.name in errors)
    strict = failing_output in errors and errors[failing_output].agrees
    if strict and not outputs_differ:
        note = (
            f"every tensor agrees at the global tolerance, {failing_output!r} included: it failed "
            f"only under its own, stricter rule ({setting('tolerances.per_output')} or "
            f"{setting('tolerances.metrics')}), so no node stands out"
        )
    elif uncompared or outputs_differ:
        note = (
            "the graph outputs differ, but no node was found whose outputs differ while all its "
            f"inputs were compared and agree ({uncompared} diverging node(s) read tensors missing "
            "on one side: renamed, or computed inside a fused node)"
        )
    else:
        note = (
            "with every tensor exposed, all compared tensors agree: the difference comes from a "
            "rewrite of the graph that exposing tensors prevents (such as a fusion); compare at "
            "optimisation levels disable, basic and extended to find which one"
        )
    return base.model_copy(update={"note": note})


def _weight_errors(
    candidate: TensorTap,
    reference: TensorTap,
    node: NodeProto,
    b_all: dict[str, Any],
    config: Tolerances,
) -> list[TensorError]:
    """The node's weights, compared with the reference side's.

    Between the two model files when they are two files; otherwise with the tensors of the same
    names the reference side returned (a TensorFlow graph whose constants tf2onnx named the
    initializers after), when their shapes match (a converter may store a weight transposed).
    """
    mine, theirs = candidate.model, reference.model
    two_files = not (mine is theirs or mine.path == theirs.path)
    found = []
    for name in node.input:
        a = _weight(mine, name)
        b = _weight(theirs, name) if two_files else b_all.get(name)
        if not two_files and (a is None or getattr(b, "shape", None) != a.shape):
            continue
        if a is not None and b is not None:
            error = _tensor_error(name, a, b, config)
            found.append(error.model_copy(update={"initializer": True}))
    return found


def _explain(inputs: list[TensorError], replayed: Replay) -> str:
    """The finding in words: what replaying the node measured (changed weights if it could not)."""
    changed = [t.name for t in inputs if t.initializer and not t.agrees]
    if changed and replayed.verdict == "not replayed":
        return (
            "its weight(s) "
            + ", ".join(changed)
            + " differ between the two files; "
            + replayed.statement
        )
    if changed and not any(name in replayed.statement for name in changed):
        # one model file: the replay ran each side on its own weights, which it cannot name
        ran = (
            f"; replayed alone on identical inputs, each side with its own weights, its outputs "
            f"differ by max_abs {replayed.output_difference or 0:.3g}"
            if replayed.verdict == "differs on identical inputs"
            else f"; {replayed.statement}"
        )
        return (
            f"its weight(s) {', '.join(changed)} differ from the reference side's tensor(s) of "
            f"the same name{ran}"
        )
    return replayed.statement


def _downstream(
    nodes: list[NodeProto],
    tainted: set[str],
    disagrees: Callable[[NodeProto], bool],
    reads: dict[int, list[str]],
) -> list[str]:
    """Names of later nodes that read a tainted value and disagree themselves."""
    chain = []
    tainted = set(tainted)
    for node in nodes:
        if any(name in tainted for name in reads[id(node)]) and disagrees(node):
            tainted.update(node.output)
            chain.append(node.name or f"(unnamed {node.op_type})")
            if len(chain) >= MAX_CHAIN:
                break
    return chain
