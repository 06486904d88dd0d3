"""A Triton model repository from a gated model: the layout, ``config.pbtxt`` and warm-up data.

Everything the config says comes from what onnxgate already proved about the model: inputs and
outputs from the contract's signature (``-1`` where a dim is symbolic; an output whose golden
values contradict its declared shape takes the shape they have, and the model deployed declares
it, since Triton's ONNX Runtime backend requires output dims equal to the declared ones; a
scikit-learn ZipMap output is deployed as the FP32 ``[N, K]`` tensor ``onnxgate serve`` answers,
with its class labels in a label file: see ``_model``), ``max_batch_size`` from the batch axis the contract proves (the symbolic dim that is axis 0 of
every input and output) and its largest proven size, the tuned session settings as the ONNX
Runtime backend's parameters, and ``model_warmup`` from the golden samples, so Triton does not
call the model ready until it has run on them. The config is built by
``serve._model_config.build_config`` (the same builder ``onnxgate serve`` answers its model
configuration extension with) and written with ``text_format``; the repository is then
checked by :func:`check_repository`, the same checks ``deploy check`` runs on a repository
written by hand.

A version is written under a temporary name and renamed into place, so an interrupted deploy
never leaves a version folder Triton would load half-written; other versions in the repository
are kept.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from onnxgate._fs import atomic_write_bytes, atomic_write_text, fsync_file, public_mode
from onnxgate._opslib import OpsLibrary
from onnxgate.compat.providers import CPU
from onnxgate.contract import SIDECAR, Contract, contract_paths, read_golden
from onnxgate.contract_store import runs_on, runs_on_text
from onnxgate.deploy._check import check_model_dir
from onnxgate.deploy._findings import Finding, RepositoryCheck
from onnxgate.deploy._gated import open_gated
from onnxgate.deploy._libraries import deployed_libraries, served_path
from onnxgate.deploy._model import deployable
from onnxgate.deploy._proto import text_format
from onnxgate.errors import ConfigError
from onnxgate.model import LoadedModel, load_model
from onnxgate.serve import (
    GRAPH_LEVEL,
    OPENVINO,
    TritonOptions,
    batching,
    build_config,
)
from onnxgate.settings import OpsLibraries

if TYPE_CHECKING:
    from onnxgate.serve import Source

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""What a model folder may be called (Triton takes the folder name as the model's name)."""
VERSION = re.compile(r"[0-9]+")
"""A version folder: ASCII digits only (``str.isdigit`` also takes ``²``)."""
MODEL_FILE = "model.onnx"
"""The file name Triton's ONNX Runtime backend loads from a version folder by default."""
WARMUP_DIR = "warmup"
"""Triton reads ``input_data_file`` from this folder inside the model's folder."""


class TritonConfig(TritonOptions):
    """How to deploy: where, under which name and version (and, inherited, how Triton runs it)."""

    out: Path
    """The model repository (created if missing; other models and versions in it are kept)."""
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The model's name in the repository; default: the registry name, or the file's stem."""
    version: int | None = Field(None, ge=1)
    """The version folder; default: the registry version, or one past the highest there."""
    registry: str | None = None
    """Registry URL for a registry reference (default: ``$ONNXGATE_REGISTRY`` or the local one)."""
    store: str | None = None
    allow_ungated: bool = False
    """Deploy a version whose gate did not pass (or is unknown)."""
    ops_libraries: OpsLibraries = ()
    """Custom operator library files (paths, or ``onnxruntime-extensions``) for the libraries the
    contract requires (matched by sha256, then name), and any others to deploy with the model.
    A library the contract requires is found without naming it when it is the installed
    onnxruntime-extensions."""
    repository_path: str | None = Field(None, pattern=r"^/")
    """The repository's absolute path as the Triton server sees it (a container's mount point,
    ``/models``): ``model_operations`` names each library by it, since Triton's ONNX Runtime
    backend hands the name to the dynamic loader unchanged. Default: its path here."""


class DeployReport(BaseModel):
    """What ``deploy triton`` wrote and what the checks found in it."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    source: str
    """The reference deployed (``name@champion``, a file)."""
    gate: str
    repository: str
    name: str
    version: int
    model_dir: str
    config: str
    """config.pbtxt as written."""
    files: list[str]
    """Files written, relative to the repository."""
    warmups: list[str] = []
    kept_versions: list[int] = []
    """Other versions already in the repository, left as they were."""
    findings: list[Finding] = []
    notes: list[str] = []


