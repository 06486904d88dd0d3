"""The placement audit: which provider ran each node, and did any fall back."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from onnxgate.compat.providers import CPU, canonical
from onnxgate.compat.runtime import RuntimeSpec, installed_runtime, runtime_profile
from onnxgate.compat.versions import parse_release
from onnxgate.contract_store import contract_dims
from onnxgate.data import Sample, load_feeds, synthetic_samples, validate_feeds
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, Signature, load_model
from onnxgate.runners import Script, refusal, run_script
from onnxgate.settings import FeedSettings, Part, SessionSettings

log = logging.getLogger(__name__)

MEMCPY = frozenset({"MemcpyToHost", "MemcpyFromHost"})
"""Copies ONNX Runtime inserts between providers: not compute nodes."""

Method = Literal["auto", "assignment", "profiling"]

ASSIGNMENT_SINCE = "1.24"
"""First release that records the partition (1.23.2 does not, 1.24.4 does)."""

_DEFAULT_DOMAINS = ("", "ai.onnx")

AUDIT = Script("onnxgate.placement._assign", "assign", "the placement audit", "onnxgate-placement-")
"""``_assign.py``, run where the audited runtime runs (``runners.run_script``)."""


class PlacementConfig(Part):
    """Which session to audit, where, and what every node must run on."""

    session: SessionSettings = SessionSettings()
    """The session settings (providers in preference order, level, threads, config entries),
    applied by the same applier as every other session, here or in the isolated environment.
    Without providers: ``require``, else CPU."""
    require: str | None = None
    """A provider every compute node must be on (Memcpy nodes and ``allow_ops`` aside)."""
    allow_ops: tuple[str, ...] = ()
    """Op types allowed off the required provider (``Shape``, which ONNX Runtime keeps on CPU on
    purpose); ``com.microsoft:Gelu`` names one domain's op only."""
    runtime: str = "installed"
    """``installed`` or another release or package (``onnxruntime==1.20.1``,
    ``onnxruntime-openvino==1.24.1``), run in an isolated environment."""
    method: Method = "auto"
    """``assignment`` (the recorded partition; 1.24 and later), ``profiling`` (one profiled run
    on feeds; sees only the nodes that ran), or ``auto`` (assignment where the runtime has it)."""
    feeds: FeedSettings = FeedSettings()
    """Feeds of the profiled run (the first sample)."""


class NodePlacement(BaseModel):
    """One node of the optimised graph and the provider it was assigned to."""

    model_config = ConfigDict(extra="forbid")

    node: str
    op_type: str
    domain: str
    """The node's domain; empty when the profiling method cannot tell."""
    provider: str

    @property
    def qualified_op(self) -> str:
        """The op type, as ``domain:op_type`` outside the default ONNX domain."""
        if self.domain in _DEFAULT_DOMAINS:
            return self.op_type
        return f"{self.domain}:{self.op_type}"


