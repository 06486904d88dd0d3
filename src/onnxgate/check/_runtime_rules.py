"""Rules that judge a model against one runtime: versions, kernels, providers."""

from __future__ import annotations

from collections import ChainMap, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

from onnxgate._words import setting
from onnxgate.check._functions import MAX_DEPTH, NoBody, expand, graph_type_protos
from onnxgate.check._graph import node_label
from onnxgate.check._libraries import LibraryCoverage
from onnxgate.check._report import RULES, Finding, finding
from onnxgate.compat.kernels import KernelOracle, NodeSchema, onnx_schema
from onnxgate.compat.probed import EMBED_LIMIT, ProbeNode, elements, lone_node, node_key
from onnxgate.compat.providers import registered_providers
from onnxgate.compat.runtime import RuntimeProfile
from onnxgate.compat.versions import (
    DEFAULT_DOMAIN,
    ML_DOMAIN,
    STANDARD_DOMAINS,
    normalize_domain,
    onnx_releases,
    opset_map,
)
from onnxgate.model import inline_external, iter_scoped_nodes, subgraphs_of

# Operators ONNX Runtime resolves while loading the graph rather than through a kernel.
RESOLVED_AT_LOAD = {(DEFAULT_DOMAIN, "Constant")}


def version_findings(model: ModelProto, profile: RuntimeProfile) -> list[Finding]:
    """VER001 to VER007."""
    found: list[Finding] = []
    target = profile.label
    opsets = opset_map(model.opset_import)
    if model.ir_version > profile.max_ir:
        found.append(
            finding(
                "VER001",
                f"IR version {model.ir_version} is newer than {target} loads (at most IR {profile.max_ir})",
            )
        )
    if model.ir_version < profile.min_ir:
        found.append(
            finding(
                "VER002",
                f"IR version {model.ir_version} is older than {target} loads (IR {profile.min_ir} or newer)",
            )
        )
    runtime_domains = {normalize_domain(row[1]) for row in profile.schemas}
    unimported = sorted(
        {
            normalize_domain(node.domain)
            for node, scope, _ in _scoped_nodes(model)
            if normalize_domain(node.domain) not in scope
        }
    )
    for domain in unimported:
        if not opsets:
            found.append(
                finding(
                    "VER006",
                    f"nodes of domain '{domain}' are used but the model imports no opset at all",
                )
            )
        elif domain in runtime_domains:
            found.append(
                finding(
                    "VER008",
                    f"nodes of domain '{domain}' are used with no opset_import for it; {profile.label} assumes its latest",
                )
            )
        else:
            found.append(
                finding(
                    "VER006", f"nodes of domain '{domain}' are used with no opset_import for it"
                )
            )
    known = onnx_releases()[-1]
    for domain, limit_key, code in (
        (DEFAULT_DOMAIN, DEFAULT_DOMAIN, "VER003"),
        (ML_DOMAIN, ML_DOMAIN, "VER005"),
    ):
        version = opsets.get(domain)
        if version is None:
            continue
        limit = profile.max_opsets.get(limit_key, 0)
        if version > limit:
            found.append(
                finding(
                    code, f"{domain} opset {version} is newer than {target} loads (at most {limit})"
                )
            )
        newest = known.opset if domain == DEFAULT_DOMAIN else known.ml_opset
        if version > newest:
            found.append(
                finding(
                    "VER007",
                    f"{domain} opset {version} is newer than onnx {onnx.__version__} knows ({newest}); operator schemas cannot be checked",
                )
            )
    if opsets.get(DEFAULT_DOMAIN, 7) < 7:
        found.append(finding("VER004", f"ai.onnx opset {opsets[DEFAULT_DOMAIN]} is below 7"))
    return found


def provider_findings(
    profile: RuntimeProfile, table: KernelOracle | None, providers: list[str]
) -> list[Finding]:
    """PRV001 and PRV002 for each requested provider."""
    found = []
    for provider in providers:
        if provider not in profile.available_providers:
            found.append(
                finding(
                    "PRV001",
                    f"{provider} is not in {profile.label} (this build has {', '.join(profile.available_providers)})",
                    hint=_provider_hint(provider),
                )
            )
        elif table is not None and provider not in table.providers:
            found.append(
                finding(
                    "PRV002",
                    f"{provider} registers no static kernels; it claims nodes when the session is created",
                )
            )
    return found


_BUILDS = {
    "CUDAExecutionProvider": "onnxruntime-gpu",
    "TensorrtExecutionProvider": "onnxruntime-gpu (with TensorRT libraries)",
    "DmlExecutionProvider": "onnxruntime-directml",
    "QNNExecutionProvider": "onnxruntime-qnn",
    "CoreMLExecutionProvider": "onnxruntime on macOS",
}
"""ONNX Runtime's own builds, in the words of the hint; a registered runtime's providers are
named by their registration (``Provider.package``)."""


