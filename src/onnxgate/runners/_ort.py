"""ONNX Runtime as a runner: providers with options, optimisation level, threads, config entries."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import onnx
import onnxruntime as ort  # noqa: TID251  (the ONNX Runtime adapter)

from onnxgate._native import native_step
from onnxgate._opslib import PACKAGES, require_file
from onnxgate.compat.providers import canonical, resolve
from onnxgate.errors import ConfigError, RunFailed, first_line
from onnxgate.model import LoadedModel, Signature, TensorSpec, constant_values
from onnxgate.runners import _session
from onnxgate.runners._base import Inference, RunnerInfo
from onnxgate.runners._refusal import refusal
from onnxgate.runners._tensorrt import TENSORRT, TensorrtFor
from onnxgate.settings import SessionSettings

log = logging.getLogger(__name__)

OptLevel = Literal["disable", "basic", "extended", "layout", "all"]
OPT_LEVELS: dict[str, ort.GraphOptimizationLevel] = {
    name: getattr(ort.GraphOptimizationLevel, _session.LEVEL_NAMES[name])
    for name in _session.levels()  # layout from 1.22 on
}


def check_session(settings: SessionSettings, *, save_optimized: Path | None = None) -> None:
    """Refuse settings the installed ONNX Runtime cannot take, before any session is made.

    What a ``SessionSettings`` cannot check itself, since it is validated where ONNX Runtime may
    not be installed: the level exists in this release, thread counts are within 4 per CPU of
    this machine, options are given only for providers that are asked for; and that the folder
    ``save_optimized`` writes into exists.

    Raises:
        ConfigError: naming the ``session.*`` setting (or ``save_optimized``).
    """
    wire = settings.wire()
    if wire["optimization"] not in OPT_LEVELS:
        raise ConfigError(
            f"session.opt_level {wire['optimization']!r} is not one of "
            f"{', '.join(OPT_LEVELS)} in ONNX Runtime {ort.__version__}.",
            field="session.opt_level",
        )
    limit = 4 * (os.cpu_count() or 1)
    for setting, threads in (
        ("session.threads", wire["intra_op_threads"]),
        ("session.inter_op_threads", wire["inter_op_threads"]),
    ):
        if not 0 <= threads <= limit:
            raise ConfigError(
                f"{setting} {threads} is outside 0..{limit} (4 per CPU on this machine); "
                "0 lets ONNX Runtime choose.",
                field=setting,
            )
    if save_optimized is not None and not save_optimized.parent.is_dir():
        raise ConfigError(
            f"save_optimized {save_optimized}: the folder {save_optimized.parent} does not exist.",
            field="save_optimized",
        )
    for spec in settings.ops_libraries:  # a package is found where the session is made
        if spec not in PACKAGES:
            require_file(Path(spec), spec)
    known = ort.get_all_providers()
    requested = resolved_providers(settings)
    for name in wire["provider_options"]:
        provider = canonical(name, known)
        if provider not in requested:
            raise ConfigError(
                f"options are given for {provider}, which is not among the providers "
                f"{', '.join(requested)}.",
                hint="Add it to session.providers, or drop its session.provider_options.",
                field="session.provider_options",
                related=["session.providers"],
            )


def label(settings: SessionSettings) -> str:
    """``all; CPUExecutionProvider``: the settings that change results, for reports."""
    parts = [settings.opt_level, ",".join(resolved_providers(settings))]
    if settings.threads:
        parts.append(f"threads={settings.threads}")
    return "; ".join(parts)


def resolved_providers(settings: SessionSettings | Sequence[str]) -> list[str]:
    """Full provider names of the installed ONNX Runtime, CPU appended.

    ``settings`` may be provider names alone (no inline options).
    """
    names = settings.wire()["providers"] if isinstance(settings, SessionSettings) else settings
    return resolve(names, ort.get_all_providers())


def resolved_wire(settings: SessionSettings, known: list[str] | None = None) -> dict[str, Any]:
    """``settings.wire()`` with full provider names (CPU appended) and options keyed by them.

    What the one settings applier (``_session.py``) takes, in this process or inside an
    isolated environment; ``known`` is that runtime's list of providers (default: the
    installed one's).
    """
    known = list(known or ort.get_all_providers())
    wire = settings.wire()
    providers = resolve(wire["providers"], known)
    return wire | {
        "providers": providers,
        "provider_options": {
            canonical(k, providers): dict(v) for k, v in wire["provider_options"].items()
        },
    }


def require_providers(settings: SessionSettings, *, what: str) -> None:
    """Refuse settings whose providers this process cannot run, before any session is made.

    The same check a session makes (``_session.provider_arguments``): a provider neither in
    this build nor brought by an installed plugin with a device here is refused, with
    ``what`` (the record the settings come from) named in the message.

    Raises:
        ProviderUnavailable: a provider is not usable here.
        RuntimeEnvError: a plugin's library cannot be loaded.
    """
    wire = resolved_wire(settings)
    try:
        _session.provider_arguments(wire)
    except _session.Refused as refused:
        err = refusal(
            refused.to_dict(), runtime=f"onnxruntime {ort.__version__}", providers=wire["providers"]
        )
        raise type(err)(
            f"{what} names {refused.provider or 'a provider'}: {err.message}", hint=err.hint
        ) from refused


def with_tensorrt(
    settings: SessionSettings, model: Path, derive: TensorrtFor | None
) -> SessionSettings:
    """``settings`` with the TensorRT options ``derive`` gives ``model`` under the user's ones.

    Only when TensorRT is among the providers and ``derive`` gives options for the model;
    otherwise ``settings`` unchanged (and ``derive`` is not called).
    """
    if derive is None or TENSORRT not in resolved_providers(settings):
        return settings
    derived = derive(model)
    if derived is None:
        return settings
    flat = settings.flat()
    given = {k: dict(v) for k, v in flat.provider_options.items()}
    key = next((k for k in given if k.lower().startswith("tensorrt")), TENSORRT)
    given[key] = dict(derived) | dict(given.get(key, {}))
    return flat.model_copy(update={"provider_options": given})


def available_providers() -> list[str]:
    """Providers the installed ONNX Runtime can run here.

    Those compiled in, plugin providers already registered with a device (``get_ep_devices``),
    and those an installed plugin package brings with a device here (``_session.
    plugin_providers``, which registers its library first: a fresh process lists none).
    """
    available = list(ort.get_available_providers())
    devices = getattr(ort, "get_ep_devices", None)
    plugged = [d.ep_name for d in devices()] if devices is not None else []
    return list(dict.fromkeys([*available, *plugged, *_session.plugin_providers()]))


def runtime_version() -> str:
    """The installed ONNX Runtime's version."""
    return ort.__version__


