"""Where a served model comes from: a registry version, an MLflow model version, or a model file.

A registry reference (``name@champion``, ``name@3``, ``name:3``, ``name``) is fetched into
onnxgate's cache, every file re-hashed against the registry's sha256 on the way; its gate verdict
and the providers it was gated for come from the gate run that registered it. A model file is
served from where it is; it counts as gated when a gate's ``report.json`` beside it passed and
names this model's sha256. An MLflow reference (``mlflow:/models/NAME@ALIAS``,
``mlflow:/models/NAME/3``) names a version ``registry publish mlflow`` published: it is downloaded
into the cache (``serve/mlflow/NAME@VERSION-<hash>``), every file checked against the published
sha256 and the model against its contract, and from there it is a model file beside its contract
and the gate's ``report.json``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnxgate._fs import cache_dir
from onnxgate.contract import sha256_file
from onnxgate.errors import ConfigError, NotFound

log = logging.getLogger(__name__)

_COLON_VERSION = re.compile(r"^(?P<name>[^@:/\\]+):(?P<number>\d+)$")


@dataclass(frozen=True)
class Source:
    """A model ready to open: its file, and what its gate said."""

    name: str
    """The name clients use in URLs."""
    version: str
    """The registry's version number, or ``1`` for a file."""
    model: Path
    ref: str
    """What it was opened from (``name@champion``, a path)."""
    gated: bool
    gate: str
    """How the gate verdict is known: ``registry all-minilm@3: passed``, ``no gate report``."""
    providers: tuple[str, ...] = ()
    """The providers the gate ran with (``[targets] providers``); empty for CPU."""
    require: str | None = None
    """The provider the gate's placement step required, if any."""
    alias: str | None = None
    """The alias the reference follows (``champion``, or ``latest`` for a bare name); None for a
    pinned version or a file."""
    registry: str | None = None
    notes: list[str] = field(default_factory=list)


def is_file_ref(ref: str) -> bool:
    """A path of a model file (``.onnx``, or anything with a folder in it) rather than a name."""
    return ref.endswith(".onnx") or "/" in ref or "\\" in ref or Path(ref).is_file()


def registry_ref(ref: str) -> str:
    """``name:3`` → ``name@3``; other forms unchanged."""
    match = _COLON_VERSION.match(ref)
    return f"{match['name']}@{match['number']}" if match else ref


def split_name(item: str) -> tuple[str | None, str]:
    """``NAME=REF`` → (NAME, REF): serve REF under another name; otherwise (None, item)."""
    name, sep, ref = item.partition("=")
    if sep and name and "/" not in name and not name.endswith(".onnx"):
        return name, ref
    return None, item


def served_name(item: str) -> str:
    """The name ``item`` (``REF`` or ``NAME=REF``) will be served under, before it is opened."""
    name, ref = split_name(item)
    if name:
        return name
    if _is_mlflow(ref):
        from onnxgate.registry import parse_mlflow_ref

        return parse_mlflow_ref(ref)[0]
    if is_file_ref(ref):
        return Path(ref).name.removesuffix(".onnx")
    return re.split(r"[@:]", registry_ref(ref), maxsplit=1)[0]


def _gate_config(report: dict[str, Any]) -> tuple[tuple[str, ...], str | None]:
    config = report.get("config") or {}
    targets = config.get("targets") or {}
    steps = config.get("steps") or {}
    placement = steps.get("placement") or {}
    providers = tuple(str(p) for p in targets.get("providers") or ())
    require = placement.get("require") if placement.get("enabled", True) else None
    return providers, (str(require) if require else None)


