"""Walking every graph, node and tensor of a model: subgraphs, training info and functions included.

Every other module walks models through these functions, so a graph nested where nobody looked
(an If branch inside a model-local function, say) cannot hide a node or an external tensor from
one rule while another sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto


def subgraphs_of(node: NodeProto) -> Iterator[GraphProto]:
    """The graphs held by a node's attributes (If branches, Loop and Scan bodies)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def iter_graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """The graph itself, then every subgraph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs_of(node):
            yield from iter_graphs(sub)


def _function_subgraphs(function: FunctionProto) -> Iterator[GraphProto]:
    for node in function.node:
        for sub in subgraphs_of(node):
            yield from iter_graphs(sub)


def iter_model_graphs(model: ModelProto) -> Iterator[GraphProto]:
    """Every graph: the main graph and its subgraphs, training info, and subgraphs in functions."""
    yield from iter_graphs(model.graph)
    for info in model.training_info:
        yield from iter_graphs(info.initialization)
        yield from iter_graphs(info.algorithm)
    for function in model.functions:
        yield from _function_subgraphs(function)


def iter_scoped_nodes(model: ModelProto) -> Iterator[tuple[NodeProto, FunctionProto | None]]:
    """Every node with the model-local function it belongs to (None for the model's graphs)."""
    yield from ((node, None) for graph in iter_graphs(model.graph) for node in graph.node)
    for info in model.training_info:
        for graph in (*iter_graphs(info.initialization), *iter_graphs(info.algorithm)):
            yield from ((node, None) for node in graph.node)
    for function in model.functions:
        yield from ((node, function) for node in function.node)
        for graph in _function_subgraphs(function):
            yield from ((node, function) for node in graph.node)


def iter_model_nodes(model: ModelProto) -> Iterator[NodeProto]:
    """Every node of every graph and every model-local function."""
    return (node for node, _ in iter_scoped_nodes(model))


def _node_tensors(node: NodeProto) -> Iterator[TensorProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR:
            yield attr.t
        elif attr.type == AttributeProto.TENSORS:
            yield from attr.tensors
        elif attr.type == AttributeProto.SPARSE_TENSOR:
            yield attr.sparse_tensor.values
            yield attr.sparse_tensor.indices
        elif attr.type == AttributeProto.SPARSE_TENSORS:
            for sparse in attr.sparse_tensors:
                yield sparse.values
                yield sparse.indices


def iter_model_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """Every stored tensor: initializers, sparse initializers and tensor-valued attributes."""
    for graph in iter_model_graphs(model):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
    for node in iter_model_nodes(model):
        yield from _node_tensors(node)


def dependency_order(
    nodes: list[NodeProto],
    available: set[str],
    reads: Callable[[NodeProto], Iterable[str]] = lambda node: node.input,
) -> tuple[list[NodeProto], list[NodeProto]]:
    """Nodes in an order where each comes after its inputs' producers, and those never ready.

    A node is never ready when an input has no producer at all (STR006) or when it sits on a
    cycle (STR009). ``reads`` says what a node waits for: its inputs, or ``node_reads`` to wait
    for what its subgraphs read from outside too.
    """
    known = set(available)
    pending = list(nodes)
    ordered: list[NodeProto] = []
    progressed = True
    while pending and progressed:
        progressed = False
        waiting = []
        for node in pending:
            if all(not name or name in known for name in reads(node)):
                ordered.append(node)
                known.update(node.output)
                progressed = True
            else:
                waiting.append(node)
        pending = waiting
    return ordered, pending


def graph_sources(graph: GraphProto) -> set[str]:
    """Names a graph defines before any node runs: inputs and initializers."""
    return (
        {v.name for v in graph.input}
        | {t.name for t in graph.initializer}
        | {s.values.name for s in graph.sparse_initializer}
    )


def node_reads(node: NodeProto) -> list[str]:
    """Values a node reads: its inputs and what its subgraphs read from outside themselves."""
    names = [n for n in node.input if n]
    for graph in subgraphs_of(node):
        inner = {o for sub in graph.node for o in sub.output} | {i.name for i in graph.input}
        inner |= {t.name for t in graph.initializer}
        for sub in graph.node:
            names.extend(n for n in node_reads(sub) if n not in inner)
    return list(dict.fromkeys(names))


def constant_values(graph: GraphProto) -> set[str]:
    """Values of the main graph computed from weights alone: initializers and what follows.

    A node is constant when it has no subgraph, is not random, and reads only initializers,
    ``Constant`` outputs or other constant values (``Reshape`` of a weight, say). Such values are
    the same on every run; localisation treats them as weights, and they are not exposed as
    outputs (the OpenVINO provider rejects a model whose constant-folded value is an output).
    """
    constant = {t.name for t in graph.initializer} | {
        s.values.name for s in graph.sparse_initializer
    }
    ordered, _ = dependency_order(list(graph.node), graph_sources(graph))
    for node in ordered:
        if node.domain not in ("", "ai.onnx") or "Random" in node.op_type:
            continue
        if node.op_type in ("Bernoulli", "Multinomial") or any(True for _ in subgraphs_of(node)):
            continue
        reads = [name for name in node.input if name]
        if (reads or node.op_type == "Constant") and all(name in constant for name in reads):
            constant.update(o for o in node.output if o)
    return constant
