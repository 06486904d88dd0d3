"""Which machine a measurement belongs to: tuned settings are only valid where they were tuned.

A thread count that wins on a 2-core VM loses on a 32-core server, and a new ONNX Runtime release
may change which kernels run. So tuned settings are filed under a fingerprint of the CPU model,
the CPUs this process may use (affinity and cgroup quota, not the host's count), the ONNX Runtime
version and the execution providers, and are refused elsewhere.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from pathlib import Path

from onnxgate._cgroup import usable_cpus
from onnxgate.contract_store import Machine

__all__ = ["cpu_model", "fingerprint", "usable_cpus"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def fingerprint(providers: Sequence[str] | None = None, *, runtime: str | None = None) -> Machine:
    """This machine as tuned settings are filed: CPU, usable cores, ONNX Runtime, providers.

    Args:
        providers: the providers the settings are for (resolved names, CPU last); the ones
            requested by default, i.e. CPU only.
        runtime: the version of the ONNX Runtime build the settings are for (an isolated
            build's, ``1.24.1``); None: the installed one's.
    """
    from onnxgate.runners import resolved_providers, runtime_version  # imports ONNX Runtime

    resolved = resolved_providers(list(providers or ()))
    cpu, cores, runtime = cpu_model(), usable_cpus(), runtime or runtime_version()
    text = "\n".join([cpu, str(cores), runtime, *resolved])
    return Machine(
        id=hashlib.sha256(text.encode()).hexdigest()[:10],
        cpu=cpu,
        cores=cores,
        runtime=runtime,
        providers=resolved,
    )