def _provider_hint(provider: str) -> str:
    registered = {p.name: p.package for p in registered_providers()}
    package = _BUILDS.get(provider) or registered.get(provider)
    if package:
        return f"{provider} comes with {package}; check against that build with --runtime {package.split()[0]}==X.Y.Z."
    return "Remove it from --providers or check against a build that has it."


@dataclass(frozen=True)
class _Verdict:
    code: str
    key: tuple
    message: str


def _node_types(
    node: NodeProto, types: dict[str, str | None]
) -> tuple[list[str | None], list[str | None]]:
    return [types.get(n) if n else None for n in node.input], [
        types.get(n) if n else None for n in node.output
    ]


def _judge_body(
    node: NodeProto,
    schema: NodeSchema,
    opset: int,
    inputs: list[str | None],
    protos: Mapping[str, TypeProto],
    table: KernelOracle,
    profile: RuntimeProfile,
    providers: list[str],
    depth: int,
) -> _Verdict:
    """OP005 when the inlined body has kernels for all its nodes, else OP001 naming the culprit.

    OP001 too when onnx's function builder (the runtime's own) rejects the node or builds nothing.
    """
    key = (schema.domain, node.op_type, schema.since_version, tuple(inputs))
    name = f"{node.op_type}-{schema.since_version}"
    types_text = ", ".join(t or "?" for t in inputs)
    body = (
        expand(schema, node, [protos.get(n) if n else None for n in node.input], opset)
        if depth < MAX_DEPTH
        else NoBody(f"it is nested more than {MAX_DEPTH} function bodies deep", refused=False)
    )
    if isinstance(body, NoBody):
        if body.refused:
            return _Verdict(
                "OP001",
                key,
                f"{name} has no kernel for ({types_text}), and its function body cannot be built "
                f"for this node: {body.reason}",
            )
        return _Verdict(
            "OP005", key[:3], f"{name} runs as its function body (not expanded here: {body.reason})"
        )
    for inner in body.nodes:
        inner_opset = body.opsets.get(normalize_domain(inner.domain), opset)
        for verdict in _judge(
            inner, inner_opset, body.types, table, profile, providers, depth + 1, body.protos
        ):
            if RULES[verdict.code].blocks_load:
                return _Verdict(
                    "OP001",
                    key,
                    f"{name} has no kernel and its function body cannot run: {verdict.message}",
                )
    untyped = (
        f"; onnx's type inference fails inside the body ({body.inference_failure}), so its "
        "nodes were judged without their types"
        if body.inference_failure
        else ""
    )
    return _Verdict("OP005", key[:3], f"{name} runs as its function body{untyped}")


def _library_hint() -> str:
    """OP003's fix in the words of the interface in use (a flag, a gate key)."""
    return (
        "Register the library that implements it in every session "
        f"({setting('ops_libraries', ['PATH'])}, or onnxruntime-extensions for its domains; "
        "check then loads them to see what they provide), or replace the node."
    )


