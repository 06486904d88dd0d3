"""Walking every graph and tensor of a model, subgraphs and functions included."""

from __future__ import annotations

from collections.abc import Iterator

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto


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


def iter_model_graphs(model: ModelProto) -> Iterator[GraphProto]:
    """Every graph of the model: the main graph, its subgraphs and those of training info."""
    yield from iter_graphs(model.graph)
    for info in model.training_info:
        yield from iter_graphs(info.initialization)
        yield from iter_graphs(info.algorithm)


def iter_model_nodes(model: ModelProto) -> Iterator[NodeProto]:
    """Every node of every graph and every model-local function."""
    for graph in iter_model_graphs(model):
        yield from graph.node
    for function in model.functions:
        yield from function.node


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
        for node in graph.node:
            yield from _node_tensors(node)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)
