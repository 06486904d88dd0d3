"""Kernel coverage: would a runtime find a kernel for this node, on these providers?

ONNX Runtime picks a kernel for a node by (domain, op, provider), then by the version of the
operator schema in force at the model's opset (which must fall in the kernel's version range),
then by the types bound to the schema's type parameters. This module reproduces that lookup from
a runtime's own registry (``get_all_opkernel_def()``), so coverage is judged against the release
the model will meet, not the one installed here.

A node with no kernel can still run when its schema is defined as a function of other operators:
ONNX Runtime then inlines the function. ``NodeSchema.has_function`` records that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from onnx import NodeProto, defs

from onnxgate.compat.versions import DEFAULT_DOMAIN, normalize_domain

_ONNX_DOMAINS = {
    DEFAULT_DOMAIN: "",
    "ai.onnx.ml": "ai.onnx.ml",
    "ai.onnx.preview.training": "ai.onnx.preview.training",
}
VARIADIC = 2
OPEN_END = 2**31 - 1


def lookup_version(opset: int) -> int | None:
    """A model's opset version as onnx's schema lookups take it, or None when none can apply.

    The version is an int64 in the model, so a malformed one can be anything; onnx's
    ``get_schema`` takes a C++ ``int`` and raises pybind's TypeError ("incompatible function
    arguments") beyond 32 bits. Every version past the newest schema finds the newest one, so a
    larger version is clamped; below 1 no schema exists.
    """
    if not isinstance(opset, int) or opset < 1:
        return None
    return min(opset, OPEN_END)


@dataclass(frozen=True)
class Kernel:
    """One registered kernel: an operator version range and a binding of its type parameters."""

    op: str
    domain: str
    provider: str
    since: int
    until: int
    types: dict[str, frozenset[str]]

    def covers_version(self, version: int) -> bool:
        """Whether ONNX Runtime would pick this kernel for a node of this schema version.

        ONNX Runtime's rule (``KernelRegistry::VerifyKernelDef``): a kernel whose range is open
        (``[16, latest]``) serves only nodes whose schema version is exactly its start; a closed
        range serves any version inside it. So a kernel for RoiAlign-16 does not serve RoiAlign-22.
        """
        if self.since == version:
            return True
        return self.since < version <= self.until and self.until != OPEN_END

    def accepts(self, bindings: Sequence[tuple[str, str | None]]) -> bool:
        """Whether every known type bound to a constrained type parameter is allowed."""
        for param, actual in bindings:
            allowed = self.types.get(param)
            if allowed is not None and actual is not None and actual not in allowed:
                return False
        return True


@dataclass(frozen=True)
class NodeSchema:
    """The schema in force for a node: its version, formal parameters and function body."""

    op: str
    domain: str
    since_version: int
    inputs: tuple[tuple[str, int], ...]
    """(type string or type parameter, option) per formal input; option 2 is variadic."""
    outputs: tuple[tuple[str, int], ...]
    has_function: bool
    source: str
    deprecated: bool = False
    """``onnx`` (the onnx package's definitions) or ``runtime`` (the runtime's own registry)."""

    def bindings(
        self, inputs: Sequence[str | None], outputs: Sequence[str | None]
    ) -> list[tuple[str, str | None]]:
        """Pair each actual input and output type with the type parameter it binds."""
        return _bind(self.inputs, inputs) + _bind(self.outputs, outputs)


def _bind(
    formals: tuple[tuple[str, int], ...], actuals: Sequence[str | None]
) -> list[tuple[str, str | None]]:
    pairs = []
    for index, actual in enumerate(actuals):
        if not formals:
            break
        if index < len(formals):
            param, _ = formals[index]
        elif formals[-1][1] == VARIADIC:
            param = formals[-1][0]
        else:
            break
        pairs.append((param, actual))
    return pairs


@lru_cache(maxsize=4096)
def onnx_schema(op: str, domain: str, opset: int) -> NodeSchema | None:
    """The onnx package's schema of ``op`` in force at ``opset``, or None if it has none."""
    onnx_domain = _ONNX_DOMAINS.get(normalize_domain(domain))
    version = lookup_version(opset)
    if onnx_domain is None or version is None:
        return None
    try:
        schema = defs.get_schema(op, version, onnx_domain)
    except defs.SchemaError:
        return None
    has_function = bool(
        schema.has_function or getattr(schema, "has_context_dependent_function", False)
    )
    return NodeSchema(
        op=op,
        domain=normalize_domain(domain),
        since_version=schema.since_version,
        inputs=tuple((p.type_str, int(p.option.value)) for p in schema.inputs),
        outputs=tuple((p.type_str, int(p.option.value)) for p in schema.outputs),
        has_function=has_function,
        source="onnx",
        deprecated=bool(schema.deprecated),
    )