def _quiet_run() -> ort.RunOptions:
    """Run options that keep ONNX Runtime from logging a failure it also raises."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def create_session(
    proto: onnx.ModelProto,
    folder: Path,
    settings: SessionSettings,
    *,
    what: str,
    profile_prefix: Path | None = None,
    save_optimized: Path | None = None,
) -> ort.InferenceSession:
    """A session for a model held in memory whose external data lives in ``folder``.

    With ``profile_prefix``, the session profiles every run into a Chrome trace named
    ``<prefix>_<date>.json``, written by ``end_profiling()``; with ``save_optimized``, the model
    as ONNX Runtime optimised it is saved there.

    Raises:
        ProviderUnavailable: a requested provider is not in this build.
        ProviderFailed: a requested provider did not start (ONNX Runtime would run without it).
        SessionFailed: ONNX Runtime refused the model.
    """
    wire = resolved_wire(settings)
    try:
        with native_step("ORT session creation", what):
            return _session.create(
                proto.SerializeToString(),
                wire,
                config={_session.EXTERNAL_FOLDER: str(folder)},
                profile_prefix=None if profile_prefix is None else str(profile_prefix),
                optimized_model_path=None if save_optimized is None else str(save_optimized),
            )
    except _session.Refused as refused:
        raise refusal(
            refused.to_dict(),
            runtime=f"onnxruntime {ort.__version__}",
            what=what,
            providers=wire["providers"],
        ) from None


def _spec(arg: ort.NodeArg) -> TensorSpec:
    kind = arg.type or ""
    tensor = kind.startswith("tensor(")
    dtype = kind[7:-1] if tensor else kind
    dtype = {"float": "float32", "double": "float64"}.get(dtype, dtype)
    shape = tuple(d if isinstance(d, int | str) else None for d in arg.shape) if tensor else None
    return TensorSpec(name=arg.name, dtype=dtype or None, shape=shape, type=kind or None)


class OrtRunner:
    """ONNX Runtime on a model file, with the given session settings.

    Args:
        model: the model, loaded safely (its external data is read by ONNX Runtime from the
            model's folder).
        settings: providers, optimisation level, threads, config entries.
        name: label for reports; the default names the settings.
        profile_prefix: profile every run into a Chrome trace (see ``create_session``);
            ``end_profiling()`` writes it and returns its path.
        save_optimized: save the model as ONNX Runtime optimised it (this runner's session
            only: not ``sibling`` nor ``infer_all``).
        tensorrt: the TensorRT options a model's contract gives it
            (``onnxgate.contract_store.contract_tensorrt``), added under ``settings`` when
            TensorRT is among the providers; None adds none.

    Raises:
        ConfigError: settings the installed ONNX Runtime cannot take (``check_session``).
    """

    def __init__(
        self,
        model: LoadedModel,
        settings: SessionSettings | None = None,
        *,
        name: str | None = None,
        profile_prefix: Path | None = None,
        save_optimized: Path | None = None,
        tensorrt: TensorrtFor | None = None,
    ) -> None:
        self.model = model
        self.settings = settings or SessionSettings()
        check_session(self.settings, save_optimized=save_optimized)
        self.profile_prefix = profile_prefix
        self.save_optimized = save_optimized
        self.tensorrt = tensorrt
        self.name = name or f"onnxruntime[{label(self.settings)}]"
        self._where = model.path
        self._session: ort.InferenceSession | None = None
        self._outputs: list[str] = []

    def __enter__(self) -> Self:
        self._session = create_session(
            self.model.proto,
            self.model.path.parent,
            with_tensorrt(self.settings, self.model.path, self.tensorrt),
            what=str(self.model.path),
            profile_prefix=self.profile_prefix,
            save_optimized=self.save_optimized,
        )
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._run_options = _quiet_run()  # built once: not inside the timed region of infer()
        return self

    def __exit__(self, *exc: object) -> None:
        self._session = None

    @staticmethod
    def run_options() -> ort.RunOptions:
        """Fresh run options, for one run that may be cancelled (``options.terminate = True``).

        ONNX Runtime checks the flag between nodes, so a cancelled run stops within one node.
        """
        return _quiet_run()

    @property
    def session(self) -> ort.InferenceSession:
        """The live session (inside the ``with`` block)."""
        if self._session is None:
            raise RuntimeError(f"{self.name} is used outside its `with` block")
        return self._session

    def providers(self) -> list[str]:
        """The providers the session actually uses (ONNX Runtime silently appends CPU)."""
        return list(self.session.get_providers())

    def info(self) -> RunnerInfo:
        """ONNX Runtime's distribution and version, and the settings the session applied.

        Outside the ``with`` block the settings are the ones asked for.
        """
        from onnxgate.compat.runtime import installed_runtime

        found = installed_runtime()
        asked = resolved_wire(self.settings)
        settings = asked if self._session is None else _session.applied(self._session, asked)
        return RunnerInfo(
            name=self.name,
            runtime=found[0] if found else "onnxruntime",
            version=ort.__version__,
            settings=settings,
        )

    def end_profiling(self) -> Path:
        """Stop profiling and write the trace of every run so far; its path.

        Raises:
            RuntimeError: the runner was built without ``profile_prefix`` (a programming error).
        """
        if self.profile_prefix is None:
            raise RuntimeError(f"{self.name} was created without profile_prefix")
        return Path(self.session.end_profiling())

    def input_specs(self) -> Signature:
        """Inputs and outputs as the session reports them."""
        s = self.session
        return Signature(
            inputs=tuple(_spec(a) for a in s.get_inputs()),
            outputs=tuple(_spec(a) for a in s.get_outputs()),
        )

    def infer(self, feeds: Mapping[str, Any]) -> Inference:
        """Run once; raises RunFailed with ONNX Runtime's message when the run fails."""
        session, feeds = self.session, dict(feeds)
        with native_step("ORT inference", self._where):  # outside the timed region
            start = time.perf_counter_ns()
            try:
                values = session.run(None, feeds, self._run_options)
            except Exception as err:  # ORT raises its own exception types, not a shared base
                raise RunFailed(f"{self.name} failed on {self._where}: {first_line(err)}") from err
            elapsed = time.perf_counter_ns() - start
        return Inference(dict(zip(self._outputs, values, strict=True)), elapsed)

    @property
    def method(self) -> str:
        """How ``infer_all`` sees intermediate tensors."""
        return (
            f"ONNX Runtime ({label(self.settings)}) with every node output of the main graph "
            "exposed as a graph output (no fusion across an exposed tensor; the level's other "
            "rewrites still apply)"
        )

    def sibling(self, model: LoadedModel) -> OrtRunner:
        """ONNX Runtime with the same settings on another model (nothing saved)."""
        return OrtRunner(model, self.settings, name=self.name, tensorrt=self.tensorrt)

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every node output of the main graph, from a session where all of them are outputs."""
        exposed = expose_all(self.model.proto)
        # the optimised model saved, if asked, is the one the candidate ran, not this copy
        session = create_session(
            exposed, self.model.path.parent, self.settings, what=f"{self.model.path} (all outputs)"
        )
        names = [o.name for o in session.get_outputs()]
        try:
            with native_step("ORT inference", self.model.path):
                values = session.run(None, dict(feeds), _quiet_run())
        except Exception as err:  # ORT raises its own exception types, not a shared base
            raise RunFailed(
                f"{self.name} failed with every node output exposed: {first_line(err)}"
            ) from err
        return {**feeds, **dict(zip(names, values, strict=True))}


ORT_FORMAT = "session.load_model_format"
"""The session config entry that makes ONNX Runtime read a file as its ORT format."""


class OrtFormatRunner(OrtRunner):
    """ONNX Runtime on a model in its ORT format (``.ort``), as mobile and minimal builds load it.

    The file is opened by path with ``session.load_model_format = ORT``: ONNX Runtime reads the
    flatbuffer itself (onnxgate cannot parse it as ONNX). Only running it is offered: no
    localisation (``infer_all``), profiling or optimised copy.

    Raises:
        ConfigError: settings the installed ONNX Runtime cannot take (``check_session``).
    """

    def __init__(
        self, path: Path, settings: SessionSettings | None = None, *, name: str | None = None
    ) -> None:
        self.path = Path(path)
        self.settings = settings or SessionSettings()
        check_session(self.settings)
        self.profile_prefix = None
        self.save_optimized = None
        self.tensorrt = None
        self.name = name or f"onnxruntime ORT format[{label(self.settings)}]"
        self._where = self.path
        self._session = None
        self._outputs = []

    def __enter__(self) -> Self:
        wire = resolved_wire(self.settings)
        try:
            with native_step("ORT session creation", str(self.path)):
                self._session = _session.create(
                    os.fspath(self.path), wire, config={ORT_FORMAT: "ORT"}
                )
        except _session.Refused as refused:
            raise refusal(
                refused.to_dict(),
                runtime=f"onnxruntime {ort.__version__}",
                what=str(self.path),
                providers=wire["providers"],
            ) from None
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._run_options = _quiet_run()
        return self


def _complete(tp: onnx.TypeProto) -> bool:
    """Whether a type names its element types all the way down (ORT refuses element type 0)."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return getattr(tp, kind).elem_type != 0
    if kind == "sequence_type":
        return _complete(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return _complete(tp.optional_type.elem_type)
    if kind == "map_type":
        return _complete(tp.map_type.value_type)
    return False


def expose_all(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph outputs are every node output of the main graph but constant ones.

    Types come from the model's value_info or shape inference where known; ONNX Runtime infers the
    rest. Subgraph values (If/Loop bodies) are not reachable this way and are left out, and so are
    values computed from weights alone (``constant_values``): they are the same on every run.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    try:
        with native_step("onnx shape inference"):
            inferred = onnx.shape_inference.infer_shapes(copy).graph
        known = {v.name: v for v in (*inferred.value_info, *inferred.output)}
    except Exception:  # inference is a help for typing outputs, not a requirement
        log.debug("shape inference failed while exposing outputs", exc_info=True)
        known = {v.name: v for v in (*graph.value_info, *graph.output)}
    present = {o.name for o in graph.output} | constant_values(graph)
    for node in graph.node:
        for name in node.output:
            if name and name not in present:
                info = onnx.ValueInfoProto()
                if name in known and _complete(known[name].type):
                    info.CopyFrom(known[name])
                else:
                    info.name = name
                graph.output.append(info)
                present.add(name)
    return copy
