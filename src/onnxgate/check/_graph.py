"""Structure rules: what makes a graph ill-formed whatever runtime reads it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import onnx
from onnx import GraphProto, ModelProto, NodeProto

from onnxgate._native import native_step
from onnxgate.check._report import Finding, finding
from onnxgate.errors import first_line
from onnxgate.model import (
    LoadedModel,
    dependency_order,
    graph_sources,
    iter_model_graphs,
    subgraphs_of,
)


def node_label(node: NodeProto, index: int) -> str:
    """A name for a node in messages: its own name, else what it computes, else its position."""
    if node.name:
        return node.name
    first = next((out for out in node.output if out), None)
    return f"{node.op_type}->{first}" if first else f"{node.op_type}#{index}"


def checker_findings(loaded: LoadedModel) -> list[Finding]:
    """STR001: what ``onnx.checker`` says, given the path when weights live in side files."""
    target: ModelProto | str = str(loaded.path) if loaded.external_data else loaded.proto
    try:
        with native_step("onnx checker", loaded.path):
            onnx.checker.check_model(target)
    except Exception as err:  # the checker raises ValidationError and bare C++ errors alike
        return [finding("STR001", f"onnx.checker: {first_line(err)}")]
    return []


def _graph_findings(graph: GraphProto, outer: set[str], ir_version: int) -> Iterator[Finding]:
    initializers = {t.name for t in graph.initializer} | {
        s.values.name for s in graph.sparse_initializer
    }
    inputs = [v.name for v in graph.input]
    produced_by: dict[str, str] = {}
    for name in [*inputs, *initializers]:
        produced_by.setdefault(name, "graph input" if name in inputs else "initializer")
    producers: Counter[str] = Counter()
    for index, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producers[out] += 1
                if out in produced_by and producers[out] == 1:
                    yield finding(
                        "STR005",
                        f"'{out}' is produced by node {node_label(node, index)} and is also a "
                        f"{produced_by[out]}",
                        node=node_label(node, index),
                        tensor=out,
                    )
    for name, count in producers.items():
        if count > 1:
            yield finding("STR005", f"'{name}' is produced by {count} nodes", tensor=name)
    all_produced = set(produced_by) | set(producers)
    available = set(outer) | set(produced_by)
    unsorted_at: tuple[str, str] | None = None
    for index, node in enumerate(graph.node):
        label = node_label(node, index)
        for name in node.input:
            if not name or name in available:
                continue
            if name in all_produced:
                unsorted_at = unsorted_at or (
                    label,
                    f"node {label} reads '{name}' before it is computed",
                )
            else:
                yield finding(
                    "STR006",
                    f"node {label} ({node.op_type}) reads '{name}', which no node, input or "
                    "initializer provides",
                    node=label,
                    tensor=name,
                )
        available.update(out for out in node.output if out)
        for sub in subgraphs_of(node):
            yield from _graph_findings(sub, available | all_produced | set(outer), ir_version)
    if unsorted_at:
        _, stuck = dependency_order(list(graph.node), set(outer) | graph_sources(graph))
        cyclic = [
            n for n in stuck if all(not i or i in all_produced or i in outer for i in n.input)
        ]
        if cyclic:
            names = ", ".join(node_label(n, list(graph.node).index(n)) for n in cyclic[:4])
            yield finding(
                "STR009",
                f"graph '{graph.name}' has a cycle through {len(cyclic)} node(s): {names}",
                node=node_label(cyclic[0], list(graph.node).index(cyclic[0])),
            )
        node, what = unsorted_at
        yield finding(
            "STR003", f"graph '{graph.name}' is not topologically sorted: {what}", node=node
        )
    for out in graph.output:
        if out.name not in all_produced and out.name not in outer:
            yield finding("STR007", f"graph output '{out.name}' is never computed", tensor=out.name)
    overrides = [name for name in inputs if name in initializers]
    if overrides and ir_version >= 4:
        shown = ", ".join(overrides[:3]) + (
            f" and {len(overrides) - 3} more" if len(overrides) > 3 else ""
        )
        yield finding(
            "STR008",
            f"{len(overrides)} initializer(s) of graph '{graph.name}' are also graph inputs ({shown})",
            tensor=overrides[0],
        )


def structure_findings(model: ModelProto) -> list[Finding]:
    """STR003 to STR010 over the main graph and every subgraph."""
    findings = list(_graph_findings(model.graph, set(), model.ir_version))
    if not model.graph.output:
        findings.append(finding("STR010", f"graph '{model.graph.name}' declares no outputs"))
    for graph in iter_model_graphs(model):
        names: Counter[str] = Counter(node.name for node in graph.node if node.name)
        duplicated = [name for name, count in names.items() if count > 1]
        if duplicated:
            shown = ", ".join(repr(n) for n in duplicated[:3])
            more = f" and {len(duplicated) - 3} more" if len(duplicated) > 3 else ""
            findings.append(
                finding(
                    "STR004",
                    f"graph '{graph.name}': {len(duplicated)} node name(s) are used twice: {shown}{more}",
                    node=duplicated[0],
                )
            )
    return findings


def topologically_sorted(model: ModelProto) -> ModelProto:
    """A copy of the model whose main graph lists nodes in dependency order.

    ONNX Runtime sorts a graph before it infers shapes, so inference here must see the same order
    to judge what the runtime will see. Nodes that are never ready keep their place at the end.
    """
    ordered, pending = dependency_order(list(model.graph.node), graph_sources(model.graph))
    copy = ModelProto()
    copy.CopyFrom(model)
    del copy.graph.node[:]
    copy.graph.node.extend([*ordered, *pending])
    return copy