@dataclass(frozen=True)
class Coverage:
    """Which providers have a kernel for one node, and what the runtime said where none had."""

    providers: frozenset[str]
    """Providers with a kernel for the node's version, types and attributes."""
    lines: dict[str, str] = field(default_factory=dict)
    """Provider -> the runtime's own error line, where it was asked (probed runtimes)."""
    refused: str | None = None
    """The runtime refused the node for a reason other than a missing kernel (its line)."""
    unknown: bool = False
    """The runtime does not know the operator at all (a custom domain it has no schema for)."""
    unchecked: str | None = None
    """Why coverage of this node was not measured (it then counts as covered)."""


class KernelOracle(Protocol):
    """What the operator rules ask of a runtime's kernels.

    Answered from a registry read (``KernelTable``) or from one-node models the runtime was asked
    to load (``compat.probed.ProbedKernels``).
    """

    providers: set[str]
    """Providers whose kernels are known."""
    inlines_functions: bool
    """True when ``coverage`` already includes an operator run as its function body."""

    def schema(self, op: str, domain: str, opset: int) -> NodeSchema | None:
        """The schema the runtime holds the node to."""

    def knows(self, op: str, domain: str) -> bool:
        """Whether the runtime may have a kernel for the operator (else OP003)."""

    def runtime_attributes(self, op: str, domain: str, since_version: int) -> frozenset[str] | None:
        """Attribute names of the runtime's own schema, if known."""

    def cpu_float16_fallback(
        self,
        schema: NodeSchema,
        input_types: Sequence[str | None],
        output_types: Sequence[str | None],
    ) -> bool:
        """Whether CPU runs the float16 node in float32 (OP008)."""

    def coverage(
        self,
        node: NodeProto,
        schema: NodeSchema,
        inputs: Sequence[str | None],
        outputs: Sequence[str | None],
    ) -> Coverage:
        """Which providers have a kernel for this node."""

    def explain(self, op: str, domain: str, coverage: Coverage, provider: str) -> str:
        """The message tail for a provider without a kernel."""

    def note(self) -> str | None:
        """What was left unchecked (OP007), if anything."""


