"""Kernel coverage of a runtime that exposes no kernel registry, measured by loading one-node models.

ONNX Runtime's JavaScript packages (``onnxruntime-web``, ``onnxruntime-node``) have no
``get_all_opkernel_def()``. What they do have is the real answer to the question ``check`` asks:
whether a session can be created. So each distinct kind of node of the model (domain, operator,
schema version, input and output types, integer and string attributes) becomes a model holding
that node alone, with the node's types and ranks, its small constant inputs embedded as weights
(``Reshape``'s shape, ``Slice``'s starts), and the runtime is asked to load all of them in one
driver session per backend. A load that fails with "Could not find an implementation" (or
NOT_IMPLEMENTED) is a missing kernel; for WebGPU the session is created with
``session.disable_cpu_ep_fallback=1``, so a node WebGPU has no kernel for fails instead of falling
back to the wasm CPU provider. Any other failure is kept as the runtime said it, never counted as
a kernel gap.

``ProbedKernels`` answers the same questions as ``KernelTable`` (``KernelOracle``), so the rules
in ``check/_runtime_rules.py`` do not ask which kind of runtime they judge. Answers are cached per
(package, version, backend, digest of the probe model) in onnxgate's cache folder: a second check
of the same model starts no driver.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import AttributeProto, ModelProto, NodeProto, TypeProto, helper

from onnxgate._fs import atomic_write_text, cache_dir
from onnxgate.compat.kernels import Coverage, NodeSchema, onnx_schema
from onnxgate.compat.versions import STANDARD_DOMAINS, normalize_domain
from onnxgate.errors import ProviderUnavailable
from onnxgate.runners.runtimes import RuntimeSpec, runtime_of

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
BACKENDS: dict[str, dict] = {
    CPU: {},
    "WebGpuExecutionProvider": {
        "providers": ["webgpu"],
        "config": {"session.disable_cpu_ep_fallback": "1"},
        "provider_options": {"webgpu": {"allow_fallback_adapter": "1"}},
    },
}
"""The session settings each provider is probed with. WebGPU refuses to fall back to the CPU
provider, so a node it has no kernel for makes the load fail. Which kernels WebGPU registers does
not depend on the adapter, so a fallback adapter (Chromium's SwiftShader, a CPU emulation, which
runners refuse unless asked) is admitted for the probe."""
EMBED_LIMIT = 4096
"""Constant inputs up to this many elements are embedded in the probe model; larger ones (weights)
become graph inputs of the same type and shape, which a kernel lookup does not tell apart."""
_MISSING = re.compile(
    r"Could not find an implementation|NOT_IMPLEMENTED|kernel not found|"
    r"fallback to CPU EP has been explicitly disabled",
    re.IGNORECASE,
)
_UNKNOWN_OP = re.compile(r"is not a registered function/op", re.IGNORECASE)
PROBE_VERSION = 5
"""Part of every cache key: bump when the probe models are built differently."""


def definitive(error: str | None) -> bool:
    """Whether a load's answer is the runtime's alone, so it may be cached.

    It loaded, or the runtime has no kernel or schema for the node. Other failures (a lost device,
    the machine, the locale) are asked again next time.
    """
    return error is None or kernel_missing(error) or bool(_UNKNOWN_OP.search(error))


def kernel_missing(error: str) -> bool:
    """Whether a load error is the runtime saying it has no kernel for a node."""
    return bool(_MISSING.search(error))


def node_key(
    node: NodeProto, since: int, inputs: Sequence[str | None], outputs: Sequence[str | None]
) -> tuple:
    """What makes two nodes the same question for a kernel lookup.

    Operator, version, types, and the integer and string attributes (``Cast``'s ``to``, ``Resize``'s ``mode``).
    """
    attributes = tuple(
        sorted(
            (a.name, str(helper.get_attribute_value(a)))
            for a in node.attribute
            if a.type
            in (
                AttributeProto.INT,
                AttributeProto.INTS,
                AttributeProto.STRING,
                AttributeProto.STRINGS,
            )
        )
    )
    return (
        normalize_domain(node.domain),
        node.op_type,
        since,
        tuple(inputs),
        tuple(outputs),
        attributes,
    )


@dataclass
class ProbeNode:
    """One distinct probe model to ask about, and the nodes it answers for."""

    key: tuple
    """``node_key`` and the probe model's digest: the constants it embeds, its float and tensor
    attributes and its ranks make two nodes of one kind two questions."""
    model: ModelProto | None
    """None when it cannot be built (a type is unknown, the node holds a subgraph)."""
    why_not: str = ""
    nodes: set[tuple[tuple, bytes]] = field(default_factory=set)
    """(``node_key``, serialized node) of every node this probe answers for."""

    @classmethod
    def of(cls, base: tuple, node: NodeProto, built: ModelProto | str) -> ProbeNode:
        """The probe of one node, from ``lone_node``'s model or its reason for none."""
        nodes = {(base, node.SerializeToString(deterministic=True))}
        if isinstance(built, str):
            return cls(base, None, built, nodes)
        digest = hashlib.sha256(built.SerializeToString(deterministic=True)).hexdigest()
        return cls((*base, digest), built, "", nodes)