def _warmup_arrays(
    contract: Contract, model: Path, batched: bool
) -> list[tuple[str, int, dict[str, np.ndarray]]]:
    """One warm-up per golden sample, at the sample's batch size, from its first row.

    Triton repeats a warm-up's single row up to its batch size, so each golden sample's shape is
    run (the batch ones included) though only its first row's values are kept.
    """
    made = []
    for sample, _ in read_golden(contract, model):
        feeds = {k: np.asarray(v) for k, v in sample.feeds.items()}
        batch = 1
        if batched:
            batch = min(int(v.shape[0]) for v in feeds.values())
            feeds = {k: v[0] for k, v in feeds.items()}
        label = "".join(c if c.isalnum() or c in "_-" else "_" for c in sample.label)
        made.append((f"golden_{label}", batch, feeds))
    return made


def _copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
    fsync_file(target)


def deploy_triton(
    ref: str | Path,
    config: TritonConfig,
    *,
    progress: Callable[[str], None] | None = None,
) -> DeployReport:
    """Write ``ref`` into a Triton model repository, then check what was written.

    Raises:
        NotGated: the gate did not pass (or is unknown) and ``allow_ungated`` is off.
        ConfigError: the contract and the options disagree (a batch beyond the proven one, a
            version that exists), or the model cannot be described to Triton.
        NotFound, RegistryUnreachable, ArtefactCorrupt: the registry reference failed.
        ModelLoadError: the model or its contract is missing or damaged.
    """
    say = progress or (lambda message: log.info("%s", message))
    source = open_gated(
        ref,
        registry=config.registry,
        store=config.store,
        allow_ungated=config.allow_ungated,
        say=say,
    )
    contract = SIDECAR.read(source.model)
    loaded = load_model(source.model)
    # a model that declares one output shape and produces another is deployed declaring what it
    # produces (Triton's ONNX Runtime backend holds config dims to the declared ones), and one
    # with scikit-learn's ZipMap without it (the backend refuses sequences and maps)
    redeclared, contract, declared, labels = deployable(contract, loaded)
    name = _model_name(config.name or source.name)
    repo = config.out.expanduser()
    model_dir = repo / name
    version, existing = _choose_version(config, source, model_dir)
    notes = list(source.notes)
    notes += declared
    settings = _as_recorded(
        contract, _tuned_settings(source.model, notes, gpu=config.gpu), notes, where=source.ref
    )
    libraries = deployed_libraries(contract, config.ops_libraries, source.model, notes)
    batch_dim, _, _ = batching(contract)
    batched = batch_dim is not None and config.max_batch != 0
    arrays = _warmup_arrays(contract, source.model, batched)
    # every byte is made before anything is written: a model Triton cannot warm up is refused
    # with the repository untouched
    warmups = _warmup_files(arrays, version)
    label_files = {
        output: (f"v{version}.{_safe(output)}.labels.txt", _labels_text(output, found))
        for output, found in labels.items()
    }
    message, more = build_config(
        contract,
        config,
        name=name,
        version=version,
        settings=settings,
        warmups=warmups,
        label_files={output: file for output, (file, _) in label_files.items()},
    )
    notes += more
    served = config.repository_path or str(repo.absolute())
    message.model_operations.op_library_filename.extend(
        served_path(served, name, version, lib.path.name) for lib in libraries
    )
    text = text_format.MessageToString(message)

    say(f"writing {name}/{version} into {repo}")
    final, written = _write_version(
        source,
        loaded,
        contract,
        redeclared,
        model_dir,
        version,
        label_files,
        warmups,
        text,
        libraries,
    )
    files = [str(p.relative_to(repo)) for p in sorted(final.rglob("*")) if p.is_file()]
    files += [str(p.relative_to(repo)) for p in written]
    files.append(str((model_dir / "config.pbtxt").relative_to(repo)))
    say("checking the repository as `deploy check` would")
    checked: RepositoryCheck = check_model_dir(model_dir)
    return DeployReport(
        passed=checked.passed,
        source=source.ref,
        gate=source.gate,
        repository=str(repo),
        name=name,
        version=version,
        model_dir=str(model_dir),
        config=text,
        files=files,
        warmups=[label for label, _, _ in warmups],
        kept_versions=existing,
        findings=checked.findings,
        notes=notes,
    )


