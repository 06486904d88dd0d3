"""The one way session settings become an ONNX Runtime session, wherever a session is made.

Settings are the plain JSON mapping ``SessionSettings.wire()`` writes (providers, provider options,
optimisation level, threads, execution mode, arena, memory pattern, config entries). This module
applies them, creates the session and reads back what ONNX Runtime actually applied, and it does so
in every place onnxgate makes a session: the ONNX Runtime runner, the timing workers and the
placement audit in onnxgate's process, and the isolated runner, its timing worker and the
placement audit inside an environment that holds another release (``onnxruntime==1.16.3``,
``onnxruntime-openvino==1.24.1``). So the settings that were gated are the settings that run.

It imports only the standard library and ONNX Runtime (never onnxgate), because the scripts that
run inside an isolated environment import it as a sibling module. Refusals are ``Refused`` with a
``kind`` that the caller turns into its own error class.

Two ways a provider can fail are caught here rather than run silently on CPU:

- session creation that fails on a provider: the Python API would print "EP Error" and retry on
  CPU; ``enable_fallback=0`` makes it raise instead (1.20.1 and earlier ignore the argument and
  retry: the print is captured too, and the provider is then missing from the session);
- a provider whose factory fails (OpenVINO with ``precision=BF16`` on a CPU device): ONNX Runtime
  logs "Failed to create OpenVINOExecutionProvider" and carries on without it. The log goes to file
  descriptor 2 from C++, so it is captured during creation, and a requested provider missing from
  ``get_providers()`` is refused with ONNX Runtime's own words.

Plugin execution providers (ONNX Runtime 1.23 and later) are packages of their own
(``onnxruntime-ep-openvino``) whose shared library ONNX Runtime registers at run time; the
session then takes the provider for one of the devices the plugin offers
(``add_provider_for_devices``), not by name. ``PLUGINS`` lists them. A provider this build lacks
whose plugin package is installed is registered once per process and added for its device (the
option ``device_type`` picks it, CPU by default); a plugin that offers no such device here is
refused (``unavailable``), never left to ONNX Runtime, which would warn and run on CPU.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort  # noqa: TID251  (the settings applier: runs beside every session)

if __package__:
    from onnxgate.runners import _ortlog
else:  # imported by a script inside an isolated environment: _ortlog.py is in the same folder
    import _ortlog  # type: ignore[no-redef]

CPU = "CPUExecutionProvider"

LEVEL_NAMES = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}
"""Optimisation level names and ONNX Runtime's enum members (``layout`` exists from 1.23)."""

EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"
"""Where a model held in memory finds its external data."""

DEFAULTS: dict[str, Any] = {
    "providers": [],
    "provider_options": {},
    "optimization": "all",
    "intra_op_threads": 0,
    "inter_op_threads": 0,
    "parallel": False,
    "cpu_mem_arena": True,
    "mem_pattern": True,
    "config": {},
    "ops_libraries": [],
}
"""ONNX Runtime's own defaults, in the settings' shape."""


class Refused(Exception):
    """ONNX Runtime cannot do what the settings ask; ``kind`` says what kind of refusal.

    Kinds: ``unavailable`` (a provider is not in this build), ``level`` (no such optimisation level
    in this release), ``provider`` (a provider failed to start, so ONNX Runtime would run without
    it), ``library`` (a custom operator library cannot be loaded), ``session`` (the model is
    refused).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        provider: str | None = None,
        library: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.provider = provider
        self.library = library
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        """The refusal as a JSON answer of a script."""
        answer = {"error": self.kind, "message": self.message, "provider": self.provider}
        if self.library is not None:
            answer["library"] = self.library
        if self.hint is not None:
            answer["hint"] = self.hint
        return answer


def complete(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with ONNX Runtime's defaults for every key left out."""
    return {**DEFAULTS, **settings}


def levels() -> list[str]:
    """The optimisation level names this release has."""
    return [
        name for name, member in LEVEL_NAMES.items() if hasattr(ort.GraphOptimizationLevel, member)
    ]


