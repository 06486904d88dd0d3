"""``check``: static findings about a model against a target runtime, in about a second."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import onnx
from onnx import ModelProto, TypeProto

from onnxgate._native import native_step
from onnxgate.check._functions import value_type_protos
from onnxgate.check._graph import (
    checker_findings,
    first_line,
    structure_findings,
    topologically_sorted,
)
from onnxgate.check._libraries import library_coverage
from onnxgate.check._report import RULES, CheckReport, Finding, Severity, finding
from onnxgate.check._runtime_rules import (
    kernel_probes,
    operator_findings,
    provider_findings,
    version_findings,
)
from onnxgate.compat.kernels import KernelOracle
from onnxgate.compat.probed import ProbedKernels, probed_providers, probes_kernels
from onnxgate.compat.providers import names, resolve
from onnxgate.compat.runtime import RuntimeProfile, RuntimeSpec, runtime_profile
from onnxgate.compat.versions import normalize_domain, opset_map, proto_domain
from onnxgate.errors import ConfigError
from onnxgate.model import (
    PROTOBUF_LIMIT,
    LoadedModel,
    Signature,
    iter_model_nodes,
    load_model,
    value_types,
)
from onnxgate.settings import OpsLibraries, Part

log = logging.getLogger(__name__)


class CheckConfig(Part):
    """The target ``check`` judges a model against, and which findings count."""

    runtime: str = "installed"
    """``installed``, or a release or package (``onnxruntime==1.16.3``) probed in an isolated
    environment."""
    providers: tuple[str, ...] = ()
    """Execution providers in preference order (CPU is appended, as the runtime does)."""
    ignore: tuple[str, ...] = ()
    """Finding codes to leave out (``SHP001``)."""
    fail_on: Literal["error", "warning", "info"] = "error"
    """The lowest severity that makes ``passed`` false."""
    ops_libraries: OpsLibraries = ()
    """Custom operator libraries sessions register (paths, made absolute, or
    ``onnxruntime-extensions``): the custom operators they provide are not OP003."""
    observed_outputs: dict[str, tuple[int | str, ...]] = {}
    """Output shapes the model was seen to produce (its contract's golden outputs, where they
    contradict the declaration), judged against the declared ones (SHP003). check never runs
    the model: its caller passes what was observed (``contract.observed_outputs``)."""


def _infer(model: ModelProto, source: Path) -> tuple[ModelProto, Finding | None]:
    """Shape inference in strict mode for the finding, then lenient for types if strict failed."""
    try:
        with native_step("onnx shape inference", source):
            return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True), None
    except Exception as err:  # InferenceError, ValidationError and C++ errors alike
        problem = finding("STR002", f"shape inference: {first_line(err)}")
    try:
        with native_step("onnx shape inference", source):
            return onnx.shape_inference.infer_shapes(model), problem
    except Exception:  # lenient inference can still fail on a broken graph; keep declared types
        return model, problem


def as_runtime_sees_it(model: ModelProto, profile: RuntimeProfile) -> ModelProto:
    """The model in the form ONNX Runtime works on before it infers shapes.

    Two differences matter for inference: the runtime fills in a missing opset import for a domain
    in its registry (VER008), and it turns sparse initializers into dense ones. Without them onnx's
    inference reports failures the runtime never has. Returns the model itself when nothing differs.
    """
    if not model.opset_import:
        return model
    imported = set(opset_map(model.opset_import))
    latest: dict[str, int] = {}
    for _, domain, since, *_ in profile.schemas:
        key = normalize_domain(domain)
        latest[key] = max(since, latest.get(key, 0))
    used = {normalize_domain(n.domain) for n in iter_model_nodes(model)}
    missing = sorted(d for d in used - imported if d in latest)
    sparse = list(model.graph.sparse_initializer)
    if not missing and not sparse:
        return model
    copy = ModelProto()
    copy.CopyFrom(model)
    for domain in missing:
        copy.opset_import.append(onnx.helper.make_opsetid(proto_domain(domain), latest[domain]))
    declared = {v.name for v in copy.graph.input}
    for tensor in sparse:
        # Inference needs the dense type and shape, not the values: declare it as a typed input.
        if tensor.values.name not in declared:
            copy.graph.input.append(
                onnx.helper.make_tensor_value_info(
                    tensor.values.name, tensor.values.data_type, list(tensor.dims)
                )
            )
    del copy.graph.sparse_initializer[:]
    return copy


def shape_findings(model: ModelProto) -> list[Finding]:
    """SHP001 and SHP002 over the main graph's real inputs."""
    found = []
    for spec in Signature.from_graph(model.graph).inputs:
        if spec.type is None or not spec.type.startswith("tensor("):
            continue
        if spec.shape is None:
            found.append(
                finding("SHP002", f"input '{spec.name}' has no declared shape", tensor=spec.name)
            )
        elif len(spec.shape) >= 2 and isinstance(spec.shape[0], int):
            found.append(
                finding(
                    "SHP001",
                    f"input '{spec.name}' has a fixed first axis of {spec.shape[0]} (shape {list(spec.shape)})",
                    tensor=spec.name,
                )
            )
    return found


