"""Protobuf-aware mutations of real ONNX models, driven by any source of choices.

Used by the fixed-budget property suite (tests/fuzz, choices drawn by hypothesis) and by the long
coverage-guided run (tools/fuzz_models.py, choices read from atheris's FuzzedDataProvider). Both
hand a ``Source`` to ``mutate``, which picks a few meaningful edits (opset imports, IR version,
nodes, attributes, initializers, value infos, local functions, any scalar field, and at a lower
weight raw bytes of the file) and returns them as plain data (see ``_onnx_edits``), so a failing
case is saved as a list of edits and replayed or printed as Python.

Every mutator reads the model as the earlier edits left it, and returns edits that apply cleanly
(tests/fuzz/test_mutations.py holds them to that); what the edits *mean* is left to onnxgate to
judge, which is the point.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from _fuzz_source import RandomSource as RandomSource  # re-exported: the callers import it here
from _fuzz_source import Source, pick
from _onnx_edits import Edit, apply_byte_edit, apply_edit, encode
from _onnx_values import (
    DATA_TYPES,
    DIMS,
    DOMAINS,
    FLOATS,
    INT32,
    INT64,
    IR_VERSIONS,
    LOCATIONS,
    NUMBERS,
    OPSET_VERSIONS,
    STRINGS,
    TYPES,
)
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import ModelProto, TensorProto

T = TypeVar("T")


def chance(src: Source, one_in: int) -> bool:
    """True about once in ``one_in`` draws (False where sources shrink to, or run dry)."""
    return src.integer(0, one_in - 1) == one_in - 1


@functools.cache
def _schemas() -> list[tuple[str, str]]:
    import onnx.defs

    return sorted({(s.domain, s.name) for s in onnx.defs.get_all_schemas()})


def _ops() -> list[tuple[str, str]]:
    extra = [("", "NoSuchOp"), ("", ""), ("", "conv"), ("com.microsoft", "FusedConv")]
    return [("", "Identity"), ("", "If"), ("", "Loop"), ("", "Scan"), *extra, *_schemas()]


# --- where things are -------------------------------------------------------------------------


def _graphs(model: ModelProto) -> list[tuple[str, Message]]:
    """Every graph with its path: the main graph, subgraphs, training graphs."""
    found: list[tuple[str, Message]] = []

    def walk(path: str, graph: Message) -> None:
        found.append((path, graph))
        for i, node in enumerate(graph.node):
            for j, attr in enumerate(node.attribute):
                if attr.HasField("g"):
                    walk(f"{path}.node[{i}].attribute[{j}].g", attr.g)
                for k, sub in enumerate(attr.graphs):
                    walk(f"{path}.node[{i}].attribute[{j}].graphs[{k}]", sub)

    walk("graph", model.graph)
    for i, info in enumerate(model.training_info):
        if info.HasField("algorithm"):
            walk(f"training_info[{i}].algorithm", info.algorithm)
    return found


def _containers(model: ModelProto) -> list[tuple[str, Message]]:
    """Everything that holds nodes: graphs and model-local functions."""
    return _graphs(model) + [(f"functions[{i}]", f) for i, f in enumerate(model.functions)]


def _names(model: ModelProto) -> list[str]:
    g = model.graph
    names = [v.name for v in (*g.input, *g.output)] + [t.name for t in g.initializer]
    names += [o for n in g.node for o in n.output]
    return names or ["x"]


def _name(model: ModelProto, src: Source) -> str:
    """A tensor name that exists (a duplicate), or one that does not (dangling)."""
    return pick(src, _names(model)) if chance(src, 2) else pick(src, STRINGS)


def _int_list(src: Source, values: list[int], original: Sequence[int]) -> list[int]:
    how = src.integer(0, 4)
    if how == 0:
        return []
    if how == 1:
        return [*original, pick(src, values)]
    if how == 2:
        return list(original[:-1])
    if how == 3:
        return [pick(src, values)] * src.integer(1, 64)
    return [pick(src, values) for _ in original]


# --- mutators -----------------------------------------------------------------------------------


def opset_import(model: ModelProto, src: Source) -> list[Edit]:
    n = len(model.opset_import)
    how = src.integer(0, 5) if n else 4
    i = src.integer(0, max(n - 1, 0))
    if how == 0:
        return [["set", f"opset_import[{i}].version", pick(src, OPSET_VERSIONS)]]
    if how == 1:
        return [["set", f"opset_import[{i}].domain", pick(src, DOMAINS + STRINGS)]]
    if how == 2:
        return [["del", f"opset_import[{i}]"]]
    if how == 3:
        return [["dup", f"opset_import[{i}]"]]
    if how == 4:
        text = f"domain: {_q(pick(src, DOMAINS))} version: {pick(src, OPSET_VERSIONS)}"
        return [["msg", "opset_import[+]", text]]
    return [["del", "opset_import"]]


def ir_version(model: ModelProto, src: Source) -> list[Edit]:
    return [["set", "ir_version", pick(src, IR_VERSIONS)]]


def model_fields(model: ModelProto, src: Source) -> list[Edit]:
    field = pick(src, ["producer_name", "producer_version", "domain", "doc_string", "metadata"])
    if field == "metadata":
        text = f"key: {_q(pick(src, STRINGS))} value: {_q(pick(src, STRINGS))}"
        return [["msg", "metadata_props[+]", text]] * src.integer(1, 2)
    return [["set", field, pick(src, STRINGS)]]


def node(model: ModelProto, src: Source) -> list[Edit]:
    holders = [(p, c) for p, c in _containers(model) if len(c.node)]
    if not holders:
        return []
    where, holder = pick(src, holders)
    i = src.integer(0, len(holder.node) - 1)
    n = holder.node[i]
    path = f"{where}.node[{i}]"
    how = src.integer(0, 12)
    if how == 0:
        domain, op = pick(src, _ops())
        return [["set", f"{path}.op_type", op], ["set", f"{path}.domain", domain]]
    if how == 1:
        return [["set", f"{path}.domain", pick(src, DOMAINS)]]
    if how in (2, 3) and len(n.input):
        j = src.integer(0, len(n.input) - 1)
        later = [o for m in holder.node[i:] for o in m.output]  # itself or later: a cycle
        name = pick(src, later) if later and chance(src, 3) else _name(model, src)
        return [["set", f"{path}.input[{j}]", name]]
    if how == 4 and len(n.output):
        return [["set", f"{path}.output[{src.integer(0, len(n.output) - 1)}]", _name(model, src)]]
    if how == 5 and len(n.input):
        return [["del", f"{path}.input[{src.integer(0, len(n.input) - 1)}]"]]
    if how == 6 and len(n.output):
        return [["del", f"{path}.output[{src.integer(0, len(n.output) - 1)}]"]]
    if how == 7:
        return [["set", f"{path}.input", [*n.input, _name(model, src)]]]
    if how == 8:
        return [["set", f"{path}.output", [*n.output, _name(model, src)]]]
    if how == 9:
        return [["del", path]]
    if how == 10:
        return [["dup", path]]
    if how == 11:
        return [["move", path, src.integer(0, len(holder.node) - 1)]]
    return [["set", f"{path}.name", pick(src, [m.name for m in holder.node] + STRINGS)]]


def _subgraph(model: ModelProto, src: Source) -> str:
    """A graph in text format, for If/Loop/Scan bodies."""
    outer = _q(pick(src, _names(model)))
    bodies = [
        'name: "empty"',
        f'name: "outer" node {{ op_type: "Identity" input: {outer} output: "s" }} output {{ name: "s" }}',
        'name: "loop" input { name: "i" } input { name: "c" } node { op_type: "Identity" '
        'input: "c" output: "c2" } output { name: "c2" } output { name: "c2" }',
        'name: "deep" node { op_type: "If" input: "c" output: "o" attribute { name: "then_branch" '
        'type: GRAPH g { node { op_type: "If" input: "c" output: "p" attribute { name: '
        '"then_branch" type: GRAPH g { name: "leaf" } } } output { name: "p" } } } } '
        'output { name: "o" }',
        'name: "bad" node { op_type: "NoSuchOp" input: "" output: "" } output { name: "" }',
        f'name: "typed" output {{ name: "s" type {{ {pick(src, TYPES)} }} }}',
    ]
    return pick(src, bodies)


def _attribute_text(model: ModelProto, src: Source) -> str:
    name = _q(pick(src, ["then_branch", "else_branch", "body", "axis", "perm", "value", "", "x"]))
    how = src.integer(0, 6)
    if how == 0:
        return f"name: {name} type: GRAPH g {{ {_subgraph(model, src)} }}"
    if how == 1:
        graphs = " ".join(f"graphs {{ {_subgraph(model, src)} }}" for _ in range(src.integer(0, 3)))
        return f"name: {name} type: GRAPHS {graphs}"
    if how == 2:
        dims = " ".join(f"dims: {pick(src, DIMS)}" for _ in range(src.integer(0, 3)))
        return (
            f"name: {name} type: TENSOR t {{ {dims} data_type: {pick(src, DATA_TYPES)} "
            f'raw_data: "\\000\\000\\000\\000" }}'
        )
    if how == 3:
        return f"name: {name} type: INT i: {pick(src, INT64)}"
    if how == 4:
        ints = " ".join(f"ints: {pick(src, INT64)}" for _ in range(src.integer(0, 8)))
        return f"name: {name} type: INTS {ints}"
    if how == 5:
        return f'name: {name} type: STRING s: "x" i: 3 f: 1.5'  # the wrong value set too
    return f'name: {name} ref_attr_name: "nowhere" type: FLOAT'


def attribute(model: ModelProto, src: Source) -> list[Edit]:
    holders = [(p, c) for p, c in _containers(model) if len(c.node)]
    if not holders:
        return []
    where, holder = pick(src, holders)
    with_attrs = [i for i, n in enumerate(holder.node) if len(n.attribute)]
    i = (
        pick(src, with_attrs)
        if with_attrs and not chance(src, 4)
        else src.integer(0, len(holder.node) - 1)
    )
    n = holder.node[i]
    path = f"{where}.node[{i}]"
    how = src.integer(0, 11) if len(n.attribute) else 0
    if how == 0:
        return [["msg", f"{path}.attribute[+]", _attribute_text(model, src)]]
    j = src.integer(0, len(n.attribute) - 1)
    a, at = n.attribute[j], f"{path}.attribute[{j}]"
    if how == 1:
        return [["set", f"{at}.type", src.integer(0, 14)]]
    if how == 2:
        return [["set", f"{at}.i", pick(src, INT64)]]
    if how == 3:
        return [["set", f"{at}.ints", _int_list(src, INT64, list(a.ints))]]
    if how == 4:
        return [["set", f"{at}.f", pick(src, FLOATS)]]
    if how == 5:
        return [["set", f"{at}.floats", [pick(src, FLOATS)] * src.integer(0, 5)]]
    if how == 6:
        return [["set", f"{at}.s", pick(src, STRINGS).encode()]]
    if how == 7:
        return [["del", at]]
    if how == 8:
        return [["dup", at]]
    if how == 9:
        return [
            ["set", f"{at}.name", pick(src, ["axis", "perm", "kernel_shape", "", "to", "body"])]
        ]
    if how == 10:
        return [["msg", at, _attribute_text(model, src)]]
    return [["set", f"{at}.ref_attr_name", "x"]]


def _tensor_edits(path: str, t: TensorProto, src: Source) -> list[Edit]:
    how = src.integer(0, 12)
    if how == 0 and len(t.dims):
        return [["set", f"{path}.dims[{src.integer(0, len(t.dims) - 1)}]", pick(src, DIMS)]]
    if how == 1:
        return [["set", f"{path}.dims", _int_list(src, DIMS, list(t.dims))]]
    if how == 2 and t.raw_data:
        size = len(t.raw_data)
        return [
            [
                "resize",
                f"{path}.raw_data",
                pick(src, [0, 1, size - 1, size + 1, size // 2, 2 * size]),
            ]
        ]
    if how == 3:
        return [["set", f"{path}.data_type", pick(src, DATA_TYPES)]]
    if how == 4:
        return [["set", f"{path}.raw_data", src.data(64)]]  # next to the typed data, or alone
    if how == 5:
        return [["set", f"{path}.float_data", [pick(src, FLOATS)] * src.integer(0, 5)]]
    if how == 6:
        return [["set", f"{path}.int64_data", [pick(src, INT64)] * src.integer(0, 5)]]
    if how == 7:
        return [["set", f"{path}.string_data", [pick(src, STRINGS).encode()] * src.integer(0, 3)]]
    if how == 8:
        return [["msg", f"{path}.segment", f"begin: {pick(src, INT64)} end: {pick(src, INT64)}"]]
    if how in (9, 10, 11):
        return _external(path, src)
    return [["set", f"{path}.data_location", src.integer(0, 1)]]


def _external(path: str, src: Source) -> list[Edit]:
    edits: list[Edit] = [["set", f"{path}.data_location", 1], ["del", f"{path}.external_data"]]
    for key in ("location", "offset", "length", "checksum"):
        if key == "location" or chance(src, 2):
            value = pick(src, LOCATIONS) if key == "location" else pick(src, NUMBERS)
            edits.append(["msg", f"{path}.external_data[+]", f"key: {_q(key)} value: {_q(value)}"])
    if chance(src, 3):
        edits.append(["del", f"{path}.raw_data"])
    return edits


def initializer(model: ModelProto, src: Source) -> list[Edit]:
    holders = [(p, g) for p, g in _graphs(model) if len(g.initializer)]
    if not holders or chance(src, 8):
        text = (
            'values { name: "sp" dims: 2 data_type: 1 float_data: 1 float_data: 2 } '
            f"indices {{ dims: 2 data_type: 7 int64_data: 0 int64_data: {pick(src, INT64)} }} "
            f"dims: {pick(src, DIMS)}"
        )
        return [["msg", "graph.sparse_initializer[+]", text]]
    where, graph = pick(src, holders)
    i = src.integer(0, len(graph.initializer) - 1)
    path = f"{where}.initializer[{i}]"
    how = src.integer(0, 5)
    if how == 0:
        return [["set", f"{path}.name", _name(model, src)]]
    if how == 1:
        return [["del", path]]
    if how == 2:
        return [["dup", path]]
    return _tensor_edits(path, graph.initializer[i], src)


def value_info(model: ModelProto, src: Source) -> list[Edit]:
    entries = [
        (f"{where}.{kind}[{i}]", v)
        for where, graph in _graphs(model)
        for kind in ("input", "output", "value_info")
        for i, v in enumerate(getattr(graph, kind))
    ]
    if not entries or chance(src, 10):
        text = f"name: {_q(_name(model, src))} type {{ {pick(src, TYPES)} }}"
        return [
            ["msg", pick(src, ["graph.input[+]", "graph.output[+]", "graph.value_info[+]"]), text]
        ]
    path, v = pick(src, entries)
    shape = f"{path}.type.tensor_type.shape"
    dims = v.type.tensor_type.shape.dim
    how = src.integer(0, 10)
    if how in (0, 1) and len(dims):
        k = src.integer(0, len(dims) - 1)
        if chance(src, 3):
            return [["set", f"{shape}.dim[{k}].dim_param", pick(src, STRINGS)]]
        return [["set", f"{shape}.dim[{k}].dim_value", pick(src, DIMS)]]
    if how == 2 and len(dims):
        return [["del", f"{shape}.dim[{src.integer(0, len(dims) - 1)}]"]]
    if how == 3:
        return [["msg", f"{shape}.dim[+]", f"dim_value: {pick(src, DIMS)}"]] * src.integer(1, 40)
    if how == 4:
        return [["del", shape]]
    if how == 5:
        return [["set", f"{path}.type.tensor_type.elem_type", pick(src, DATA_TYPES)]]
    if how == 6:
        return [["msg", f"{path}.type", pick(src, TYPES)]]
    if how == 7:
        return [["set", f"{path}.name", _name(model, src)]]
    if how == 8:
        return [["del", path]]
    if how == 9:
        return [["dup", path]]
    return [["set", f"{path}.type.denotation", pick(src, STRINGS)]]


def function(model: ModelProto, src: Source) -> list[Edit]:
    if len(model.functions) and chance(src, 3):
        return [["dup", f"functions[{src.integer(0, len(model.functions) - 1)}]"]]
    calls = {
        "self": [("F", "F")],
        "mutual": [("F", "G"), ("G", "F")],
        "plain": [("F", "Relu")],
        "unknown": [("F", "NoSuchOp")],
        "twice": [("F", "Relu"), ("F", "Relu")],
    }[pick(src, ["self", "mutual", "plain", "unknown", "twice"])]
    version = pick(src, [1, 13, *OPSET_VERSIONS])
    edits: list[Edit] = []
    for name, callee in calls:
        domain = '"fz"' if callee in ("F", "G") else '""'
        body = f'node {{ op_type: "{callee}" domain: {domain} input: "x" output: "y" }}'
        imports = f'opset_import {{ domain: "" version: {version} }} opset_import {{ domain: "fz" version: 1 }}'
        if chance(src, 4):
            body += f' attribute_proto {{ name: "a" ref_attr_name: "missing" type: INT }} attribute: {_q(pick(src, STRINGS))}'
        text = f'name: "{name}" domain: "fz" input: "x" output: "y" {body} {imports}'
        edits.append(["msg", "functions[+]", text])
    edits.append(["msg", "opset_import[+]", 'domain: "fz" version: 1'])
    if len(model.graph.node):
        i = src.integer(0, len(model.graph.node) - 1)
        edits += [
            ["set", f"graph.node[{i}].op_type", "F"],
            ["set", f"graph.node[{i}].domain", "fz"],
        ]
    return edits


def training_info(model: ModelProto, src: Source) -> list[Edit]:
    text = (
        f"algorithm {{ {_subgraph(model, src)} }} "
        f'update_binding {{ key: {_q(_name(model, src))} value: "nothing" }}'
    )
    return [["msg", "training_info[+]", text]]


_SCALARS: dict[int, Callable[[Source], Any]] = {
    FieldDescriptor.TYPE_INT64: lambda src: pick(src, INT64),
    FieldDescriptor.TYPE_INT32: lambda src: pick(src, INT32),
    FieldDescriptor.TYPE_UINT64: lambda src: pick(src, [0, 1, 2**63, 2**64 - 1]),
    FieldDescriptor.TYPE_FLOAT: lambda src: pick(src, FLOATS[:6]),
    FieldDescriptor.TYPE_DOUBLE: lambda src: pick(src, FLOATS),
    FieldDescriptor.TYPE_STRING: lambda src: pick(src, STRINGS),
    FieldDescriptor.TYPE_BYTES: lambda src: src.data(16),
    FieldDescriptor.TYPE_BOOL: lambda src: bool(src.integer(0, 1)),
}


def any_field(model: ModelProto, src: Source) -> list[Edit]:
    """A random descent through whatever fields are set, then a change where it stops."""
    message: Message = model
    path = ""
    for _ in range(12):
        fields = message.ListFields()
        if not fields:
            return []
        descriptor, value = pick(src, fields)
        here = f"{path}.{descriptor.name}" if path else descriptor.name
        repeated = _is_repeated(descriptor)
        if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            i = src.integer(0, len(value) - 1) if repeated else None
            at = here if i is None else f"{here}[{i}]"
            if repeated and chance(src, 4):
                return [pick(src, [["del", at], ["dup", at], ["move", at, 0]])]
            message, path = (value if i is None else value[i]), at
            continue
        if repeated:
            here = f"{here}[{src.integer(0, len(value) - 1)}]"
        if descriptor.type == FieldDescriptor.TYPE_ENUM:
            return [["set", here, pick(src, [v.number for v in descriptor.enum_type.values])]]
        make = _SCALARS.get(descriptor.type)
        return [["set", here, make(src)]] if make else []
    return []


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def byte_edits(data: bytes, src: Source) -> list[Edit]:
    """Edits of the file: mostly near its ends, where the nodes, signature and opsets sit."""

    def offset() -> int:
        where = src.integer(0, 2)
        if where == 0:
            return src.integer(0, min(4096, len(data) - 1))
        if where == 1:
            return src.integer(max(0, len(data) - 4096), len(data) - 1)
        return src.integer(0, len(data) - 1)

    how = src.integer(0, 3)
    if how == 0:
        return [["truncate", offset()]]
    if how in (1, 2):
        return [["xor", offset(), src.integer(1, 255)] for _ in range(src.integer(1, 4))]
    return [["insert", offset(), encode(src.data(16) or b"\xff" * 10)]]


MUTATORS: list[tuple[int, Callable[[ModelProto, Source], list[Edit]]]] = [
    (16, node),
    (14, attribute),
    (14, initializer),
    (12, value_info),
    (8, opset_import),
    (4, ir_version),
    (6, function),
    (4, model_fields),
    (14, any_field),
    (2, training_info),
]
"""Each mutator with its weight."""


@dataclass(frozen=True)
class Mutated:
    """A mutated model: the edits, the file they give, and the mutators that chose them."""

    edits: list[Edit]
    data: bytes
    mutators: list[str]


def mutate(source: bytes, src: Source, *, max_edits: int = 3, byte_weight: int = 8) -> Mutated:
    """Mutate ``source`` (a serialised model) with choices from ``src``.

    Up to ``max_edits`` rounds of model edits, then, once in ``byte_weight`` cases, edits of the
    serialised bytes (every third of those with no model edit before them).
    """
    model = ModelProto.FromString(source)
    edits: list[Edit] = []
    names: list[str] = []
    with_bytes = chance(src, byte_weight)
    bytes_only = with_bytes and chance(src, 3)
    rounds = 0 if bytes_only else src.integer(1, max_edits)
    total = sum(w for w, _ in MUTATORS)
    for _ in range(rounds):
        roll = src.integer(0, total - 1)
        for weight, mutator in MUTATORS:  # noqa: B007 - the loop picks ``mutator``
            if roll < weight:
                break
            roll -= weight
        chosen = [encode(edit) for edit in mutator(model, src)]
        names.append(mutator.__name__)
        for edit in chosen:
            apply_edit(model, edit)
        edits += chosen
    data = model.SerializeToString()
    if with_bytes and data:
        names.append("bytes")
        for edit in byte_edits(data, src):
            data = apply_byte_edit(data, edit)
            edits.append(edit)
    return Mutated(edits, data, names)


def _q(text: str) -> str:
    """``text`` as a protobuf text-format string literal."""
    escaped = text.encode().replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    return '"' + "".join(chr(c) if 32 <= c < 127 else f"\\{c:03o}" for c in escaped) + '"'
