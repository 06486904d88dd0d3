"""Is this machine ready to run ONNX Runtime the way the user wants? Facts, findings, fixes.

``doctor()`` gathers facts (``_facts``: ONNX Runtime asked in child processes, libraries found by
name, CPU and cgroup read from /proc and /sys) and judges them (``_diagnose``: a pure function of
the facts, so GPU machines are tested with made-up ones).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from onnxgate.compat.providers import CPU, canonical, parse_providers, provider_packages
from onnxgate.compat.runtime import RuntimeSpec
from onnxgate.doctor._diagnose import DoctorFinding, DoctorReport, diagnose, resolve_wanted
from onnxgate.doctor._facts import Facts, cpu_facts, gather_facts
from onnxgate.doctor._needs import NEEDS, GpuNeeds, gpu_needs
from onnxgate.doctor._render import render_text

log = logging.getLogger(__name__)


def doctor(
    providers: Iterable[str] | str | None = (),
    *,
    timeout: float = 300,
    runtime: str | RuntimeSpec | None = None,
    provider_options: Mapping[str, Mapping[str, str]] | None = None,
    ops_libraries: Sequence[str] = (),
) -> DoctorReport:
    """Check ONNX Runtime, its providers, GPU libraries, packages, CPU and threads on this machine.

    Args:
        providers: the providers that must work (``cuda``, ``TensorrtExecutionProvider``,
            ``openvino:precision=FP32``; a comma-separated string is split). CPU is always checked.
        timeout: seconds each child process (one per provider) may take.
        runtime: ask another release or package (``onnxruntime-openvino==1.24.1``) in its
            isolated environment instead of the installed one.
        provider_options: options per provider (short or full names), used by its probe; inline
            options in ``providers`` are added to them.
        ops_libraries: custom operator libraries (paths, or ``onnxruntime-extensions``) that
            must load here: each is identified (name, version, sha256) and registered in a
            one-node session; one that does not load is an error (OPS001) in ONNX Runtime's words.

    Returns:
        The report; ``passed`` is False when a wanted provider does not work.

    Raises:
        ConfigError: a provider name no build of ONNX Runtime knows.
        RuntimeEnvError: the isolated environment cannot be built.
    """
    spec = runtime if isinstance(runtime, RuntimeSpec) else RuntimeSpec.parse(runtime)
    names, inline = parse_providers(providers)
    given = {k: dict(v) for k, v in (provider_options or {}).items()}
    for name, pairs in inline.items():
        given.setdefault(name, {}).update(pairs)
    known = list(dict.fromkeys([*provider_packages(), CPU]))
    options = {canonical(k, known): v for k, v in given.items()}
    facts = gather_facts(
        timeout=timeout, runtime=spec, provider_options=options, ops_libraries=ops_libraries
    )
    report = diagnose(facts, names)
    log.info(
        "doctor: %s working of %s wanted; %d finding(s)",
        ", ".join(report.working) or "nothing",
        ", ".join(report.wanted),
        len(report.findings),
    )
    return report


__all__ = [
    "NEEDS",
    "DoctorFinding",
    "DoctorReport",
    "Facts",
    "GpuNeeds",
    "cpu_facts",
    "diagnose",
    "doctor",
    "gather_facts",
    "gpu_needs",
    "render_text",
    "resolve_wanted",
]