def _judge(
    node: NodeProto,
    opset: int,
    types: dict[str, str | None],
    table: KernelOracle | None,
    profile: RuntimeProfile,
    providers: list[str],
    depth: int = 0,
    protos: Mapping[str, TypeProto] | None = None,
) -> Iterator[_Verdict]:
    domain = normalize_domain(node.domain)
    schema: NodeSchema | None = (
        table.schema(node.op_type, domain, opset)
        if table
        else onnx_schema(node.op_type, domain, opset)
    )
    if schema is None:
        if domain in STANDARD_DOMAINS:
            yield _Verdict(
                "OP004",
                (domain, node.op_type, opset),
                f"{node.op_type} has no schema in {domain} at opset {opset}",
            )
        elif table is None or not table.knows(node.op_type, domain):
            yield _Verdict(
                "OP003",
                (domain, node.op_type),
                f"{domain}.{node.op_type} is not known to {profile.label}",
            )
        return
    if schema.deprecated:
        yield _Verdict(
            "OP006",
            (domain, node.op_type, schema.since_version),
            f"{node.op_type}-{schema.since_version} is deprecated",
        )
        return  # the runtime refuses the node outright; its kernels do not matter
    if table is None or (domain, node.op_type) in RESOLVED_AT_LOAD:
        return
    declared = table.runtime_attributes(node.op_type, domain, schema.since_version)
    unknown = sorted({a.name for a in node.attribute} - declared) if declared is not None else []
    if unknown:
        yield _Verdict(
            "OP009",
            (domain, node.op_type, schema.since_version, tuple(unknown)),
            f"{node.op_type}-{schema.since_version} as {profile.label} defines it has no attribute "
            f"{', '.join(repr(a) for a in unknown)}",
        )
    inputs, outputs = _node_types(node, types)
    coverage = table.coverage(node, schema, inputs, outputs)
    name = f"{node.op_type}-{schema.since_version}"
    if coverage.unknown or coverage.refused:
        said = table.explain(node.op_type, domain, coverage, "CPUExecutionProvider")
        if coverage.unknown:
            yield _Verdict(
                "OP003",
                (domain, node.op_type),
                f"{domain}.{node.op_type} is not known to {profile.label}; {said}",
            )
        else:
            yield _Verdict(
                "OP010",
                (domain, node.op_type, schema.since_version, tuple(inputs), coverage.refused),
                f"{name} ({domain}) alone does not load on {profile.label}, for a reason other than a missing kernel; {said}",
            )
        return
    have = coverage.providers
    effective = [p for p in providers if p in table.providers]
    on = [p for p in effective if p in have]
    types_text = ", ".join(t or "?" for t in inputs if t is not None) or "no known types"
    if (
        not on
        and "CPUExecutionProvider" in effective
        and table.cpu_float16_fallback(schema, inputs, outputs)
    ):
        yield _Verdict(
            "OP008",
            (domain, node.op_type, schema.since_version),
            f"{name} has no float16 kernel on CPU; it runs in float32 between inserted casts",
        )
    elif not on:
        if schema.has_function and not table.inlines_functions:
            yield _judge_body(
                node, schema, opset, inputs, protos or {}, table, profile, providers, depth
            )
            return
        said = table.explain(node.op_type, domain, coverage, effective[0] if effective else "")
        yield _Verdict(
            "OP001",
            (domain, node.op_type, schema.since_version, tuple(inputs)),
            f"{name} ({domain}) has no kernel on {', '.join(effective)} "
            f"for inputs ({types_text}); {said}",
        )
    elif effective and on[0] != effective[0]:
        # A probed runtime only shows that the provider refused the node, not why (its explain
        # says so); a registry shows the kernel is absent.
        refused = (
            f"does not run on {effective[0]}"
            if coverage.lines
            else f"has no kernel on {effective[0]}"
        )
        said = (
            f"; {table.explain(node.op_type, domain, coverage, effective[0])}"
            if coverage.lines
            else ""
        )
        yield _Verdict(
            "OP002",
            (domain, node.op_type, schema.since_version, tuple(inputs), on[0]),
            f"{name} {refused} for ({types_text}); it falls back to {on[0]}{said}",
        )


def _scoped_nodes(model: ModelProto) -> Iterator[tuple[NodeProto, dict[str, int], bool]]:
    """Every node to judge, the opsets in force for it, and whether it is inside a function.

    Calls of model-local functions are skipped: the runtime inlines them, and their nodes are
    judged in their function's scope.
    """
    local = {(normalize_domain(f.domain), f.name) for f in model.functions}
    opsets = opset_map(model.opset_import)
    # The scope comes from the function object the walk yields, never from an id() taken in an
    # earlier pass: protobuf makes a new wrapper for each access, and a dead one's id is reused.
    function: FunctionProto | None = None
    scope = opsets
    for node, owner in iter_scoped_nodes(model):
        if owner is not function:  # the walk yields one function's nodes together
            function = owner
            scope = opsets if owner is None else {**opsets, **opset_map(owner.opset_import)}
        if (normalize_domain(node.domain), node.op_type) not in local:
            yield node, scope, owner is not None


