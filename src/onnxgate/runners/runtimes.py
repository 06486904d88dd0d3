"""The runner factory: which runtime a ``runtime`` string names, and the one place a runner opens.

Where a model runs (ONNX Runtime in this process, another release or package in its isolated
environment, a timing worker process) used to be chosen by each step that ran one. Now a runtime
kind is one ``Runtime`` record, registered once (``runners/__init__.py``): the distributions it
is recognised by in a ``runtime`` string (``installed``, ``onnxruntime==1.22.1``,
``onnxruntime-openvino==1.24.1``), the providers it brings (what messages say of them, whether
the probe may read their kernel registry), how to open a runner for a model, how to start a
timing worker, and how to run a script of onnxgate's inside it (the placement audit).
``open_runner``, ``worker_command`` and ``run_script`` are the only places that choose; steps pass
what they hold, and per-run things (the contract's TensorRT options, the samples an isolated
runtime runs at once) in ``RunExtras``.

This module sits below ``compat`` (``_layers.py``), which reads the registered packages and
providers: it names no runner class; each registration brings its own opener.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Script:
    """A script of onnxgate's that runs inside a runtime (the placement audit).

    In this process it is ``function(request, arrays)`` of ``module``; in another runtime's
    environment it is the module's file, run as ``python file request.json answer.json`` with
    ``arrays`` saved beside the request in an ``.npz`` named by the request's ``feeds`` key. So the
    module needs only what such an environment holds (the standard library, NumPy, the runtime).
    """

    module: str
    """The module, as imported here (``onnxgate.placement._assign``)."""
    function: str
    """Its function of ``(request, arrays)`` that returns the answer."""
    what: str
    """What it does, as errors name it (``the placement audit``)."""
    prefix: str
    """The prefix of the temporary folder its files are written in."""


@dataclass(frozen=True)
class Provider:
    """An execution provider a runtime kind brings beyond ONNX Runtime's default build."""

    name: str
    """As ONNX Runtime names it (``OpenVINOExecutionProvider``)."""
    package: str
    """The package or build that includes it, as messages name it (``compat.providers``)."""
    accelerator: bool = False
    """Whether it may run on an accelerator (doctor then checks the machine's GPU setup)."""
    kernel_registry: bool = True
    """False when its kernel registry crashes when read: the probe does not read it."""
    listed_after: str | None = None
    """The provider it follows in lists of providers (``compat.providers.provider_packages``);
    None: at the end."""
    isolated: str | None = None
    """The build (a ``RuntimeSpec`` text) that runs it in an isolated environment when the
    installed ONNX Runtime does not include it (``tune``'s candidates); None: none."""


Opener = Callable[[LoadedModel, Any, RuntimeSpec, RunExtras], Runner]
"""Opens a runner for a model: (model, session settings, runtime, extras)."""
WorkerCommand = Callable[[RuntimeSpec, dict[str, str]], list[str]]
"""The command of a timing worker on a runtime; edits the environment it is given."""
ScriptRunner = Callable[
    [Script, RuntimeSpec, dict[str, Any], Mapping[str, Any] | None, Callable[[str], None] | None],
    dict[str, Any],
]
"""Runs a script inside a runtime: (script, runtime, request, arrays, progress) -> its answer."""
Prober = Callable[..., dict[str, Any]]
"""Asks a runtime which models (label -> serialised model, or its file) load: (runtime, models,
progress, *, backends=[session settings, ...]) -> an answer shaped as
``compat.runtime.run_probe``'s (``version``, ``loads``, providers, ``kernels``, ``schemas``) plus
``backends``: one ``loads`` per session settings asked (``compat.probed`` probes kernels so)."""


@dataclass(frozen=True)
class Runtime:
    """One kind of runtime, as registered with the factory."""

    name: str
    packages: tuple[str, ...]
    """Distributions a ``runtime`` string names it by (``package==X.Y.Z``)."""
    open: Opener
    worker: WorkerCommand
    script: ScriptRunner
    providers: tuple[Provider, ...] = ()
    """Execution providers the packages bring beyond ONNX Runtime's default build."""
    probe: Prober | None = None
    """How ``compat.runtime`` probes a runtime that has no Python environment (ONNX Runtime's
    JavaScript packages); None: its probe script runs in the release's isolated environment."""
    native_libraries: bool = True
    """Whether its sessions can register custom operator libraries (shared libraries loaded
    into the process: not in a browser's WebAssembly, nor through onnxruntime-node's API)."""


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


def providers() -> tuple[Provider, ...]:
    """Every provider the registered kinds bring, in registration order."""
    return tuple(provider for runtime in _REGISTERED for provider in runtime.providers)


def isolated_build(provider: str) -> str | None:
    """The build that runs ``provider`` (a full name) in an isolated environment, if one does."""
    return next((p.isolated for p in providers() if p.name == provider and p.isolated), None)


def no_kernel_registry() -> tuple[str, ...]:
    """Providers whose kernel registry the probe must not read."""
    return tuple(p.name for p in providers() if not p.kernel_registry)


def runtime_of(spec: RuntimeSpec) -> Runtime:
    """The kind a spec names (the installed runtime is ONNX Runtime's package).

    Raises:
        ConfigError: no registered kind has the spec's package (a spec built by hand).
    """
    for runtime in _REGISTERED:
        if spec.package in runtime.packages:
            return runtime
    raise ConfigError(
        f"runtime package {spec.package!r} is not an ONNX Runtime package.",
        hint=f"Use one of: {', '.join(packages())}.",
    )


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
    if settings is not None:
        refuse_libraries(spec, settings.wire())
    return runtime_of(spec).open(model, settings, spec, extras or RunExtras())


def refuse_libraries(spec: RuntimeSpec, settings: Mapping[str, Any]) -> None:
    """Refuse custom operator libraries (``SessionSettings.wire()``) a runtime cannot load.

    Raises:
        ConfigError: naming the libraries and the runtime.
    """
    libraries = [str(lib) for lib in settings.get("ops_libraries") or ()]
    if not libraries or runtime_of(spec).native_libraries:
        return
    from onnxgate._words import setting

    raise ConfigError(
        f"{spec} cannot register the custom operator "
        f"librar{'ies' if len(libraries) > 1 else 'y'} {', '.join(libraries)}: ONNX Runtime's "
        "JavaScript packages load no native shared libraries.",
        hint="Run the model on a Python build of ONNX Runtime (the installed one, or "
        f"onnxruntime==X.Y.Z), which takes {setting('ops_libraries', libraries)}.",
    )


def worker_command(runtime: str | RuntimeSpec | None, env: dict[str, str]) -> list[str]:
    """The command of a timing worker on a runtime (``perf/_contest.py``); edits ``env``."""
    spec = runtime if isinstance(runtime, RuntimeSpec) else RuntimeSpec.parse(runtime)
    return runtime_of(spec).worker(spec, env)


def run_script(
    script: Script,
    request: dict[str, Any],
    arrays: Mapping[str, Any] | None = None,
    *,
    runtime: str | RuntimeSpec | None = "installed",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run a script of onnxgate's inside a runtime, where its kind runs it; return its answer.

    Args:
        script: the script (``Script``).
        request: its JSON request.
        arrays: NumPy arrays it reads (the feeds of a profiled run), or None.
        runtime: ``installed`` or another release or package (see ``RuntimeSpec``).
        progress: called with a line for slow steps (building an isolated environment).
    """
    spec = runtime if isinstance(runtime, RuntimeSpec) else RuntimeSpec.parse(runtime)
    refuse_libraries(spec, request.get("settings") or {})
    return runtime_of(spec).script(script, spec, request, arrays, progress)
