"""ONNX Runtime as a runner: providers with options, optimisation level, threads, config entries."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import onnx
import onnxruntime as ort  # noqa: TID251  (the ONNX Runtime adapter)

from onnxgate._native import native_step
from onnxgate.compat.providers import canonical, parse_providers, resolve
from onnxgate.errors import ConfigError, RunFailed, first_line
from onnxgate.model import LoadedModel, Signature, TensorSpec, constant_values
from onnxgate.runners import _session
from onnxgate.runners._base import Inference, RunnerInfo
from onnxgate.runners._refusal import refusal
from onnxgate.runners._tensorrt import TENSORRT, TensorrtFor

if TYPE_CHECKING:
    from onnxgate.settings import SessionSettings

log = logging.getLogger(__name__)

OptLevel = Literal["disable", "basic", "extended", "layout", "all"]
OPT_LEVELS: dict[str, ort.GraphOptimizationLevel] = {
    name: getattr(ort.GraphOptimizationLevel, _session.LEVEL_NAMES[name])
    for name in _session.levels()  # layout from 1.22 on
}


@dataclass(frozen=True)
class OrtOptions:
    """How to build an ONNX Runtime session. The defaults are ONNX Runtime's own."""

    providers: tuple[str, ...] = ()
    """Providers in preference order (``cuda`` or ``CUDAExecutionProvider``); CPU is appended."""
    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Options per provider, e.g. ``{"CUDAExecutionProvider": {"device_id": "1"}}``."""
    optimization: str = "all"
    """Graph optimisation level: disable, basic, extended, layout or all."""
    intra_op_threads: int = 0
    """Threads inside an operator; 0 lets ONNX Runtime choose (one per physical core)."""
    inter_op_threads: int = 0
    """Threads across operators (parallel execution mode only); 0 lets ONNX Runtime choose."""
    parallel: bool = False
    """Execute independent branches in parallel instead of sequentially."""
    config: Mapping[str, str] = field(default_factory=dict)
    """Session config entries (``session.intra_op.allow_spinning`` → ``0``)."""
    cpu_mem_arena: bool = True
    """ONNX Runtime's CPU memory arena (pre-allocated, grown in chunks)."""
    mem_pattern: bool = True
    """Memory pattern planning: allocations of the first run reused by later runs."""
    optimized_model_path: Path | None = None
    """Where to save the model as ONNX Runtime optimised it."""

    @classmethod
    def from_session(cls, session: SessionSettings, **overrides: Any) -> OrtOptions:
        """The options a ``SessionSettings`` describes; ``overrides`` replace fields of them.

        Raises:
            ConfigError: a provider, level or thread count ONNX Runtime would refuse.
        """
        names, inline = parse_providers(list(session.providers))
        options = {name: dict(pairs) for name, pairs in inline.items()}
        for provider, pairs in session.provider_options.items():
            options.setdefault(provider, {}).update(pairs)
        fields: dict[str, Any] = {
            "providers": tuple(names),
            "provider_options": options,
            "optimization": session.opt_level,
            "intra_op_threads": session.threads,
            "inter_op_threads": session.inter_op_threads,
            "parallel": session.parallel,
            "cpu_mem_arena": session.cpu_mem_arena,
            "config": dict(session.session_config),
        }
        return cls(**(fields | overrides))

    def __post_init__(self) -> None:
        if self.optimization not in OPT_LEVELS:
            raise ConfigError(
                f"session.opt_level {self.optimization!r} is not one of "
                f"{', '.join(OPT_LEVELS)} in ONNX Runtime {ort.__version__}.",
                field="session.opt_level",
            )
        limit = 4 * (os.cpu_count() or 1)
        for setting, threads in (
            ("session.threads", self.intra_op_threads),
            ("session.inter_op_threads", self.inter_op_threads),
        ):
            if not 0 <= threads <= limit:
                raise ConfigError(
                    f"{setting} {threads} is outside 0..{limit} (4 per CPU on this machine); "
                    "0 lets ONNX Runtime choose.",
                    field=setting,
                )
        if self.optimized_model_path is not None and not self.optimized_model_path.parent.is_dir():
            raise ConfigError(
                f"save_optimized {self.optimized_model_path}: the folder "
                f"{self.optimized_model_path.parent} does not exist.",
                field="save_optimized",
            )
        known = ort.get_all_providers()
        requested = self.resolved_providers()
        for name in self.provider_options:
            provider = canonical(name, known)
            if provider not in requested:
                raise ConfigError(
                    f"options are given for {provider}, which is not among the providers "
                    f"{', '.join(requested)}.",
                    hint="Add it to session.providers, or drop its session.provider_options.",
                    field="session.provider_options",
                    related=["session.providers"],
                )

    def label(self) -> str:
        """``all; CPUExecutionProvider``: the options that change results, for reports."""
        parts = [self.optimization, ",".join(self.resolved_providers())]
        if self.intra_op_threads:
            parts.append(f"threads={self.intra_op_threads}")
        return "; ".join(parts)

    def describe(self) -> str:
        """Every setting that differs from ONNX Runtime's defaults, for tables (``defaults``)."""
        default = OrtOptions()
        parts = []
        for key, value in self.settings().items():
            if value != default.settings()[key]:
                parts.append(f"{key}={value}")
        return ", ".join(parts) or "defaults"

    def settings(self) -> dict[str, Any]:
        """The options as plain JSON values, for contracts and worker processes.

        ``optimized_model_path`` is left out: it is where one run saves a file, not a setting.
        """
        return {
            "providers": list(self.providers),
            "provider_options": {k: dict(v) for k, v in self.provider_options.items()},
            "optimization": self.optimization,
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "parallel": self.parallel,
            "cpu_mem_arena": self.cpu_mem_arena,
            "mem_pattern": self.mem_pattern,
            "config": dict(self.config),
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> OrtOptions:
        """Options from what ``settings()`` wrote; unknown keys and wrong types are refused.

        Raises:
            ConfigError: a key is unknown or a value has the wrong type.
        """
        kinds: dict[str, type | tuple[type, ...]] = {
            "providers": list,
            "provider_options": dict,
            "optimization": str,
            "intra_op_threads": int,
            "inter_op_threads": int,
            "parallel": bool,
            "cpu_mem_arena": bool,
            "mem_pattern": bool,
            "config": dict,
        }
        unknown = sorted(set(settings) - set(kinds))
        if unknown:
            raise ConfigError(f"unknown session settings: {', '.join(unknown)}.")
        values: dict[str, Any] = {}
        for key, value in settings.items():
            kind = kinds[key]
            wrong_bool = kind is int and isinstance(value, bool)
            if not isinstance(value, kind) or wrong_bool:
                raise ConfigError(
                    f"session setting {key!r} is {value!r}; expected {getattr(kind, '__name__', kind)}."
                )
            values[key] = value
        if "providers" in values:
            values["providers"] = tuple(str(p) for p in values["providers"])
        if "config" in values:
            values["config"] = {str(k): str(v) for k, v in values["config"].items()}
        if "provider_options" in values:
            values["provider_options"] = {
                str(p): {str(k): str(v) for k, v in dict(o).items()}
                for p, o in values["provider_options"].items()
            }
        return cls(**values)

    def resolved_providers(self) -> list[str]:
        """Full provider names, CPU appended."""
        return resolve(self.providers, ort.get_all_providers())

    def applied_settings(self, known: list[str] | None = None) -> dict[str, Any]:
        """``settings()`` with full provider names (CPU appended) and options keyed by them.

        What the one settings applier (``_session.py``) takes, in this process or inside an
        isolated environment; ``known`` is that runtime's list of providers.
        """
        known = list(known or ort.get_all_providers())
        providers = resolve(self.providers, known)
        return self.settings() | {
            "providers": providers,
            "provider_options": {
                canonical(k, providers): dict(v) for k, v in self.provider_options.items()
            },
        }


def with_tensorrt(options: OrtOptions, model: Path, derive: TensorrtFor | None) -> OrtOptions:
    """``options`` with the TensorRT options ``derive`` gives ``model`` under the user's ones.

    Only when TensorRT is among the providers and ``derive`` gives options for the model;
    otherwise ``options`` unchanged (and ``derive`` is not called).
    """
    if derive is None or TENSORRT not in options.resolved_providers():
        return options
    derived = derive(model)
    if derived is None:
        return options
    given = {k: v for k, v in options.provider_options.items()}
    key = next((k for k in given if k.lower().startswith("tensorrt")), TENSORRT)
    given[key] = dict(derived) | dict(given.get(key, {}))
    return dataclasses.replace(options, provider_options=given)


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
    options: OrtOptions,
    *,
    what: str,
    profile_prefix: Path | None = None,
) -> ort.InferenceSession:
    """A session for a model held in memory whose external data lives in ``folder``.

    With ``profile_prefix``, the session profiles every run into a Chrome trace named
    ``<prefix>_<date>.json``, written by ``end_profiling()``.

    Raises:
        ProviderUnavailable: a requested provider is not in this build.
        ProviderFailed: a requested provider did not start (ONNX Runtime would run without it).
        SessionFailed: ONNX Runtime refused the model.
    """
    settings = options.applied_settings()
    try:
        with native_step("ORT session creation", what):
            return _session.create(
                proto.SerializeToString(),
                settings,
                config={_session.EXTERNAL_FOLDER: str(folder)},
                profile_prefix=None if profile_prefix is None else str(profile_prefix),
                optimized_model_path=(
                    None
                    if options.optimized_model_path is None
                    else str(options.optimized_model_path)
                ),
            )
    except _session.Refused as refused:
        raise refusal(
            refused.to_dict(),
            runtime=f"onnxruntime {ort.__version__}",
            what=what,
            providers=settings["providers"],
        ) from None


