"""Expanding an operator into its function body, as ONNX Runtime does when it has no kernel.

An operator such as GreaterOrEqual-16 is defined as a function of others (Greater, Equal, Or).
When the runtime has no kernel for it, it inlines that body; the model then loads only if every
operator of the body has a kernel for the types it sees. To predict that, the body is built here
for the node's actual attributes and input types, its types are inferred, and each of its nodes
is judged like any other.
"""

from __future__ import annotations

import logging

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, TensorProto, defs, helper

from onnxgate.compat.kernels import NodeSchema
from onnxgate.compat.versions import opset_map, proto_domain
from onnxgate.model import value_types

log = logging.getLogger(__name__)

_ELEM_TYPES = {name.lower(): value for name, value in TensorProto.DataType.items()}


def _type_proto(type_str: str | None) -> onnx.TypeProto | None:
    if not type_str or not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    elem = _ELEM_TYPES.get(type_str[len("tensor(") : -1])
    return helper.make_tensor_type_proto(elem, None) if elem else None


def _body(
    schema: NodeSchema, node: NodeProto, input_types: list[str | None], opset: int
) -> FunctionProto | None:
    onnx_domain = proto_domain(schema.domain)
    try:
        spec = defs.get_schema(schema.op, schema.since_version, onnx_domain)
    except defs.SchemaError:
        return None
    if spec.has_function:
        versions = [v for v in spec.function_opset_versions if v <= opset]
        if not versions:
            return None
        return FunctionProto.FromString(spec.get_function_with_opset_version(max(versions)))
    if getattr(spec, "has_context_dependent_function", False):
        versions = [v for v in spec.context_dependent_function_opset_versions if v <= opset]
        protos = [_type_proto(t) for t in input_types]
        if not versions or any(p is None for p in protos):
            return None
        raw = spec.get_context_dependent_function_with_opset_version(
            max(versions), node.SerializeToString(), [p.SerializeToString() for p in protos]
        )
        return FunctionProto.FromString(raw)
    return None


def first_body_opset(schema: NodeSchema) -> int | None:
    """The lowest opset at which the onnx package can build the operator's body, if it says.

    Relu-14 has a body only from opset 18: at opset 17 a Relu with no kernel cannot be inlined.
    """
    try:
        spec = defs.get_schema(schema.op, schema.since_version, proto_domain(schema.domain))
    except defs.SchemaError:
        return None
    versions = [
        *(spec.function_opset_versions if spec.has_function else []),
        *(
            spec.context_dependent_function_opset_versions
            if getattr(spec, "has_context_dependent_function", False)
            else []
        ),
    ]
    return min(versions) if versions else None


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


def expand(
    schema: NodeSchema, node: NodeProto, input_types: list[str | None], opset: int
) -> tuple[list[NodeProto], dict[str, int], dict[str, str | None]] | None:
    """The body of ``node``'s operator: its nodes, their opsets and inferred value types.

    Returns None when the operator has no function body the onnx package can build.
    """
    try:
        body = _body(schema, node, input_types, opset)
    except Exception as err:  # a context-dependent builder can reject unusual inputs
        log.debug("cannot build the body of %s: %s", schema.op, err)
        return None
    if body is None:
        return None
    nodes = _bind_attributes(body, node)
    opsets = opset_map(body.opset_import) or {"ai.onnx": opset}
    inputs = []
    for name, type_str in zip(body.input, input_types, strict=False):
        proto = _type_proto(type_str)
        info = onnx.ValueInfoProto(name=name)
        if proto is not None:
            info.type.CopyFrom(proto)
        inputs.append(info)
    graph = helper.make_graph(
        nodes, "body", inputs, [onnx.ValueInfoProto(name=o) for o in body.output]
    )
    imports = [helper.make_opsetid(proto_domain(d), v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as err:  # keep what is known; the nodes are still judged
        log.debug("inference over the body of %s failed: %s", schema.op, err)
    return nodes, opsets, value_types(model)