class PlacementReport(BaseModel):
    """The answer of ``onnxgate placement``."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    model: str
    runtime: str
    method: str
    """``assignment`` (recorded by the session, nothing run) or ``profiling`` (one profiled run)."""
    requested: list[str]
    available: list[str]
    session_providers: list[str]
    """What the session reports using (ONNX Runtime appends CPU silently)."""
    settings: dict[str, Any] = {}
    """The session settings as the audited session applied them (``_session.applied``)."""
    required: str | None = None
    assignments: dict[str, int]
    """Node count per provider."""
    op_types: dict[str, dict[str, int]]
    """Per provider, node count per op type (``domain:op_type`` outside the ONNX domain)."""
    nodes: list[NodePlacement]
    fallback: list[NodePlacement]
    """Compute nodes not on the first requested provider (empty when that is CPU)."""
    memcpy: int = 0
    """Copies between providers that ONNX Runtime inserted."""
    violations: list[NodePlacement] = []
    """Compute nodes not on the required provider."""
    exempted: list[NodePlacement] = []
    """Compute nodes not on the required provider whose op type ``allow_ops`` exempts."""
    notes: list[str] = []


def _feeds(
    loaded: LoadedModel, feeds: FeedSettings, samples: Sequence[Sample] | None
) -> dict[str, Any]:
    """Feeds for the profiled run: given samples (the largest), a data file, or synthetic ones."""
    signature = Signature.from_graph(loaded.proto.graph)
    if samples and (feeds.inputs is not None or feeds.dims):
        raise ConfigError(
            "samples were given; feeds.inputs and feeds.dims cannot choose others.",
            field="feeds.inputs" if feeds.inputs is not None else "feeds.dims",
        )
    if samples:
        sample = max(samples, key=lambda s: sum(np.asarray(v).size for v in s.feeds.values()))
    elif feeds.inputs is not None:
        feeds.refuse_with_inputs()
        sample = load_feeds(feeds.inputs, signature=signature)[0]
    else:
        sample = synthetic_samples(
            signature,
            model=loaded.proto,
            dims=feeds.sizes(),
            ranges=feeds.value_ranges(),
            seed=feeds.seed,
            known=contract_dims(loaded.path),
        )[0]
    return validate_feeds(signature, sample.feeds, where=sample.label)


def _resolve_method(method: str, spec: RuntimeSpec) -> str:
    """``assignment`` or ``profiling``: decided here, so feeds are built only when needed."""
    if method != "auto":
        return method
    if spec.installed:
        from onnxgate.placement import _assign

        recordable = _assign.can_record()
    else:
        recordable = parse_release(spec.version or "") >= parse_release(ASSIGNMENT_SINCE)
    chosen = "assignment" if recordable else "profiling"
    log.info("placement method auto: %s on %s", chosen, spec)
    return chosen


def placement(
    model: str | Path | LoadedModel,
    config: PlacementConfig | None = None,
    *,
    samples: Sequence[Sample] | None = None,
    progress: Callable[[str], None] | None = None,
) -> PlacementReport:
    """Which provider each node was assigned to; the library function behind ``placement``.

    Args:
        model: the ONNX model.
        config: the session, the runtime, the required provider and the audit's method and feeds.
        samples: samples for the profiled run (the largest is used), such as a contract's golden
            samples; instead of ``config.feeds``.
        progress: called with a short message before slow steps.

    Raises:
        ConfigError: a level the runtime does not have (layout before 1.23), the assignment
            method before 1.24, or ``require`` not among the providers.
        ProviderUnavailable: a requested provider is not in the runtime's build (exit 3).
        ProviderFailed: a requested provider did not start (exit 3): nothing is placed silently
            on CPU in its stead.
        RunFailed: the runtime cannot create a session for the model or run it.
    """
    config = config or PlacementConfig()
    require = config.require
    session = config.session
    if not session.providers and require:
        session = session.model_copy(update={"providers": (require,)})
    from onnxgate.runners import check_session, resolved_wire  # imports ONNX Runtime

    check_session(session)
    spec = RuntimeSpec.parse(config.runtime)
    chosen = _resolve_method(config.method, spec)
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    if spec.installed:
        from onnxgate.placement import _assign

        known = _assign.ort.get_all_providers()
    else:
        known = runtime_profile(spec, progress=progress).all_providers
    settings = resolved_wire(session, known)
    requested = settings["providers"]
    required = canonical(require, known) if require else None
    if required and required not in requested:
        raise ConfigError(
            f"require {required} is not among the providers {', '.join(requested)}.",
            field="require",
            related=["session.providers"],
        )
    request = {"model": str(loaded.path), "settings": settings, "method": chosen}
    feeds = _feeds(loaded, config.feeds, samples) if chosen == "profiling" else None
    if progress:
        progress(f"placing {loaded.path.name} on {', '.join(requested)}")
    answer = run_script(AUDIT, request, feeds, runtime=spec, progress=progress)
    package = spec.package if not spec.installed else (installed_runtime() or ("onnxruntime",))[0]
    runtime_label = f"{package} {answer['version']}"
    error = answer.get("error")
    if error == "method":
        raise ConfigError(
            f"the assignment method needs ONNX Runtime {ASSIGNMENT_SINCE} or later; "
            f"{runtime_label} cannot record which provider each node was assigned to.",
            hint="Use method profiling (one profiled run on feeds), or a newer runtime.",
            field="method",
        )
    if error:
        raise refusal(answer, runtime=runtime_label, what=str(loaded.path), providers=requested)
    return _report(loaded, answer, requested, required, set(config.allow_ops), runtime_label)


def _report(
    loaded: LoadedModel,
    answer: dict[str, Any],
    requested: list[str],
    required: str | None,
    allowed: set[str],
    runtime_label: str,
) -> PlacementReport:
    nodes = [
        NodePlacement(node=n, op_type=o, domain=d, provider=p) for n, o, d, p in answer["nodes"]
    ]
    compute = [n for n in nodes if n.op_type not in MEMCPY]
    preferred = requested[0]
    fallback = [n for n in compute if n.provider != preferred] if preferred != CPU else []
    off = [n for n in compute if n.provider != required] if required else []
    exempted = [n for n in off if allowed & {n.op_type, n.qualified_op}]
    violations = [n for n in off if not allowed & {n.op_type, n.qualified_op}]
    op_types: dict[str, Counter[str]] = {}
    for n in nodes:
        op_types.setdefault(n.provider, Counter())[n.qualified_op] += 1
    if answer.get("notes"):  # a runtime that answers without a session says how it knows
        notes = list(answer["notes"])
    elif answer["method"] == "assignment":
        notes = [
            "nodes of the graph as ONNX Runtime partitioned it among providers (after basic "
            "optimisations); provider-specific rewrites made later, such as NCHWc layouts, are "
            "not shown"
        ]
    else:
        notes = [
            "from one profiled run: the nodes that ran, as optimised at the requested level, "
            "under their fused names, without their domain",
            "only the nodes that ran on these feeds are seen (an If branch not taken, a Loop "
            "body run zero times are not); the verdict covers only them",
        ]
    claimed = {n.provider for n in compute}
    idle = [p for p in requested if p != CPU and p not in claimed]
    if idle:
        notes.append(
            f"{', '.join(idle)} started but claimed no compute node: everything ran on the "
            "providers after it"
        )
    silently = [p for p in answer["session_providers"] if p not in requested]
    if silently:
        notes.append(f"the session also uses {', '.join(silently)}, which was not requested")
    return PlacementReport(
        passed=not violations,
        model=str(loaded.path),
        runtime=runtime_label,
        method=answer["method"],
        requested=requested,
        available=answer["available"],
        session_providers=answer["session_providers"],
        settings=answer.get("settings", {}),
        required=required,
        assignments=dict(Counter(n.provider for n in nodes)),
        op_types={p: dict(c.most_common()) for p, c in op_types.items()},
        nodes=nodes,
        fallback=fallback,
        memcpy=len(nodes) - len(compute),
        violations=violations,
        exempted=exempted,
        notes=notes,
    )