def observed_findings(
    model: ModelProto, observed: Mapping[str, Sequence[int | str]]
) -> list[Finding]:
    """SHP003: an output whose declared shape differs from the shape the model was seen to produce.

    Consumers that trust the declaration (a Triton config, a client's buffers) then disagree
    with what the model returns at run time; ONNX Runtime itself only logs it.
    """
    found = []
    for spec in Signature.from_graph(model.graph).outputs:
        shape = observed.get(spec.name)
        if shape is None or spec.shape is None or tuple(spec.shape) == tuple(shape):
            continue
        found.append(
            finding(
                "SHP003",
                f"output '{spec.name}' is declared {_shown(spec.shape)} but the model produces "
                f"{_shown(shape)} (its contract's golden outputs)",
                tensor=spec.name,
            )
        )
    return found


def _shown(shape: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None or d == "" else str(d) for d in shape) + "]"


def file_findings(loaded: LoadedModel) -> list[Finding]:
    """EXT001 and SIZ001."""
    found = []
    if loaded.external_data:
        files = loaded.external_files
        listing = ", ".join(f"{name} ({size} bytes)" for name, size in files.items())
        found.append(
            finding(
                "EXT001",
                f"{len(loaded.external_data)} tensor(s) read from {len(files)} file(s): {listing}",
            )
        )
    if loaded.size_bytes > 0.75 * PROTOBUF_LIMIT:
        found.append(finding("SIZ001", f"the model file is {loaded.size_bytes / 2**30:.2f} GiB"))
    return found


def resolve_providers(profile: RuntimeProfile, providers: Iterable[str] | None) -> list[str]:
    """The providers a session would use, in order, with CPU appended as ONNX Runtime does.

    Raises:
        ConfigError: a name is not a provider any ONNX Runtime build knows.
    """
    return resolve(providers, profile.all_providers)


def kernel_oracle(
    profile: RuntimeProfile,
    model: ModelProto,
    providers: list[str],
    types: dict[str, str | None],
    protos: Mapping[str, TypeProto],
    progress: Callable[[str], None] | None = None,
    path: Path | None = None,
) -> KernelOracle | None:
    """What the rules ask about kernels.

    The release's registry, or (for a runtime that exposes none but can be asked, ONNX Runtime's JavaScript packages) one-node models of this model's
    node kinds loaded on each requested provider; None when neither is possible (OP007).

    Raises:
        ProviderUnavailable: a requested provider cannot be probed here (WebGPU with no adapter).
        RuntimeEnvError: the runtime cannot be installed or started.
    """
    table = profile.kernel_table()
    spec = RuntimeSpec(profile.package, profile.version)
    if table is not None or not probes_kernels(spec):
        return table
    oracle = ProbedKernels(spec, probed_providers(providers))
    oracle.measure(kernel_probes(model, oracle, types, protos, path), progress)
    return oracle


def check_model(
    model: str | os.PathLike[str] | LoadedModel,
    config: CheckConfig | None = None,
    *,
    profile: RuntimeProfile | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Statically judge whether a model will load and run on a target runtime.

    Args:
        model: path of the ``.onnx`` file, or a model already loaded with :func:`load_model`.
        config: the target runtime and providers, codes to ignore, the failing severity.
        profile: the target runtime's profile obtained earlier, instead of ``config.runtime``.
        progress: called with a line for each slow step (environment creation, probing).

    Raises:
        ModelLoadError: the model cannot be read. UnsafeModelError: it is unsafe to read.
        ConfigError: an unknown provider or finding code, or a library file that is not there.
        RuntimeEnvError: the target runtime cannot be installed or probed, or cannot load a
            custom operator library. ExtraMissing: onnxruntime-extensions is named but not
            installed. InternalError: onnxgate's own code failed (a bug, exit
            4), never reported as a finding.
    """
    config = config or CheckConfig()
    providers, ignore = names(list(config.providers)), names(list(config.ignore))
    fail_on = config.fail_on
    unknown = [code for code in ignore if code not in RULES]
    if unknown:
        raise ConfigError(
            f"ignore names unknown finding code(s) {', '.join(unknown)}.",
            hint="See docs/checks.md for the codes.",
            field="ignore",
        )
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    if profile is None:
        profile = runtime_profile(RuntimeSpec.parse(config.runtime), progress=progress)
    chosen = resolve_providers(profile, providers)
    proto = loaded.proto
    structure = structure_findings(proto)
    unsorted = any(f.code == "STR003" for f in structure)
    seen = as_runtime_sees_it(proto, profile)
    inferred, inference_problem = _infer(
        topologically_sorted(seen) if unsorted else seen, loaded.path
    )
    types, protos = value_types(inferred), value_type_protos(inferred)
    table = kernel_oracle(profile, seen, chosen, types, protos, progress, loaded.path)
    libraries = (
        library_coverage(seen, config.ops_libraries, profile, table, protos, progress)
        if config.ops_libraries
        else None
    )
    findings = [
        *checker_findings(loaded),
        *([inference_problem] if inference_problem else []),
        *structure,
        *version_findings(proto, profile),
        *provider_findings(profile, table, chosen),
        *operator_findings(seen, profile, table, chosen, types, protos, libraries),
        *shape_findings(proto),
        *observed_findings(proto, config.observed_outputs),
        *file_findings(loaded),
    ]
    skip = set(ignore)
    findings = [f for f in findings if f.code not in skip]
    report = CheckReport.build(
        str(loaded.path), profile.label, chosen, findings, fail_on=Severity(fail_on)
    )
    log.info("checked %s against %s: %s", loaded.path, profile.label, report.counts)
    return report