def session_options(settings: Mapping[str, Any], *, log_severity: int = 3) -> Any:
    """The ``SessionOptions`` the settings describe.

    Raises:
        Refused: ``level`` when this release has no such optimisation level (1.22 and earlier
            read ``layout`` as ``all`` if given its number, so the name is checked here).
    """
    settings = complete(settings)
    level = settings["optimization"]
    member = LEVEL_NAMES.get(level)
    if member is None or not hasattr(ort.GraphOptimizationLevel, member):
        raise Refused(
            "level",
            f"onnxruntime {ort.__version__} has no optimisation level {level!r} "
            f"(it has {', '.join(levels())})",
        )
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, member)
    so.intra_op_num_threads = int(settings["intra_op_threads"])
    so.inter_op_num_threads = int(settings["inter_op_threads"])
    if settings["parallel"]:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.enable_cpu_mem_arena = bool(settings["cpu_mem_arena"])
    so.enable_mem_pattern = bool(settings["mem_pattern"])
    so.log_severity_level = log_severity  # failures reach the caller as exceptions
    for key, value in settings["config"].items():
        so.add_session_config_entry(str(key), str(value))
    for spec in settings["ops_libraries"]:
        register_library(so, str(spec))
    return so


EXTENSIONS = "onnxruntime-extensions"
"""The package whose library ``ops_libraries`` may name instead of a path."""


def library_file(spec: str) -> str:
    """The shared library a ``ops_libraries`` item names, in this environment.

    Raises:
        Refused: ``library`` when the named package is not installed here.
    """
    if spec != EXTENSIONS:
        return spec
    # the file get_library_path() names, found beside the package: importing it to ask takes
    # seconds (it imports transformers) in every process that makes a session
    found = importlib.util.find_spec("onnxruntime_extensions")
    for folder in (found.submodule_search_locations or ()) if found else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            library = os.path.join(folder, f"_extensions_pydll{suffix}")
            if os.path.isfile(library):
                return library
    raise Refused(
        "library",
        f"{EXTENSIONS} is not installed in the environment of onnxruntime {ort.__version__}; "
        "give the path of its library built for that release instead",
        library=spec,
    )


def register_library(so: Any, spec: str) -> None:
    """Register one custom operator library in session options.

    Raises:
        Refused: ``library`` when the file is missing or ONNX Runtime cannot load it (built for
            another platform, or against a newer ONNX Runtime API than this release has).
    """
    path = library_file(spec)
    try:
        so.register_custom_ops_library(path)
    except Exception as err:  # ORT raises its own exception types, not a shared base
        text = " ".join(str(err).split()) or type(err).__name__
        raise Refused(
            "library",
            f"cannot load the custom operator library {path}: {_after_source(text)}",
            library=spec,
        ) from err


@dataclass(frozen=True)
class Plugin:
    """A package that brings an execution provider to ONNX Runtime as a plugin library."""

    provider: str
    """The provider it brings, as ONNX Runtime names it."""
    module: str
    """Its Python module, whose ``get_library_path()`` names the library."""
    package: str
    """Its distribution, as messages name it."""
    device_option: str
    """The provider option that picks the device (``device_type``): it selects one of the
    plugin's devices and is not passed on (the device carries it)."""
    device_key: str
    """The key of the plugin's device metadata that holds that option's value (``ov_device``)."""
    lists: str
    """The hardware the plugin offers devices for, for the refusal when it offers none here."""
    instead: str
    """What else runs the provider, for that refusal's hint."""


PLUGINS = (
    Plugin(
        "OpenVINOExecutionProvider",
        "onnxruntime_ep_openvino",
        "onnxruntime-ep-openvino",
        device_option="device_type",
        device_key="ov_device",
        # ov_factory.cc, GetSupportedDevices: hardware whose vendor id is not 0x8086 is skipped
        lists="only Intel CPUs, GPUs and NPUs (PCI vendor id 0x8086)",
        instead="the isolated build that brings its own OpenVINO "
        "(runtime onnxruntime-openvino==1.24.1, say)",
    ),
)
"""Every plugin package onnxgate knows, one per provider."""

_LOADED: set[str] = set()
"""Providers whose plugin library this process registered (ONNX Runtime refuses a second time)."""


