"""Expanding an operator into its function body, as ONNX Runtime does when it has no kernel.

An operator such as GreaterOrEqual-16 is defined as a function of others (Greater, Equal, Or).
When the runtime has no kernel for it, it inlines that body; the model then loads only if every
operator of the body has a kernel for the types it sees. To predict that, the body is built here
for the node's actual attributes and input types, its types are inferred, and each of its nodes
is judged like any other.

Why the outcome is three-way (``Body``, ``NoBody(refused=True)``, ``NoBody(refused=False)``):
ONNX Runtime builds a context-dependent body with the onnx package's own builder, linked into it,
from the node's attributes and full input types (element type *and* shape: RotaryEmbedding-23 and
CausalConvWithState-27 build nothing without the input's rank). When that builder throws or
builds nothing, the runtime cannot inline the node either, so that is a finding about the model,
reported with the builder's words. When the body is not built for a reason of ours (an input type
this check does not know), the verdict says so. Any other exception is a bug in onnxgate and is
raised as ``InternalError``, never turned into a different finding.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TypeProto,
    defs,
    helper,
)

from onnxgate._native import native_step
from onnxgate.check._graph import node_label
from onnxgate.compat.kernels import NodeSchema
from onnxgate.compat.versions import opset_map, proto_domain
from onnxgate.errors import GateError, InternalError, first_line
from onnxgate.model import elem_type_name, iter_model_graphs, value_types

_PACKAGE = str(Path(__file__).resolve().parents[1])
MAX_DEPTH = 3
"""Function bodies inside function bodies are expanded this deep, no deeper."""


@dataclass(frozen=True)
class Body:
    """An operator's function body built for one node: its nodes, opsets and inferred types."""

    nodes: list[NodeProto]
    opsets: dict[str, int]
    types: dict[str, str | None]
    """Type string of every value of the body (None where inference did not find one)."""
    protos: dict[str, TypeProto] = field(default_factory=dict)
    """Full types (with shapes) of the body's values, for bodies nested inside it."""
    inference_failure: str | None = None
    """Why onnx's type inference over the body failed, when it did (its nodes lack types)."""


@dataclass(frozen=True)
class NoBody:
    """Why a node's function body was not built."""

    reason: str
    refused: bool
    """True when the onnx package, whose function builder ONNX Runtime links in, rejects the node,
    builds nothing for it or defines no body at the model's opset: the runtime cannot inline the
    node either."""


def value_type_protos(model: ModelProto) -> dict[str, TypeProto]:
    """The full type (element type and shape) of every named value whose type is known.

    The counterpart of ``value_types`` for function builders, which need shapes (ranks) as well.
    The outermost graph declaring a name wins: a subgraph's value of the same name is typed from
    its own graph (``graph_type_protos``) by whoever walks that graph.
    """
    protos: dict[str, TypeProto] = {}
    for graph in iter_model_graphs(model):
        for name, proto in graph_type_protos(graph).items():
            protos.setdefault(name, proto)
    return protos


