"""Execution provider names: short aliases, and which package brings each provider.

Users write ``cuda`` or ``CUDAExecutionProvider``; ONNX Runtime wants the full name, and a build
lists every provider it knows of (``get_all_providers``) apart from those it includes
(``get_available_providers``). When a provider is missing, the fix is almost always a different
wheel, so the message names it. The providers a registered runtime kind brings
(``runners/_openvino.py``) are named by their registration; the others are ONNX Runtime's own
builds, named here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from onnxgate.errors import ConfigError

if TYPE_CHECKING:
    from onnxgate.runners.runtimes import Provider

CPU = "CPUExecutionProvider"

_BUILDS: dict[str, str] = {
    "CUDAExecutionProvider": "onnxruntime-gpu (with CUDA and cuDNN libraries on the machine)",
    "TensorrtExecutionProvider": "onnxruntime-gpu (with the TensorRT libraries on the machine)",
    "NvTensorRTRTXExecutionProvider": "onnxruntime-gpu built with TensorRT-RTX",
    "DmlExecutionProvider": "onnxruntime-directml (Windows)",
    "QNNExecutionProvider": "onnxruntime-qnn",
    "MIGraphXExecutionProvider": "onnxruntime-migraphx (AMD ROCm)",
    "CoreMLExecutionProvider": "onnxruntime on macOS",
    "VitisAIExecutionProvider": "onnxruntime-vitisai",
    "CANNExecutionProvider": "onnxruntime-cann",
    "WebGpuExecutionProvider": "onnxruntime-webgpu",
}
"""The package (or build) of ONNX Runtime's own that includes each provider it names."""

__all__ = [
    "CPU",
    "canonical",
    "install_hint",
    "names",
    "parse_providers",
    "provided_by",
    "provider_packages",
    "registered_providers",
    "resolve",
    "short_name",
]


def registered_providers() -> tuple[Provider, ...]:
    """The providers the registered runtime kinds bring (``runners/runtimes.py``)."""
    # imported here: the runners package, which registers them, imports this module
    from onnxgate.runners.runtimes import providers

    return providers()


def provider_packages() -> dict[str, str]:
    """The package (or build) that includes each non-CPU provider, in the order lists show them.

    ONNX Runtime's own builds, with the providers registered runtime kinds bring, each placed
    after the provider its registration names (``Provider.listed_after``), else at the end.
    """
    rows = list(_BUILDS.items())
    for provider in registered_providers():
        after = [i + 1 for i, (name, _) in enumerate(rows) if name == provider.listed_after]
        rows.insert(after[0] if after else len(rows), (provider.name, provider.package))
    return dict(rows)


def names(values: Iterable[str] | str | None) -> list[str]:
    """Names from a list, or from comma-separated strings (``["cuda,cpu"]``)."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def parse_providers(
    values: Iterable[str] | str | None,
) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Provider names and their inline options, as ``--providers`` takes them.

    Items are comma-separated or repeated. ``NAME:KEY=VALUE`` names a provider and one of its
    options; a bare ``KEY=VALUE`` adds an option to the provider before it. So
    ``openvino:precision=FP32,num_of_threads=2,cpu`` is OpenVINO with two options, then CPU.

    Raises:
        ConfigError: an option with no provider before it, or an item that is not NAME,
            NAME:KEY=VALUE or KEY=VALUE.
    """
    providers: list[str] = []
    options: dict[str, dict[str, str]] = {}
    for item in names(values):
        name, colon, pair = item.partition(":")
        if not colon and "=" in item:
            if not providers:
                raise ConfigError(
                    f"--providers item {item!r} is an option with no provider before it.",
                    hint="Write NAME:KEY=VALUE, e.g. openvino:precision=FP32.",
                )
            name, pair = providers[-1], item
        elif colon:
            providers.append(name.strip())
        else:
            providers.append(item)
            continue
        key, eq, value = pair.partition("=")
        if not eq or not key.strip() or not name.strip():
            raise ConfigError(
                f"--providers item {item!r} is not NAME, NAME:KEY=VALUE or KEY=VALUE.",
                hint="e.g. --providers openvino:precision=FP32,num_of_threads=2,cpu",
            )
        options.setdefault(name.strip(), {})[key.strip()] = value.strip()
    return list(dict.fromkeys(providers)), options


def canonical(name: str, known: Iterable[str]) -> str:
    """The full provider name for ``name`` (``cuda`` → ``CUDAExecutionProvider``).

    Raises:
        ConfigError: no provider any build of the runtime knows has that name.
    """
    known = list(known)
    if name in known:
        return name
    aliases = {p.lower().removesuffix("executionprovider"): p for p in known}
    full = aliases.get(name.lower().removesuffix("executionprovider"))
    if full is None:
        raise ConfigError(
            f"provider {name!r} is not an ONNX Runtime execution provider.",
            hint=f"Known providers: {', '.join(known)}.",
        )
    return full


def resolve(requested: Iterable[str] | str | None, known: Iterable[str]) -> list[str]:
    """Full names in preference order, with CPU appended as ONNX Runtime does."""
    known = list(known)
    resolved = [canonical(name, known) for name in names(requested)]
    if CPU not in resolved:
        resolved.append(CPU)
    return list(dict.fromkeys(resolved))


def short_name(provider: str) -> str:
    """``openvino`` for ``OpenVINOExecutionProvider``: the alias users type."""
    return provider.removesuffix("ExecutionProvider").lower()


def provided_by(provider: str) -> str:
    """The package or build that includes a provider, in words."""
    return provider_packages().get(provider, "a build of ONNX Runtime that includes it")


def install_hint(provider: str) -> str:
    """What to install for a provider this build does not include."""
    package = provider_packages().get(provider)
    if package is None:
        return f"Use an ONNX Runtime build that includes {provider}."
    wheel = package.split(" ")[0]
    if wheel.startswith("onnxruntime-"):
        return f"Install {wheel} instead of (not beside) onnxruntime: the two wheels conflict."
    return f"Use {package}."
