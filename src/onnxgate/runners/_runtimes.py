"""The runner factory: which runtime a ``runtime`` string names, and the one place a runner opens.

Where a model runs (ONNX Runtime in this process, another release or package in its isolated
environment, a timing worker process) used to be chosen by each step that ran one. Now a runtime
kind is one ``Runtime`` record, registered once (``runners/__init__.py``): the distributions it
is recognised by in a ``runtime`` string (``installed``, ``onnxruntime==1.22.1``,
``onnxruntime-openvino==1.24.1``), what the compatibility probe must know of it (providers it
brings, providers whose kernel registry cannot be read), how to open a runner for a model, and
how to start a timing worker. ``open_runner`` and ``worker_command`` are the only places that
choose; steps pass what they hold, and per-run things (the contract's TensorRT options, the
samples an isolated runtime runs at once) in ``RunExtras``.

This module sits below ``compat`` (``_layers.py``), which reads the registered packages: it names
no runner class; each registration brings its own opener.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxgate.data import Sample
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel
from onnxgate.runners._base import Runner
from onnxgate.runners._tensorrt import TensorrtFor

_SPEC = re.compile(r"^\s*(?:(?P<pkg>[A-Za-z][\w.-]*)\s*==\s*)?(?P<ver>\d+\.\d+\.\d+)\s*$")


@dataclass(frozen=True)
class RuntimeSpec:
    """Which ONNX Runtime to ask: the installed one, or ``package==version``."""

    package: str = "onnxruntime"
    version: str | None = None

    @property
    def installed(self) -> bool:
        """Whether this names the runtime installed next to onnxgate."""
        return self.version is None

    def __str__(self) -> str:
        return "installed" if self.installed else f"{self.package}=={self.version}"

    @classmethod
    def parse(cls, text: str | None) -> RuntimeSpec:
        """Parse ``installed``, ``1.16.3`` or ``onnxruntime==1.16.3``.

        Raises:
            ConfigError: the text is not one of these forms or names a package no runtime
                registered.
        """
        if text is None or text.strip() in ("", "installed"):
            return cls()
        match = _SPEC.match(text)
        if not match:
            raise ConfigError(
                f"runtime {text!r} is not a runtime spec.",
                hint="Use 'installed', a full release such as 1.16.3, or onnxruntime==1.16.3 "
                "(major.minor.patch: the probe must know exactly which release it measured).",
            )
        package = (match["pkg"] or "onnxruntime").lower().replace("_", "-")
        if package not in packages():
            raise ConfigError(
                f"runtime package {package!r} is not an ONNX Runtime package.",
                hint=f"Use one of: {', '.join(packages())}.",
            )
        return cls(package, match["ver"])


@dataclass(frozen=True)
class RunExtras:
    """Per-run things a runner is opened with, beside its session settings.

    Built by ``onnxgate.contract_store.contract_extras`` wherever a step opens a model that may
    have a contract, so the contract's TensorRT options are never forgotten.
    """

    tensorrt: TensorrtFor | None = None
    """The TensorRT options a model's contract gives it (see ``runners/_tensorrt.py``)."""
    samples: Sequence[Sample] = ()
    """The samples a runner in another process runs at once when entered."""
    progress: Callable[[str], None] | None = None
    """Called with a line for slow steps (building an isolated environment)."""
    name: str | None = None
    """A label for reports instead of the runner's own."""
    profile_prefix: Path | None = None
    """Profile every run into a Chrome trace (ONNX Runtime in this process only)."""
    save_optimized: Path | None = None
    """Where ONNX Runtime in this process saves the model as it optimised it."""


Opener = Callable[[LoadedModel, Any, RuntimeSpec, RunExtras], Runner]
"""Opens a runner for a model: (model, session settings, runtime, extras)."""
WorkerCommand = Callable[[RuntimeSpec, dict[str, str]], list[str]]
"""The command of a timing worker on a runtime; edits the environment it is given."""


@dataclass(frozen=True)
class Runtime:
    """One kind of runtime, as registered with the factory."""

    name: str
    packages: tuple[str, ...]
    """Distributions a ``runtime`` string names it by (``package==X.Y.Z``)."""
    open: Opener
    worker: WorkerCommand
    providers: tuple[str, ...] = ()
    """Execution providers the packages bring beyond ONNX Runtime's default build."""
    no_kernel_registry: tuple[str, ...] = ()
    """Providers whose kernel registry crashes when read: the probe does not read it."""


_REGISTERED: list[Runtime] = []


def register(*runtimes: Runtime) -> None:
    """Add runtime kinds; a package two kinds claim is a programming error.

    Raises:
        ValueError: a package is registered twice.
    """
    for runtime in runtimes:
        taken = set(runtime.packages) & set(packages())
        if taken:
            raise ValueError(f"runtime {runtime.name}: {', '.join(sorted(taken))} registered twice")
        _REGISTERED.append(runtime)


def registered() -> tuple[Runtime, ...]:
    """Every runtime kind, in registration order."""
    return tuple(_REGISTERED)


def packages() -> tuple[str, ...]:
    """Every distribution a ``runtime`` string may name, in registration order."""
    return tuple(package for runtime in _REGISTERED for package in runtime.packages)


def no_kernel_registry() -> tuple[str, ...]:
    """Providers whose kernel registry the probe must not read."""
    return tuple(p for runtime in _REGISTERED for p in runtime.no_kernel_registry)


def runtime_of(spec: RuntimeSpec) -> Runtime:
    """The kind a spec names (the installed runtime is ONNX Runtime's package)."""
    return next(r for r in _REGISTERED if spec.package in r.packages)


def open_runner(
    model: LoadedModel,
    settings: Any = None,
    *,
    runtime: str | RuntimeSpec | None = "installed",
    extras: RunExtras | None = None,
) -> Runner:
    """A runner for ``model`` on a runtime, opened the way its kind registered.

    Args:
        model: the model to run.
        settings: the session settings the runner applies (ONNX Runtime's defaults when None),
            passed on unchanged.
        runtime: ``installed``, ``1.16.3``, ``onnxruntime==1.16.3``,
            ``onnxruntime-openvino==1.24.1`` (see ``RuntimeSpec``).
        extras: per-run things (``RunExtras``); build them with
            ``onnxgate.contract_store.contract_extras``.

    Raises:
        ConfigError: the runtime string names no registered runtime.
        InternalError: TensorRT is among the providers and ``extras`` carry no contract
            options (the caller forgot ``contract_extras``).
    """
    spec = runtime if isinstance(runtime, RuntimeSpec) else RuntimeSpec.parse(runtime)
    return runtime_of(spec).open(model, settings, spec, extras or RunExtras())


def worker_command(runtime: str | RuntimeSpec | None, env: dict[str, str]) -> list[str]:
    """The command of a timing worker on a runtime (``perf/_contest.py``); edits ``env``."""
    spec = runtime if isinstance(runtime, RuntimeSpec) else RuntimeSpec.parse(runtime)
    return runtime_of(spec).worker(spec, env)