def graph_type_protos(graph: GraphProto) -> dict[str, TypeProto]:
    """The types one graph declares itself (inputs, value_info, outputs, initializers)."""
    protos: dict[str, TypeProto] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.type.WhichOneof("value") is not None:
            protos[info.name] = info.type
    for tensor in graph.initializer:
        protos[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return protos


def _onnx_spec(schema: NodeSchema) -> defs.OpSchema | None:
    """The onnx package's definition of exactly the version the runtime holds, if it has one."""
    try:
        spec = defs.get_schema(schema.op, schema.since_version, proto_domain(schema.domain))
    except defs.SchemaError:
        return None
    return spec if spec.since_version == schema.since_version else None


def _build(
    schema: NodeSchema, node: NodeProto, inputs: Sequence[TypeProto | None], opset: int
) -> FunctionProto | NoBody:
    spec = _onnx_spec(schema)
    name = _name(schema)
    if spec is None:
        return NoBody(f"the onnx package has no definition of {name}", refused=False)
    static = list(spec.function_opset_versions) if spec.has_function else []
    context = (
        list(spec.context_dependent_function_opset_versions)
        if getattr(spec, "has_context_dependent_function", False)
        else []
    )
    if not static and not context:
        return NoBody(f"the onnx package defines no body of {name}", refused=False)
    usable_static = [v for v in static if v <= opset]
    usable_context = [v for v in context if v <= opset]
    if usable_static:
        raw = spec.get_function_with_opset_version(max(usable_static))
    elif usable_context:
        unknown = [n for n, t in zip(node.input, inputs, strict=True) if n and t is None]
        if unknown:
            return NoBody(f"the type of input '{unknown[0]}' is not known here", refused=False)
        # A missing optional input is an empty type, as the runtime passes it.
        types = [(t or TypeProto()).SerializeToString() for t in inputs]
        try:
            with native_step("onnx function builder"):
                raw = spec.get_context_dependent_function_with_opset_version(
                    max(usable_context), node.SerializeToString(), types
                )
        except TypeError:
            raise  # pybind's "incompatible function arguments": our call is wrong, not the model
        except Exception as err:  # the builder's own checks: ValueError, SchemaError, C++ errors
            return NoBody(f"onnx's function builder rejects it: {first_line(err)}", refused=True)
    else:
        # Relu-14 has a body only from opset 18: at opset 17 a Relu with no kernel cannot be inlined.
        return NoBody(
            f"the onnx package defines the body only from opset {min(static + context)} "
            f"(the model imports {opset})",
            refused=True,
        )
    body = FunctionProto.FromString(raw)
    if not body.node:
        return NoBody(
            "onnx's function builder builds no body for its attributes and input types "
            f"({', '.join(_describe(t) for t in inputs)})",
            refused=True,
        )
    return body


def _describe(proto: TypeProto | None) -> str:
    """``bfloat16 of rank 4``, ``bfloat16 of unknown rank``, ``sequence_type``, ``none``."""
    if proto is None or proto.WhichOneof("value") is None:
        return "none"
    if not proto.HasField("tensor_type"):
        return str(proto.WhichOneof("value"))
    tensor = proto.tensor_type
    elem = elem_type_name(tensor.elem_type)  # "unknown(99)" for a malformed one, not a KeyError
    return (
        f"{elem} of rank {len(tensor.shape.dim)}"
        if tensor.HasField("shape")
        else f"{elem} of unknown rank"
    )


def _bind_attributes(body: FunctionProto, node: NodeProto) -> list[NodeProto]:
    given = {a.name: a for a in node.attribute}
    nodes = []
    for inner in body.node:
        bound = NodeProto()
        bound.CopyFrom(inner)
        del bound.attribute[:]
        for attr in inner.attribute:
            if not attr.ref_attr_name:
                bound.attribute.append(attr)
            elif attr.ref_attr_name in given:
                value = AttributeProto()
                value.CopyFrom(given[attr.ref_attr_name])
                value.name = attr.name
                bound.attribute.append(value)
        nodes.append(bound)
    return nodes


def _expand(
    schema: NodeSchema, node: NodeProto, inputs: Sequence[TypeProto | None], opset: int
) -> Body | NoBody:
    built = _build(schema, node, inputs, opset)
    if isinstance(built, NoBody):
        return built
    nodes = _bind_attributes(built, node)
    opsets = opset_map(built.opset_import) or {"ai.onnx": opset}
    formal = []
    for name, proto in zip(built.input, inputs, strict=False):
        info = onnx.ValueInfoProto(name=name)
        if proto is not None:
            info.type.CopyFrom(proto)
        formal.append(info)
    graph = helper.make_graph(
        nodes, "body", formal, [onnx.ValueInfoProto(name=o) for o in built.output]
    )
    imports = [helper.make_opsetid(proto_domain(d), v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports)
    failure = None
    try:
        with native_step("onnx shape inference of a function body"):
            model = onnx.shape_inference.infer_shapes(model)
    except TypeError:
        raise  # our call is wrong, not the body
    except Exception as err:  # InferenceError, ValidationError, C++ errors: onnx judges the body
        failure = first_line(err)
    return Body(nodes, opsets, value_types(model), value_type_protos(model), failure)


def _name(schema: NodeSchema) -> str:
    return f"{schema.op}-{schema.since_version}"


def _internal(error: BaseException, doing: str) -> InternalError:
    """A bug in onnxgate met while ``doing`` something, with the line of ours it passed last."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(_PACKAGE)] or frames
    place = (
        f" (at {Path(ours[-1].filename).name}:{ours[-1].lineno} in {ours[-1].name})" if ours else ""
    )
    return InternalError(
        f"{doing} failed: {first_line(error, with_type=True)}{place}.",
        hint="This is a bug in onnxgate, not a finding about the model; please report it.",
    )


def expand(
    schema: NodeSchema, node: NodeProto, inputs: Sequence[TypeProto | None], opset: int
) -> Body | NoBody:
    """The body of ``node``'s operator built for its attributes and input types, or why not.

    Args:
        schema: the schema the runtime holds the node to.
        node: the node, with its attributes.
        inputs: the full type of each of the node's inputs (None where unknown; an empty
            ``TypeProto`` or None for a missing optional input).
        opset: the opset of the node's domain in force.

    Raises:
        InternalError: onnxgate's own code failed while expanding (a bug, not a finding).
    """
    try:
        return _expand(schema, node, inputs, opset)
    except GateError:
        raise
    except Exception as err:
        doing = f"expanding {_name(schema)} (node {node_label(node, 0)}) into its function body"
        raise _internal(err, doing) from err