BOUNDARY_CAST = frozenset(
    getattr(onnx.TensorProto, name)
    for name in (
        "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
        "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
    )
    if hasattr(onnx.TensorProto, name)
)  # fmt: skip
"""Element types ONNX Runtime's JavaScript API has no tensors of: a session whose inputs or outputs
have them is refused ("unsupported data type: 16") although the same node loads inside a model.
A probe model keeps them off its boundary: float32 in and out, with Casts around the node."""
BOUNDARY = "onnxgate_boundary"
"""The name prefix of those Casts, so that a failure of theirs is not blamed on the node."""


def lone_node(
    node: NodeProto,
    source: ModelProto,
    protos: Mapping[str, TypeProto],
    weights: Mapping[str, onnx.TensorProto],
) -> ModelProto | str:
    """A model holding ``node`` alone with its types and ranks, or why none can be built.

    Inputs that are small weights stay weights (some kernels want them constant); the rest are
    graph inputs. Outputs are declared with their inferred types (by name alone where inference
    found none: a custom operator's). A tensor of a type in
    ``BOUNDARY_CAST`` crosses the boundary as float32 through a Cast.
    """
    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return "it holds a subgraph"
    inputs, initializers, casts = [], [], []
    reads = [n for n in dict.fromkeys(node.input) if n]
    for name in reads:
        tensor = weights.get(name)
        if tensor is not None and elements(tensor.dims) <= EMBED_LIMIT:
            initializers.append(tensor)
    wanted = [("input", n, inputs) for n in reads if n not in {t.name for t in initializers}]
    outputs: list[onnx.ValueInfoProto] = []
    wanted += [("output", n, outputs) for n in node.output if n]
    for side, name, into in wanted:
        proto = protos.get(name)
        if proto is None or proto.WhichOneof("value") is None:
            if side == "input":
                return f"the type of its input '{name}' is not known"
            into.append(onnx.ValueInfoProto(name=name))  # the runtime infers it, or says why not
            continue
        elem = proto.tensor_type.elem_type if proto.HasField("tensor_type") else 0
        if elem not in BOUNDARY_CAST:
            into.append(helper.make_value_info(name, proto))
            continue
        outer = f"{name}.{BOUNDARY}"
        into.append(helper.make_value_info(outer, _as_float(proto)))
        inward = side == "input"
        casts.append(
            helper.make_node(
                "Cast", [outer] if inward else [name], [name] if inward else [outer],
                name=f"{BOUNDARY}_{side}_{len(casts)}",
                to=elem if inward else onnx.TensorProto.FLOAT,
            )
        )  # fmt: skip
    before = [c for c in casts if c.name.startswith(f"{BOUNDARY}_input")]
    after = [c for c in casts if c not in before]
    graph = helper.make_graph(
        [*before, node, *after], "onnxgate kernel probe", inputs, outputs, initializers
    )
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = source.ir_version
    return model