def _model_name(name: str) -> str:
    """``name``, refused if it cannot name a model folder.

    Raises:
        ConfigError: a name with other characters than Triton allows, or ``.``/``..``.
    """
    if not NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{name!r} cannot name a model folder in a Triton repository.",
            hint="Pass --name with letters, digits, '_', '-' or '.' (not '.' or '..').",
            field="name",
        )
    return name


def _choose_version(config: TritonConfig, source: Source, model_dir: Path) -> tuple[int, list[int]]:
    """The version to write (asked, the registry's, or the next), and the versions already there.

    Raises:
        ConfigError: the version exists, or is below the latest one Triton would keep serving.
    """
    existing = (
        sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and VERSION.fullmatch(p.name))
        if model_dir.is_dir()
        else []
    )
    if config.version is not None:
        version = config.version
    elif source.registry is not None and VERSION.fullmatch(source.version):
        version = int(source.version)
    else:
        version = (max(existing) + 1) if existing else 1
    if version in existing:
        raise ConfigError(
            f"{model_dir / str(version)} exists: a version in a repository is never overwritten "
            "(Triton may be serving it).",
            hint="Pass another --version, or remove that folder first.",
            field="version",
        )
    if existing and version < max(existing) and config.versions == "latest":
        raise ConfigError(
            f"{model_dir}: version {version} is below {max(existing)}, which Triton would keep "
            "serving (latest) under a config written for version {version}.".replace(
                "{version}", str(version)
            ),
            hint="Deploy it as a new, higher --version (a rollback is a new version), or remove "
            "the newer versions first.",
            field="version",
        )
    return version, existing


def _warmup_files(
    arrays: list[tuple[str, int, dict[str, np.ndarray]]], version: int
) -> list[tuple[str, int, dict[str, tuple[np.ndarray, bytes, str]]]]:
    """Each warm-up's inputs with their bytes and the file (named by version) they go to."""
    return [
        (
            label,
            batch,
            {
                k: (v, warmup_bytes(v, k), f"v{version}.{label}.{i}.{_safe(k)}.bin")
                for i, (k, v) in enumerate(feeds.items())
            },
        )
        for label, batch, feeds in arrays
    ]