def from_file(ref: str, name: str | None = None) -> Source:
    """A model file served where it is.

    Raises:
        ConfigError: the file does not exist.
    """
    path = Path(ref)
    if path.is_dir():
        raise _a_folder(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such model file.", hint="Give a path or NAME@ALIAS.")
    served = name or path.name.removesuffix(".onnx")
    report_path = path.parent / "report.json"
    gated, gate, providers, require = False, "no gate report.json beside the model", (), None
    if report_path.is_file():
        try:
            report = json.loads(report_path.read_text())
        except (OSError, ValueError) as err:
            gate = f"{report_path} is unreadable ({err})"
        else:
            sha = sha256_file(path)
            judged = {a.get("sha256") for a in report.get("artefacts", []) if isinstance(a, dict)}
            if sha not in judged:
                gate = f"{report_path} does not name this model's bytes (sha256 {sha[:12]}…)"
            else:
                gated = bool(report.get("passed"))
                gate = f"{report_path}: {'passed' if gated else 'failed'}"
                providers, require = _gate_config(report)
    return Source(
        name=served,
        version="1",
        model=path,
        ref=ref,
        gated=gated,
        gate=gate,
        providers=providers,
        require=require,
    )


def from_registry(
    ref: str,
    registry: str | None,
    *,
    variant: str | None = None,
    name: str | None = None,
    store: str | None = None,
) -> Source:
    """A registry version, fetched into the cache and re-hashed.

    Raises:
        NotFound: no such model, version or alias; or the version has no such variant.
        RegistryUnreachable: the registry cannot be opened.
        ArtefactCorrupt: a fetched file does not match its sha256.
    """
    from onnxgate.registry import open_registry, parse_ref

    ref = registry_ref(ref)
    _, which = parse_ref(ref)
    with open_registry(registry, store) as reg:
        version = reg.get(ref)
        role = f"model.{variant}" if variant else "model"
        if role not in version.artefacts:
            raise NotFound(
                f"{version.ref} has no {role} artefact (it has {', '.join(sorted(version.artefacts))}).",
                hint="Leave out --variant, or name one the version was registered with.",
            )
        folder = cache_dir() / "serve" / f"{version.name}@{version.number}"
        fetched = reg.fetch(version.ref, folder)
        report = reg.gate_report(version.ref)
    model = next(Path(f.path) for f in fetched.files if f.role == role)
    providers, require = _gate_config(report)
    return Source(
        name=name or version.name,
        version=str(version.number),
        model=model,
        ref=ref,
        gated=version.passed,
        gate=f"registry {version.ref}: {'passed' if version.passed else 'failed'}",
        providers=providers,
        require=require,
        alias=which if isinstance(which, str) else ("latest" if which is None else None),
        registry=registry,
    )


def _is_mlflow(ref: str) -> bool:
    from onnxgate.registry import is_mlflow_ref

    return is_mlflow_ref(ref)


def from_mlflow(ref: str, tracking_uri: str | None, name: str | None = None) -> Source:
    """An MLflow model version published by onnxgate, fetched into the cache and checked.

    Not followed: a served ``@ALIAS`` is the version it named at load.

    Raises:
        MlflowNotFound: no such model, version or alias on the server.
        MlflowUnreachable: the tracking server cannot be reached.
        ArtefactCorrupt: the version was not published by onnxgate, or its bytes are not the
            ones published.
        ConfigError: a malformed reference, or no tracking server named.
    """
    from onnxgate._pathtext import mask_uri
    from onnxgate.registry import fetch_mlflow, tracking_uri_of

    uri = tracking_uri_of(tracking_uri)
    fetched = fetch_mlflow(ref, uri, cache_dir() / "serve" / "mlflow")
    local = from_file(fetched.model, name or fetched.name)
    where = f"MLflow {mask_uri(uri)} {fetched.name}/{fetched.version}"
    return replace(
        local,
        version=str(fetched.version),
        ref=ref,
        gate=f"{where} (from {fetched.source or 'an unknown onnxgate version'}); {local.gate}",
        notes=[
            f"fetched from {where} into {fetched.folder}; files checked against their sha256"
            + (f"; @{fetched.alias} is not followed" if fetched.alias else "")
        ],
    )


def resolve(
    item: str,
    registry: str | None,
    *,
    variant: str | None = None,
    store: str | None = None,
    mlflow_tracking_uri: str | None = None,
) -> Source:
    """``REF`` or ``NAME=REF``: a file, a registry or an MLflow version (see the module docstring)."""
    name, ref = split_name(item)
    if _is_mlflow(ref):
        if variant:
            raise ConfigError(f"--variant applies to onnxgate registry references, not to {ref}.")
        return from_mlflow(ref, mlflow_tracking_uri, name)
    if is_file_ref(ref):
        if variant:
            raise ConfigError(f"--variant applies to registry references, not to the file {ref}.")
        return from_file(ref, name)
    try:
        return from_registry(ref, registry, variant=variant, name=name, store=store)
    except NotFound:
        if Path(ref).is_dir():  # a folder beside no registered model of its name
            raise _a_folder(Path(ref)) from None
        raise


def _a_folder(path: Path) -> ConfigError:
    return ConfigError(
        f"{path} is a folder, not a model file (nor a registered model's name).",
        hint="Give a model file beside its contract (`DIR/model.onnx`: name the .onnx file "
        "inside the folder) or a registry version (`NAME@3`, `NAME:3`, `NAME@ALIAS`).",
    )


def current_number(ref: str, registry: str | None, store: str | None = None) -> tuple[int, bool]:
    """The version number an alias points at now, and whether its gate passed."""
    from onnxgate.registry import open_registry

    with open_registry(registry, store) as reg:
        version = reg.get(registry_ref(ref))
    return version.number, version.passed