def _as_float(proto: TypeProto) -> TypeProto:
    copy = TypeProto()
    copy.CopyFrom(proto)
    copy.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return copy


def elements(dims: Iterable[int]) -> int:
    """How many elements a tensor of these dimensions holds."""
    count = 1
    for d in dims:
        count *= d
    return count


@dataclass
class ProbedKernels:
    """A ``KernelOracle`` from one-node models a runtime was asked to load.

    Args:
        spec: the runtime (``onnxruntime-web==1.30.0``).
        providers: the providers probed (CPU always; WebGPU when it was asked for).
    """

    spec: RuntimeSpec
    providers: set[str]
    answers: dict[tuple, dict[str, str | None]] = field(default_factory=dict)
    """Node key -> provider -> None (loaded) or the runtime's error line."""
    unprobed: dict[tuple, str] = field(default_factory=dict)
    """Node key -> why no probe model was built for it."""
    driver_runs: int = 0
    """How many times the runtime was started (0 when every answer came from the cache)."""
    inlines_functions: bool = True
    """The runtime's answer already covers an operator run as its function body."""
    probed: dict[tuple[tuple, bytes], tuple] = field(default_factory=dict)
    """(``node_key``, serialized node) -> the key of the probe that answers for it."""

    def schema(self, op: str, domain: str, opset: int) -> NodeSchema | None:
        """The onnx package's schema; a custom domain's operator as the runtime may define it."""
        found = onnx_schema(op, domain, opset)
        if found is None and normalize_domain(domain) not in STANDARD_DOMAINS:
            return NodeSchema(op, normalize_domain(domain), opset, (), (), False, "runtime")
        return found

    def knows(self, op: str, domain: str) -> bool:
        """Asked per node instead (``coverage``)."""
        return True

    def runtime_attributes(self, op: str, domain: str, since_version: int) -> frozenset[str] | None:
        """Unknown: an attribute the runtime lacks shows as a failed load instead."""
        return None

    def cpu_float16_fallback(self, schema: NodeSchema, inputs: Sequence, outputs: Sequence) -> bool:
        """Not measured: the load succeeds either way."""
        return False

    def coverage(
        self,
        node: NodeProto,
        schema: NodeSchema,
        inputs: Sequence[str | None],
        outputs: Sequence[str | None],
    ) -> Coverage:
        """What the runtime said when the node's probe model was loaded on each provider."""
        base = node_key(node, schema.since_version, inputs, outputs)
        key = self.probed.get((base, node.SerializeToString(deterministic=True)), base)
        said = self.answers.get(key)
        if said is None:
            return Coverage(
                frozenset(self.providers), unchecked=self.unprobed.get(key, "it was not probed")
            )
        cpu = said.get(CPU)
        if cpu is not None and BOUNDARY in cpu:
            why = "the runtime cannot Cast its type from float32 at the probe's boundary"
            self.unprobed[key] = why
            return Coverage(frozenset(self.providers), unchecked=why)
        if cpu is not None and _UNKNOWN_OP.search(cpu):
            return Coverage(frozenset(), unknown=True, lines=dict(said))
        if cpu is not None and not kernel_missing(cpu):
            return Coverage(frozenset(), refused=cpu, lines=dict(said))
        have = frozenset(p for p, error in said.items() if error is None)
        return Coverage(have, lines={p: e for p, e in said.items() if e is not None})

    def explain(self, op: str, domain: str, coverage: Coverage, provider: str) -> str:
        """The runtime's own line for a provider that refused the node.

        With CPU fallback disabled a provider's refusal means it has no kernel for the node, or
        that it leaves the node to CPU by choice (WebGPU keeps small int64 shape computations on
        CPU); the load failure does not say which.
        """
        line = coverage.lines.get(provider) or coverage.lines.get(CPU) or ""
        if provider != CPU and provider in coverage.lines:
            return (
                f"with CPU fallback disabled {self.spec} refuses the node there (no kernel for it, "
                f"or the provider leaves it to CPU as it does shape computations): {line}"
            )
        return f"{self.spec} says: {line}"

    def note(self) -> str | None:
        """What was not probed, for OP007."""
        if not self.unprobed:
            return None
        reasons = sorted(set(self.unprobed.values()))
        more = f"; and {len(reasons) - 3} more reason(s)" if len(reasons) > 3 else ""
        return (
            f"{len(self.unprobed)} node kind(s) were not probed on {self.spec} "
            f"({'; '.join(reasons[:3])}{more}); their kernels were not checked"
        )

    def measure(
        self, probes: Iterable[ProbeNode], progress: Callable[[str], None] | None = None
    ) -> None:
        """Answer every probe: from the cache, else by asking the runtime once per provider."""
        todo: dict[str, dict[str, tuple[tuple, bytes]]] = {}
        for probe in probes:
            self.probed.update(dict.fromkeys(probe.nodes, probe.key))
            if probe.key in self.answers or probe.key in self.unprobed:
                continue
            if probe.model is None:
                self.unprobed[probe.key] = probe.why_not
                continue
            data = probe.model.SerializeToString(deterministic=True)
            digest = hashlib.sha256(data).hexdigest()
            said = self.answers.setdefault(probe.key, {})
            for provider in sorted(self.providers):
                cached = _read(self._cache(provider, digest))
                if cached is not None:
                    said[provider] = cached[0]
                else:
                    todo.setdefault(provider, {})[digest] = (probe.key, data)
        if not todo:
            return
        prober = runtime_of(self.spec).probe
        if prober is None:
            raise RuntimeError(f"{self.spec} has no probe hook")  # the caller checked
        if progress:
            count = sum(len(v) for v in todo.values())
            progress(f"probing {count} one-node model(s) on {self.spec}")
        providers = sorted(todo)
        models = {f"{p}/{d}": data for p in providers for d, (_, data) in todo[p].items()}
        canary = _canary().SerializeToString(deterministic=True)
        models.update({f"{p}/canary": canary for p in providers if p != CPU})
        self.driver_runs += 1
        answer = prober(self.spec, models, progress, backends=[BACKENDS[p] for p in providers])
        for provider, loads in zip(providers, answer["backends"], strict=True):
            # A provider that cannot run a float32 Relu is not there (no adapter): its refusals
            # would say nothing about its kernels.
            if loads.get(f"{provider}/canary"):
                raise ProviderUnavailable(
                    f"{self.spec} cannot use {provider} on this machine, so its kernels cannot be "
                    f"probed: a float32 Relu alone does not load there: {loads[f'{provider}/canary']}",
                    hint="Check on the CPU provider only, or on a machine (or browser) that offers "
                    "a WebGPU adapter.",
                )
        for provider, loads in zip(providers, answer["backends"], strict=True):
            for digest, (key, _) in todo[provider].items():
                error = loads[f"{provider}/{digest}"]
                self.answers[key][provider] = error
                if not definitive(error):
                    continue  # the machine's or the moment's failure: asked again next time
                try:
                    atomic_write_text(self._cache(provider, digest), json.dumps({"error": error}))
                except OSError as err:
                    log.warning("cannot cache a kernel probe of %s (%s)", self.spec, err)

    def _cache(self, provider: str, digest: str) -> Path:
        backend = provider.removesuffix("ExecutionProvider").lower()
        return (
            cache_dir()
            / "kernels"
            / f"{self.spec.package}-{self.spec.version}"
            / backend
            / f"v{PROBE_VERSION}-{digest}.json"
        )


def _canary() -> ModelProto:
    """Relu on float32: every provider that is really there has a kernel for it."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "canary", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _read(path: Path) -> tuple[str | None] | None:
    try:
        return (json.loads(path.read_text())["error"],)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def probes_kernels(spec: RuntimeSpec) -> bool:
    """Whether a runtime's kernels are measured by probing (it has a probe hook)."""
    return not spec.installed and runtime_of(spec).probe is not None


def probed_providers(requested: Iterable[str]) -> set[str]:
    """The providers to probe: CPU, and the requested ones probing knows how to isolate."""
    return {CPU} | {p for p in requested if p in BACKENDS}