def _write_version(
    source: Source,
    loaded: LoadedModel,
    contract: Contract,
    redeclared: bytes | None,
    model_dir: Path,
    version: int,
    label_files: Mapping[str, tuple[str, str]],
    warmups: Sequence[tuple[str, int, Mapping[str, tuple[np.ndarray, bytes, str]]]],
    text: str,
    libraries: Sequence[OpsLibrary] = (),
) -> tuple[Path, list[Path]]:
    """Stage the version folder, rename it into place, then write ``config.pbtxt``.

    The custom operator libraries go into the version folder beside the model.

    Returns:
        The version folder, and the label and warm-up files written beside it. On any failure
        the staging folder and those files are removed (and the version folder, if the config
        could not be written).
    """
    model_dir.mkdir(parents=True, exist_ok=True)
    final = model_dir / str(version)
    warm_dir = model_dir / WARMUP_DIR
    written: list[Path] = []
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=model_dir))
    try:
        public_mode(staging, folder=True)  # mkdtemp makes 0700; Triton may run as another user
        if redeclared is None:
            _copy(source.model, staging / MODEL_FILE)
        else:
            atomic_write_bytes(staging / MODEL_FILE, redeclared)
        for ref_ in loaded.external_data:
            target = staging / ref_.location  # where the model will look for it
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                _copy(ref_.path, target)
        contract_file, _ = contract_paths(staging / MODEL_FILE)
        _copy(Path(SIDECAR.location(source.model)), contract_file)
        if redeclared is not None:  # re-signed only when the copied contract's signature held
            SIDECAR.write(staging / MODEL_FILE, contract)
        if contract.golden is not None:
            _copy(source.model.parent / contract.golden.file, staging / contract.golden.file)
        for library in libraries:
            _copy(library.path, staging / library.path.name)
        # label and warm-up files are named by version, so those of the config Triton serves
        # now stay
        for file, text_ in label_files.values():
            atomic_write_text(model_dir / file, text_)
            written.append(model_dir / file)
        warm_dir.mkdir(exist_ok=True)
        for _, _, inputs in warmups:
            for _, data, file in inputs.values():
                atomic_write_bytes(warm_dir / file, data)
                written.append(warm_dir / file)
        os.replace(staging, final)
        try:
            atomic_write_text(model_dir / "config.pbtxt", text)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return final, written


def _labels_text(output: str, labels: Sequence[Any]) -> str:
    """Class labels one a line, as Triton reads a label file.

    Raises:
        ConfigError: a label holds a line break, which would shift every label after it.
    """
    lines = [str(label) for label in labels]
    broken = next((line for line in lines if "\n" in line or "\r" in line), None)
    if broken is not None:
        raise ConfigError(
            f"output {output!r}: class label {broken!r} holds a line break, and Triton reads "
            "labels one a line.",
            hint="Rename the classes without line breaks before exporting.",
        )
    return "".join(f"{line}\n" for line in lines)