def plugin_for(provider: str) -> Plugin | None:
    """The installed plugin package that brings ``provider``, or None.

    None too when this release of ONNX Runtime loads no plugins (before 1.23).
    """
    if not hasattr(ort, "register_execution_provider_library"):
        return None
    for plugin in PLUGINS:
        if plugin.provider == provider and importlib.util.find_spec(plugin.module) is not None:
            return plugin
    return None


def plugin_version(plugin: Plugin) -> str:
    """The installed version of a plugin package."""
    try:
        return importlib.metadata.version(plugin.package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def load_plugin(plugin: Plugin) -> None:
    """Register a plugin's library with ONNX Runtime, once per process.

    Raises:
        Refused: ``library`` when the package names no library, or ONNX Runtime cannot load it
            (built against another ONNX Runtime API, say).
    """
    if plugin.provider in _LOADED:
        return
    try:
        path = importlib.import_module(plugin.module).get_library_path()
        ort.register_execution_provider_library(plugin.provider, path)
    except Exception as err:  # ORT raises its own exception types, not a shared base
        text = " ".join(str(err).split()) or type(err).__name__
        if "already registered" not in text:
            raise Refused(
                "library",
                f"{plugin.package} {plugin_version(plugin)}: onnxruntime {ort.__version__} "
                f"cannot load its {plugin.provider} library: {_after_source(text)}",
                library=plugin.package,
            ) from err
    _LOADED.add(plugin.provider)


def _device_name(device: Any) -> str:
    kind = device.device.type
    return str(getattr(kind, "name", kind))


def host_cpu() -> str:
    """The CPU as ONNX Runtime sees it: ``AMD (PCI vendor id 0x1022)``."""
    for device in ort.get_ep_devices():
        if device.ep_name == CPU:
            hardware = device.device
            return (
                f"{hardware.vendor or 'unknown vendor'} (PCI vendor id {hardware.vendor_id:#06x})"
            )
    return "unknown"


def plugin_devices(plugin: Plugin, options: Mapping[str, Any] | None = None) -> list[Any]:
    """The plugin's devices that ``options`` pick (its ``device_option``, CPU by default).

    The library is registered first (``load_plugin``). A value such as ``GPU.1`` matches the
    device whose metadata names it; ``GPU`` matches the first device of that type.

    Raises:
        Refused: ``library`` when the library cannot be loaded.
    """
    load_plugin(plugin)
    wanted = str((options or {}).get(plugin.device_option) or "CPU")
    offered = [d for d in ort.get_ep_devices() if d.ep_name == plugin.provider]
    named = [d for d in offered if dict(d.ep_metadata).get(plugin.device_key) == wanted]
    typed = [d for d in offered if _device_name(d) == wanted.upper()]
    return (named or typed)[:1]


def no_device(plugin: Plugin, options: Mapping[str, Any] | None = None) -> Refused:
    """The refusal of a plugin that offers no device for the options here."""
    wanted = str((options or {}).get(plugin.device_option) or "CPU")
    offered = [
        dict(d.ep_metadata).get(plugin.device_key) or _device_name(d)
        for d in ort.get_ep_devices()
        if d.ep_name == plugin.provider
    ]
    it_offers = f"it offers {', '.join(offered)}" if offered else "it offers no device at all"
    return Refused(
        "unavailable",
        f"{plugin.package} {plugin_version(plugin)} registered {plugin.provider} with "
        f"onnxruntime {ort.__version__}, but it offers no {wanted} device on this host "
        f"({it_offers}; the CPU is {host_cpu()}): the plugin lists {plugin.lists}, and ONNX "
        "Runtime would have run the model on CPUExecutionProvider instead",
        provider=plugin.provider,
        hint=f"Run {plugin.provider} on hardware the plugin lists, or through {plugin.instead}"
        + (f"; or pick a device it offers ({plugin.device_option}=...)." if offered else "."),
    )


def plugin_providers() -> list[str]:
    """Providers this build lacks that an installed plugin brings with a device here.

    A CPU device, by default; in ``PLUGINS`` order. They count as available.
    """
    found = []
    for plugin in PLUGINS:
        if plugin.provider in ort.get_available_providers():
            continue
        chosen = plugin_for(plugin.provider)
        try:
            if chosen is not None and plugin_devices(chosen):
                found.append(plugin.provider)
        except Refused:
            continue
    return found


def _plugged(providers: list[str], available: list[str]) -> dict[str, Plugin]:
    """The requested providers this build lacks whose plugin package is installed."""
    chosen = {p: plugin_for(p) for p in providers if p not in available}
    return {p: plugin for p, plugin in chosen.items() if plugin is not None}


def provider_arguments(settings: Mapping[str, Any]) -> tuple[list[str], list[dict[str, str]]]:
    """Providers (full names, CPU last) and their options, as ``InferenceSession`` takes them.

    A provider an installed plugin brings counts as available when the plugin offers the device
    its options pick (``add_devices`` adds it to the session).

    Raises:
        Refused: ``unavailable`` when a provider is not in this build, nor brought by an
            installed plugin with a device here; ``library`` when a plugin cannot be loaded.
    """
    settings = complete(settings)
    providers = list(dict.fromkeys([*settings["providers"], CPU]))
    given = settings["provider_options"]
    options = [{str(k): str(v) for k, v in given.get(p, {}).items()} for p in providers]
    available = ort.get_available_providers()
    plugged = _plugged(providers, available)
    for provider, option in zip(providers, options, strict=True):
        if provider in plugged and not plugin_devices(plugged[provider], option):
            raise no_device(plugged[provider], option)
    missing = [p for p in providers if p not in available and p not in plugged]
    if missing:
        raise Refused(
            "unavailable",
            f"{missing[0]} is not available in onnxruntime {ort.__version__} "
            f"(it has {', '.join(available)})",
            provider=missing[0],
        )
    return providers, options


def add_devices(so: Any, providers: list[str], options: list[dict[str, str]]) -> bool:
    """Add the providers to ``so`` by device when a plugin brings one of them; whether it did.

    ONNX Runtime takes a plugin's provider only for a device, and a session whose options hold
    providers by device takes none by name, so then every provider is added by device, in
    order, but CPU: ONNX Runtime appends it to every session itself (adding its device too is
    refused as registered twice). Call after ``provider_arguments`` has checked them.

    Raises:
        Refused: ``unavailable`` when a provider of this build offers no device.
    """
    plugged = _plugged(providers, ort.get_available_providers())
    if not plugged:
        return False
    for provider, option in zip(providers, options, strict=True):
        plugin = plugged.get(provider)
        if provider == CPU:
            continue
        if plugin is not None:
            devices = plugin_devices(plugin, option)
            option = {k: v for k, v in option.items() if k != plugin.device_option}
        else:
            devices = [d for d in ort.get_ep_devices() if d.ep_name == provider][:1]
        if not devices:
            raise Refused(
                "unavailable",
                f"{provider} offers no device to onnxruntime {ort.__version__}, so it cannot "
                f"run beside the plugin providers {', '.join(plugged)}",
                provider=provider,
            )
        so.add_provider_for_devices(devices, option)
    return True


def _why(lines: list[str], provider: str) -> str:
    """ONNX Runtime's own words for a provider that did not start: its error lines first.

    ``lines`` are cleaned (``_ortlog.clean``): an error line is the provider's reason, starting
    with ``[ProviderName]``.
    """
    short = provider.removesuffix("ExecutionProvider")
    errors = [line for line in lines if line.startswith("[")]
    mentions = [line for line in lines if short in line and line not in errors]
    chosen = list(dict.fromkeys(errors + mentions)) or lines[-2:]
    text = " | ".join(chosen)
    return text[:1200] if text else "ONNX Runtime gave no reason"


def _after_source(text: str) -> str:
    """An ONNX Runtime message without the C++ location and signature that may open it.

    ``/onnxruntime/.../x.cc:1053 std::shared_ptr<...> f(const A&, ...) Invalid option: foo``
    becomes ``Invalid option: foo``.
    """
    match = re.match(r"\S+\.(?:cc|cpp|h):\d+ ", text)
    if not match:
        return text
    depth, start = 0, text.find("(", match.end())
    for index in range(max(start, 0), len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if start >= 0 and depth == 0:
            return text[index + 1 :].strip() or text
    return text


def _failed_provider(text: str, providers: list[str]) -> str | None:
    """The provider whose factory raised, when session creation failed while making one.

    ONNX Runtime's Python binding creates each provider in ``CreateExecutionProviderFactoryInstance``;
    an error raised there (an unknown option, say) is the provider's, not the model's.
    """
    if "CreateExecutionProviderFactoryInstance" not in text:
        return None
    others = [p for p in providers if p != CPU]
    named = [p for p in others if p.removesuffix("ExecutionProvider").lower() in text.lower()]
    return (named or others or [None])[0]


def create(
    model: str | bytes,
    settings: Mapping[str, Any],
    *,
    config: Mapping[str, str] | None = None,
    profile_prefix: str | None = None,
    optimized_model_path: str | None = None,
    log_severity: int = 3,
) -> Any:
    """A session for a model file or serialised model, with the settings applied.

    Args:
        model: a path, or the model's bytes (then give its folder in ``config`` under
            ``EXTERNAL_FOLDER`` when it has external data).
        settings: as ``SessionSettings.wire()`` writes them; providers by full name.
        config: session config entries added for this session only (a recording switch, say).
        profile_prefix: profile every run into a Chrome trace with this prefix.
        optimized_model_path: save the model as ONNX Runtime optimised it.
        log_severity: the session logger's level (3: errors only).

    Raises:
        Refused: a provider is unavailable or failed to start, the level does not exist in this
            release, or the model is refused (``session``).
    """
    so = session_options(settings, log_severity=log_severity)
    providers, options = provider_arguments(settings)
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
        so.log_severity_level = 4  # a refused model logs "Could not write a profile"; it is raised
    if optimized_model_path is not None:
        so.optimized_model_filepath = optimized_model_path

    by_device = add_devices(so, providers, options)

    def build() -> Any:
        try:
            if by_device:  # the providers are in the session options, by device
                return ort.InferenceSession(model, so, enable_fallback=0)
            return ort.InferenceSession(
                model, so, providers=providers, provider_options=options, enable_fallback=0
            )
        except Exception as err:  # ORT raises its own exception types, not a shared base
            return err

    session, lines = _ortlog.captured(build, ort_only=True)
    if isinstance(session, Exception):
        text = " ".join(str(session).split()) or type(session).__name__
        failed = _failed_provider(text, providers)
        if failed is not None:
            raise Refused(
                "provider", f"{failed} did not start: {_after_source(text)}", provider=failed
            )
        raise Refused("session", text)
    used = session.get_providers()
    for provider in providers:
        if provider not in used:
            raise Refused(
                "provider",
                f"{provider} did not start, and ONNX Runtime would have run the model without it: "
                + _why(lines, provider),
                provider=provider,
            )
    return session


def _level_name(level: Any) -> str:
    for name, member in LEVEL_NAMES.items():
        if getattr(ort.GraphOptimizationLevel, member, None) == level:
            return name
    return str(level)


def applied(session: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as the session reports them: what actually ran, not what was asked.

    Providers and their options come from the session (ONNX Runtime fills in each provider's
    defaults); config entries are read back for the keys that were set; the custom operator
    libraries (left out when none) are the ones registered, since the session was made.
    """
    so = session.get_session_options()
    asked = complete(settings)
    options = session.get_provider_options() if hasattr(session, "get_provider_options") else {}
    libraries = {"ops_libraries": list(asked["ops_libraries"])} if asked["ops_libraries"] else {}
    return {
        "providers": list(session.get_providers()),
        "provider_options": {p: dict(o) for p, o in options.items()},
        "optimization": _level_name(so.graph_optimization_level),
        "intra_op_threads": so.intra_op_num_threads,
        "inter_op_threads": so.inter_op_num_threads,
        "parallel": so.execution_mode == ort.ExecutionMode.ORT_PARALLEL,
        "cpu_mem_arena": so.enable_cpu_mem_arena,
        "mem_pattern": so.enable_mem_pattern,
        "config": {k: so.get_session_config_entry(k) for k in asked["config"]},
    } | libraries