def _spec(arg: ort.NodeArg) -> TensorSpec:
    kind = arg.type or ""
    tensor = kind.startswith("tensor(")
    dtype = kind[7:-1] if tensor else kind
    dtype = {"float": "float32", "double": "float64"}.get(dtype, dtype)
    shape = tuple(d if isinstance(d, int | str) else None for d in arg.shape) if tensor else None
    return TensorSpec(name=arg.name, dtype=dtype or None, shape=shape, type=kind or None)


class OrtRunner:
    """ONNX Runtime on a model file, with the given session options.

    Args:
        model: the model, loaded safely (its external data is read by ONNX Runtime from the
            model's folder).
        options: providers, optimisation level, threads, config entries.
        name: label for reports; the default names the options.
        profile_prefix: profile every run into a Chrome trace (see ``create_session``);
            ``end_profiling()`` writes it and returns its path.
        tensorrt: the TensorRT options a model's contract gives it
            (``onnxgate.contract_store.contract_tensorrt``), added under ``options`` when TensorRT
            is among the providers; None adds none.
    """

    def __init__(
        self,
        model: LoadedModel,
        options: OrtOptions | None = None,
        *,
        name: str | None = None,
        profile_prefix: Path | None = None,
        tensorrt: TensorrtFor | None = None,
    ) -> None:
        self.model = model
        self.options = options or OrtOptions()
        self.profile_prefix = profile_prefix
        self.tensorrt = tensorrt
        self.name = name or f"onnxruntime[{self.options.label()}]"
        self._session: ort.InferenceSession | None = None
        self._outputs: list[str] = []

    def __enter__(self) -> Self:
        self._session = create_session(
            self.model.proto,
            self.model.path.parent,
            with_tensorrt(self.options, self.model.path, self.tensorrt),
            what=str(self.model.path),
            profile_prefix=self.profile_prefix,
        )
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._run_options = _quiet_run()  # built once: not inside the timed region of infer()
        return self

    def __exit__(self, *exc: object) -> None:
        self._session = None

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
        asked = self.options.applied_settings()
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
        with native_step("ORT inference", self.model.path):  # outside the timed region
            start = time.perf_counter_ns()
            try:
                values = session.run(None, feeds, self._run_options)
            except Exception as err:  # ORT raises its own exception types, not a shared base
                raise RunFailed(
                    f"{self.name} failed on {self.model.path}: {first_line(err)}"
                ) from err
            elapsed = time.perf_counter_ns() - start
        return Inference(dict(zip(self._outputs, values, strict=True)), elapsed)

    @property
    def method(self) -> str:
        """How ``infer_all`` sees intermediate tensors."""
        return (
            f"ONNX Runtime ({self.options.label()}) with every node output of the main graph "
            "exposed as a graph output (no fusion across an exposed tensor; the level's other "
            "rewrites still apply)"
        )

    def sibling(self, model: LoadedModel) -> OrtRunner:
        """ONNX Runtime with the same settings on another model (nothing saved)."""
        options = dataclasses.replace(self.options, optimized_model_path=None)
        return OrtRunner(model, options, name=self.name, tensorrt=self.tensorrt)

    def infer_all(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Every node output of the main graph, from a session where all of them are outputs."""
        exposed = expose_all(self.model.proto)
        # the optimised model saved, if asked, is the one the candidate ran, not this copy
        options = dataclasses.replace(self.options, optimized_model_path=None)
        session = create_session(
            exposed, self.model.path.parent, options, what=f"{self.model.path} (all outputs)"
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