def _safe(name: str) -> str:
    """A tensor name as a file-name part: anything but letters, digits, ``_-`` becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "_"


def warmup_bytes(array: np.ndarray, name: str) -> bytes:
    """One row of a warm-up input as Triton reads it.

    Raw row-major bytes; for strings, each element as a 4-byte little-endian length and its
    UTF-8 bytes.

    Raises:
        ConfigError: an element type Triton has no warm-up encoding for.
    """
    array = np.asarray(array)
    if array.dtype.kind in "OUS":
        out = bytearray()
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            out += struct.pack("<I", len(data)) + data
        return bytes(out)
    if array.dtype.kind not in "biuf":
        raise ConfigError(
            f"{name}: a warm-up of element type {array.dtype} cannot be written for Triton.",
            hint="Triton warms up bool, integer, float and string inputs.",
        )
    return np.ascontiguousarray(array).tobytes()


OPENVINO_OPTIONS = {"device_type": "CPU"}
"""The OpenVINO options Triton's ``openvino`` accelerator applies (its source sets ``device_type``
CPU and passes nothing from the model config)."""


def _as_recorded(
    contract: Contract, settings: dict[str, Any], notes: list[str], *, where: str
) -> dict[str, Any]:
    """``settings`` on the providers the contract records its model runs on (``lineage.runs_on``).

    A model quantised on OpenVINO through its plugin was gated and timed there alone (on the CPU
    provider it is slower than its float parent): it is deployed with Triton's ``openvino`` CPU
    execution accelerator, as settings tuned on OpenVINO are. Tuned settings with other
    providers are not used. One quantised on an isolated build was proven on that build alone,
    which Triton's ONNX Runtime backend is not.

    Raises:
        ConfigError: the contract records an isolated build.
    """
    providers, runtime = runs_on(contract)
    if runtime is not None:
        raise ConfigError(
            f"{where}: its contract records that it runs on {runs_on_text(providers, runtime)} "
            f"(lineage.runs_on: it was quantised, gated and timed there alone); Triton's ONNX "
            f"Runtime backend is not {runtime}, and there the model is slower than its float "
            "parent and its outputs unproven.",
            hint="Quantise it with a recipe for the installed runtime (--recipes "
            "dynamic-u8s8-pc), or on a host whose OpenVINO plugin (onnxruntime-ep-openvino) "
            "offers a device, and deploy that model.",
        )
    if not providers:
        return settings
    tuned = [str(p) for p in settings.get("providers") or ()]
    if tuned and [p for p in tuned if p != CPU] != [p for p in providers if p != CPU]:
        notes.append(
            f"tuned settings not used: they were tuned on {', '.join(tuned)}, the model was "
            f"quantised for {', '.join(providers)}"
        )
        settings = {}
    notes.append(f"providers {', '.join(providers)}, as quantised")
    return settings | {"providers": list(providers)}


def _tuned_settings(model: Path, notes: list[str], *, gpu: bool) -> dict[str, Any]:
    """The settings tuned on this machine (latency objective) for the deployment's device.

    CPU thread settings tuned here say nothing about a GPU deployment, so with ``gpu`` only
    settings tuned with CUDA or TensorRT are used. Settings tuned on OpenVINO (in this process
    through its plugin, or on an isolated build such as ``onnxruntime-openvino==1.24.1``) are
    deployed with Triton's ``openvino`` CPU execution accelerator (``build_config``), which takes
    no provider options: a record whose OpenVINO options are other than ``device_type=CPU`` is
    not used (the backend would run other settings than were measured). The host deploy runs on
    needs no OpenVINO: the Triton server that loads the model does, and refuses it without.
    """
    from onnxgate.perf import tuned_for

    try:
        settings, path, runtime = tuned_for(model, objective="latency")
    except ConfigError as err:
        notes.append(f"tuned settings not used: {err.message}")
        return {}
    providers = [str(p) for p in settings.get("providers") or ()]
    options = (settings.get("provider_options") or {}).get(OPENVINO) or {}
    if OPENVINO in providers and {str(k): str(v) for k, v in options.items()} not in (
        {},
        OPENVINO_OPTIONS,
    ):
        given = ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
        notes.append(
            f"tuned settings not used: they were tuned on {OPENVINO} with {given}"
            + (f" ({runtime})" if runtime else "")
            + ", and Triton's openvino accelerator takes no options (it runs device_type=CPU)"
        )
        return {}
    if runtime is not None:
        notes.append(
            f"tuned settings were measured on {runtime}; Triton runs them on its own ONNX "
            "Runtime build"
        )
    on_gpu = any(p.startswith(("CUDA", "Tensorrt", "cuda", "tensorrt")) for p in providers)
    if gpu != on_gpu:
        where = ", ".join(providers) or "CPU"
        notes.append(
            f"tuned settings not used: they were tuned on {where}, the deployment runs on "
            f"{'GPUs' if gpu else 'CPUs'}"
        )
        return {}
    if path != model:
        notes.append(
            f"tuned settings not used: they were measured on the tuned graph {path.name}, and "
            "the gated model is what is deployed"
        )
        return {}
    dropped = []
    if settings.get("optimization") not in (None, "all", *GRAPH_LEVEL):
        dropped.append(
            f"optimization {settings['optimization']} (the ONNX Runtime backend offers basic, extended and all)"
        )
    if settings.get("config"):
        dropped.append(f"session config entries {', '.join(sorted(settings['config']))}")
    if dropped:
        notes.append("tuned settings the ONNX Runtime backend cannot take: " + "; ".join(dropped))
    notes.append(
        "tuned session settings (threads, execution mode, arena, memory pattern, level) as backend parameters"
    )
    return dict(settings)
