"""Is this machine ready to run ONNX Runtime the way the user wants? Facts, findings, fixes.

``doctor()`` gathers facts (``_facts``: ONNX Runtime asked in child processes, libraries found by
name, CPU and cgroup read from /proc and /sys) and judges them (``_diagnose``: a pure function of
the facts, so GPU machines are tested with made-up ones).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from onnxgate.doctor._diagnose import DoctorFinding, DoctorReport, diagnose, resolve_wanted
from onnxgate.doctor._facts import Facts, gather_facts
from onnxgate.doctor._needs import NEEDS, GpuNeeds, gpu_needs

log = logging.getLogger(__name__)


def doctor(providers: Iterable[str] | str | None = (), *, timeout: float = 300) -> DoctorReport:
    """Check ONNX Runtime, its providers, GPU libraries, packages, CPU and threads on this machine.

    Args:
        providers: the providers that must work (``cuda``, ``TensorrtExecutionProvider``; a
            comma-separated string is split). CPU is always checked.
        timeout: seconds each child process (one per provider) may take.

    Returns:
        The report; ``passed`` is False when a wanted provider does not work.

    Raises:
        ConfigError: a provider name no build of ONNX Runtime knows.
    """
    facts = gather_facts(timeout=timeout)
    report = diagnose(facts, providers)
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
    "diagnose",
    "doctor",
    "gather_facts",
    "gpu_needs",
    "resolve_wanted",
]