class KernelTable:
    """A runtime's kernel registry and schema registry, indexed for lookups (a ``KernelOracle``)."""

    inlines_functions = False

    def __init__(
        self,
        kernels: Sequence[Sequence],
        schemas: Sequence[Sequence] = (),
    ) -> None:
        self._kernels: dict[tuple[str, str], list[Kernel]] = defaultdict(list)
        self.providers: set[str] = set()
        for op, domain, provider, since, until, types in kernels:
            kernel = Kernel(
                op, normalize_domain(domain), provider, since, until,
                {name: frozenset(allowed) for name, allowed in types.items()},
            )  # fmt: skip
            self._kernels[(kernel.domain, op)].append(kernel)
            self.providers.add(provider)
        self._schemas: dict[tuple[str, str], list[tuple[int, tuple, tuple, frozenset[str]]]] = (
            defaultdict(list)
        )
        for op, domain, since, inputs, outputs, attributes in schemas:
            entry = (
                since,
                tuple(map(tuple, inputs)),
                tuple(map(tuple, outputs)),
                frozenset(attributes),
            )
            self._schemas[(normalize_domain(domain), op)].append(entry)
        self.domains = {domain for domain, _ in self._kernels} | {d for d, _ in self._schemas}

    def kernels(self, op: str, domain: str) -> list[Kernel]:
        """Every kernel registered for an operator, on any provider."""
        return self._kernels.get((normalize_domain(domain), op), [])

    def runtime_schema(self, op: str, domain: str, opset: int) -> NodeSchema | None:
        """The runtime's own schema of ``op`` in force at ``opset`` (contrib domains included)."""
        candidates = [
            s for s in self._schemas.get((normalize_domain(domain), op), []) if s[0] <= opset
        ]
        if not candidates:
            return None
        since, inputs, outputs, _ = max(candidates, key=lambda s: s[0])
        return NodeSchema(op, normalize_domain(domain), since, inputs, outputs, False, "runtime")

    def runtime_attributes(self, op: str, domain: str, since_version: int) -> frozenset[str] | None:
        """Attribute names the runtime's own schema of ``op``-``since_version`` declares, if known."""
        for since, _, _, attributes in self._schemas.get((normalize_domain(domain), op), []):
            if since == since_version:
                return attributes
        return None

    def cpu_float16_fallback(
        self,
        schema: NodeSchema,
        input_types: Sequence[str | None],
        output_types: Sequence[str | None],
    ) -> bool:
        """Whether the CPU provider runs the node in float32 instead of float16.

        ONNX Runtime's CPU provider inserts Cast nodes around a float16 node that has no float16
        kernel but has a float32 one (its ``InsertCastTransformer``).
        """
        half, full = "tensor(float16)", "tensor(float)"
        if half not in (*input_types, *output_types):
            return False
        widened_in = [full if t == half else t for t in input_types]
        widened_out = [full if t == half else t for t in output_types]
        return "CPUExecutionProvider" in self.providers_with_kernel(schema, widened_in, widened_out)

    def schema(self, op: str, domain: str, opset: int) -> NodeSchema | None:
        """The schema the runtime will hold the node to at ``opset``.

        The runtime resolves a node against its *own* schema registry, which can lag the onnx
        package installed here (onnx 1.23 defines Attention-25; ONNX Runtime 1.31 stops at
        Attention-24 and rejects its new attributes). So the runtime's version wins, described by
        the onnx package's definition of that same version where onnx has one (it carries
        function bodies and deprecation); operators the onnx package does not define (contrib
        domains) use the runtime's description alone.
        """
        runtime = self.runtime_schema(op, domain, opset)
        reference = onnx_schema(op, domain, opset)
        if runtime is None or reference is None:
            return reference or runtime
        if reference.since_version == runtime.since_version:
            return reference
        return onnx_schema(op, domain, runtime.since_version) or runtime

    def providers_with_kernel(
        self,
        schema: NodeSchema,
        input_types: Sequence[str | None],
        output_types: Sequence[str | None],
    ) -> set[str]:
        """Providers that register a kernel matching the node's schema version and types."""
        bindings = schema.bindings(input_types, output_types)
        return {
            k.provider
            for k in self.kernels(schema.op, schema.domain)
            if k.covers_version(schema.since_version) and k.accepts(bindings)
        }

    def versions_registered(self, op: str, domain: str) -> list[tuple[int, int]]:
        """Distinct version ranges with a kernel, for messages."""
        return sorted({(k.since, k.until) for k in self.kernels(op, domain)})

    def knows(self, op: str, domain: str) -> bool:
        """Whether any provider registers a kernel for the operator."""
        return bool(self.kernels(op, domain))

    def coverage(
        self,
        node: NodeProto,
        schema: NodeSchema,
        inputs: Sequence[str | None],
        outputs: Sequence[str | None],
    ) -> Coverage:
        """Providers whose registered kernels match the node's schema version and types."""
        return Coverage(frozenset(self.providers_with_kernel(schema, inputs, outputs)))

    def explain(self, op: str, domain: str, coverage: Coverage, provider: str) -> str:
        """The registered version ranges of the operator."""
        ranges = self.versions_registered(op, domain)
        shown = ", ".join(f"{a}-{b if b < OPEN_END else 'latest'}" for a, b in ranges) or "none"
        return f"kernel versions registered: {shown}"

    def note(self) -> str | None:
        """Nothing is left unchecked: the registry lists every kernel."""
        return None