def kernel_probes(
    model: ModelProto,
    oracle: KernelOracle,
    types: dict[str, str | None],
    protos: Mapping[str, TypeProto],
    path: Path | None = None,
) -> list[ProbeNode]:
    """One probe per distinct one-node model of the nodes the rules will judge (probed runtimes).

    Small initializers and ``Constant`` outputs a node reads are embedded in its probe model,
    external ones read in from the folder of ``path`` (graph inputs when there is none); values
    folded from them (a ``Reshape`` of a weight) are graph inputs of their type and shape. Each
    graph sees its own weights and types and its outer graphs' unless it shadows them. Nodes
    inside model-local functions have no inferred types here, so they are not probed (``OP007``
    says how many kinds).
    """
    found: dict[tuple, ProbeNode] = {}
    model_opsets = opset_map(model.opset_import)
    local = {(normalize_domain(f.domain), f.name) for f in model.functions}
    in_graphs = (
        (node, model_opsets, False, scope)
        for node, scope in _graph_scopes(model, protos, path)
        if (normalize_domain(node.domain), node.op_type) not in local
    )
    in_functions = (
        (node, scope, True, None) for node, scope, inside in _scoped_nodes(model) if inside
    )
    for node, opsets, in_function, scope in (*in_graphs, *in_functions):
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain)
        if opset is None or (domain, node.op_type) in RESOLVED_AT_LOAD:
            continue
        schema = oracle.schema(node.op_type, domain, opset)
        if schema is None or schema.deprecated:
            continue
        known = {} if in_function else types
        inputs, outputs = _node_types(node, known)
        base = node_key(node, schema.since_version, inputs, outputs)
        built = (
            "it is inside a model-local function, whose types are not inferred"
            if in_function or scope is None
            else lone_node(node, model, *scope)
        )
        probe = ProbeNode.of(base, node, built)
        found.setdefault(probe.key, probe).nodes.update(probe.nodes)
    return list(found.values())


def _graph_scopes(
    model: ModelProto, protos: Mapping[str, TypeProto], path: Path | None
) -> Iterator[tuple[NodeProto, tuple[Mapping[str, TypeProto], Mapping[str, TensorProto]]]]:
    """Every node of the model's graphs with the types and weights its graph sees."""

    def walk(graph: GraphProto, types: ChainMap, weights: ChainMap) -> Iterator:
        types = types.new_child(graph_type_protos(graph))
        weights = weights.new_child(_weights(graph, path))
        for node in graph.node:
            yield node, (types, weights)
            for sub in subgraphs_of(node):
                yield from walk(sub, types, weights)

    for graph in (
        model.graph,
        *(g for info in model.training_info for g in (info.initialization, info.algorithm)),
    ):
        yield from walk(graph, ChainMap(dict(protos)), ChainMap())


def _weights(graph: GraphProto, path: Path | None) -> dict[str, TensorProto]:
    """The tensors a graph defines: its initializers and its Constant nodes' values.

    External tensors small enough to embed are read in from the model's folder; without one
    they are left out (the probe model takes them as graph inputs).
    """
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                tensor = TensorProto()
                tensor.CopyFrom(value)
                tensor.name = node.output[0]
                found[tensor.name] = tensor
    for name, tensor in list(found.items()):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        if path is None or elements(tensor.dims) > EMBED_LIMIT:
            del found[name]
        else:
            found[name] = inline_external(path, tensor)
    return found


def operator_findings(
    model: ModelProto,
    profile: RuntimeProfile,
    table: KernelOracle | None,
    providers: list[str],
    types: dict[str, str | None],
    protos: Mapping[str, TypeProto] | None = None,
    libraries: LibraryCoverage | None = None,
) -> list[Finding]:
    """OP001 to OP009, one finding per distinct problem, naming the first node and the count.

    Args:
        model: the model as the runtime sees it.
        profile: the target runtime.
        table: its kernels (None when the release does not expose them).
        providers: the providers a session would use, in order.
        types: the type string of every value, after inference.
        protos: the full type (with shape) of every value, for building function bodies.
        libraries: the custom operator libraries sessions register and the kinds they provide:
            no OP003 for those, and the others' OP003 names the libraries tried.
    """
    groups: dict[tuple, list[tuple[str, _Verdict]]] = defaultdict(list)
    for index, (node, opsets, in_function) in enumerate(_scoped_nodes(model)):
        opset = opsets.get(normalize_domain(node.domain))
        if opset is None:
            continue  # VER006 reports the missing import; VER008 domains got the runtime default
        known, full = ({}, {}) if in_function else (types, protos or {})
        for verdict in _judge(node, opset, known, table, profile, providers, 0, full):
            if verdict.code == "OP003" and libraries is not None:
                if verdict.key in libraries.provided:
                    continue
                if verdict.key in libraries.probed:
                    verdict = replace(
                        verdict, message=f"{verdict.message}, nor provided by {libraries.tried}"
                    )
            groups[(verdict.code, verdict.key)].append((node_label(node, index), verdict))
    found = []
    for (code, _), hits in groups.items():
        label, verdict = hits[0]
        more = f" (and {len(hits) - 1} more node(s))" if len(hits) > 1 else ""
        hint = _library_hint() if code == "OP003" else None
        found.append(finding(code, f"node {label}: {verdict.message}{more}", node=label, hint=hint))
    if table is None:
        found.append(
            finding(
                "OP007",
                f"{profile.label} does not expose its kernel registry; kernel coverage was not checked",
            )
        )
    elif table.note():
        found.append(finding("OP007", f"{table.note()}"))
    return found
