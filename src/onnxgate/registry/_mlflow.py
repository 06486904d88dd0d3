"""MLflow as the registry a team already runs: publish a gated version to it, fetch one back.

Publishing logs a version of onnxgate's registry as an MLflow model of the ONNX flavour (so
``mlflow.pyfunc.load_model`` and MLflow's own serving work on it), with the contract, the golden
samples and the gate's reports as the model's extra files, the gate's figures as run metrics
and the provenance as tags, then registers it as a model version. An alias moves only for a
version whose gate passed, as ``Registry.promote`` does; anything else is refused before a byte
is sent.

The bytes onnxgate proves are the ones the contract names. The ONNX flavour writes the model
again (``onnx.save_model``): when that reproduces the file byte for byte (the usual case) the
flavour's ``model.onnx`` is the model, else the original file goes along as an extra file too.
A manifest (``onnxgate.json``) lists every file by role, name and sha256, and ``fetch_mlflow``
(``_mlflow_fetch``) lays them out as ``registry fetch`` does and re-hashes each, so ``serve``
proves exactly what the gate judged.

Publishing is idempotent: a model version carries the onnxgate reference and the model's sha256
as tags, and publishing the same version again finds it by them instead of creating another.

Where the server keeps artefacts (its ``--artifacts-destination``, a folder or an object store)
is the server's business: the client uploads and downloads through the tracking server's
artifact proxy (``mlflow-artifacts:``) or the store the server names, with MLflow's own client.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from onnxgate._pathtext import mask_uri
from onnxgate.errors import (
    ConfigError,
    ExtraMissing,
    MlflowNotFound,
    MlflowUnreachable,
    PromotionRefused,
)
from onnxgate.registry._records import check_alias
from onnxgate.registry._store import sha256_path

if TYPE_CHECKING:
    from onnxgate.registry._registry import Registry

log = logging.getLogger(__name__)

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
"""MLflow's own variable for the tracking server, read when no URI is given."""
ENV_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
DEFAULT_ALIAS = "champion"
DEFAULT_EXPERIMENT = "onnxgate"
MANIFEST = "onnxgate.json"
"""The extra file that lists the published files by role, name and sha256."""
TAG_REF = "onnxgate.ref"
TAG_SHA = "onnxgate.model_sha256"
PREFIX = "mlflow:"
PUBLISHED_ROLES = ("model", "contract", "golden")
PROBE_SECONDS = 10.0


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MlflowPublication(_Record):
    """A version published to MLflow (``registry publish mlflow``, ``registered.mlflow``)."""

    tracking_uri: str
    """The tracking server's URI, credentials masked."""
    name: str
    """The registered model's name in MLflow."""
    version: int
    """The MLflow model version."""
    source: str
    """The onnxgate version it is (``bert@3``)."""
    model_sha256: str
    run_id: str
    created: bool
    """False when the version had been published before and was found by its tags."""
    alias: str | None = None
    """The alias asked for."""
    alias_moved: bool = False
    """Whether ``name@alias`` was pointed at this version (only for a gate that passed)."""
    previous: int | None = None
    """The version the alias pointed at before, if any."""

    @property
    def uri(self) -> str:
        """``models:/NAME/VERSION``, MLflow's URI of the version."""
        return f"models:/{self.name}/{self.version}"


def tracking_uri(uri: str | None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``.

    Raises:
        ConfigError: neither is set.
    """
    found = uri or os.environ.get(ENV_TRACKING_URI)
    if not found:
        raise ConfigError(
            "no MLflow tracking server was named.",
            hint=f"Pass --tracking-uri http://HOST:5000 or set ${ENV_TRACKING_URI}.",
        )
    return found


def _import_mlflow() -> Any:
    try:
        import mlflow
    except ImportError as err:
        raise ExtraMissing(
            f"publishing to and serving from MLflow needs the 'mlflow' extra ({err.name} is "
            "not installed).",
            extra="mlflow",
        ) from None
    return mlflow


def probe(uri: str) -> None:
    """Check an HTTP tracking server answers ``/health`` before MLflow's client retries for minutes.

    Raises:
        MlflowUnreachable: it does not answer, or answers with an error.
    """
    if not uri.startswith(("http://", "https://")):
        return
    plain = _without_credentials(uri).rstrip("/")
    try:
        with urllib.request.urlopen(f"{plain}/health", timeout=PROBE_SECONDS) as answer:
            answer.read(64)
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        raise MlflowUnreachable(
            f"the MLflow tracking server at {mask_uri(uri)} does not answer: {mask_uri(str(reason))}.",
            hint=f"Check the server is running and the URI (--tracking-uri or ${ENV_TRACKING_URI}).",
        ) from err


def _without_credentials(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


class _Masked:
    """A text stream that writes to another with every URI's credentials masked."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask_uri(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


@contextmanager
def _talking_to(uri: str, what: str) -> Iterator[Any]:
    """MLflow's fluent API pointed at ``uri`` for the block; its errors as onnxgate's.

    The fluent API's tracking URI is process-wide: the previous one is put back after.
    """
    mlflow = _import_mlflow()
    from mlflow.exceptions import MlflowException

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    previous_registry = mlflow.get_registry_uri() if previous else None
    previous_bar = os.environ.get(ENV_PROGRESS_BAR)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    os.environ[ENV_PROGRESS_BAR] = "false"
    try:
        # MLflow prints "View run … at URL" (credentials and all) on stdout, which holds
        # --format json's document: on stderr, masked
        with redirect_stdout(_Masked(sys.stderr)):  # type: ignore[type-var]
            yield mlflow
    except MlflowException as err:
        message = mask_uri(" ".join(str(err.message).split()))[:400]
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise MlflowNotFound(
                f"{what} at {mask_uri(uri)}: {message}",
                hint="Check the name, version and alias (`mlflow` UI: Models).",
            ) from err
        raise MlflowUnreachable(
            f"{what} at {mask_uri(uri)} failed: {message}",
            hint=f"Check the server is running and the URI (--tracking-uri or ${ENV_TRACKING_URI}).",
        ) from err
    finally:
        if previous_bar is None:
            os.environ.pop(ENV_PROGRESS_BAR, None)
        else:
            os.environ[ENV_PROGRESS_BAR] = previous_bar
        mlflow.set_tracking_uri(previous)
        mlflow.set_registry_uri(previous_registry)


def publish_mlflow(
    registry: Registry,
    ref: str,
    uri: str | None = None,
    *,
    name: str | None = None,
    alias: str | None = DEFAULT_ALIAS,
    experiment: str | None = None,
    reports: Mapping[str, str | os.PathLike[str]] | None = None,
) -> MlflowPublication:
    """Publish the version ``ref`` of ``registry`` to the MLflow tracking server at ``uri``.

    Args:
        registry: onnxgate's registry, where the version is.
        ref: ``NAME@NUMBER``, ``NAME@ALIAS`` or ``NAME`` (the latest).
        uri: The tracking server (``http://host:5000``); default ``$MLFLOW_TRACKING_URI``.
        name: The registered model's name in MLflow; default the version's name.
        alias: Point ``name@alias`` at the published version (only if its gate passed); None
            publishes without moving an alias.
        experiment: The MLflow experiment of the run that logs the model; default ``onnxgate``.
        reports: ``report.json`` and ``report.html`` files to publish beside the model; by
            default ``report.json`` is the gate report the registry stored.

    Returns:
        The MLflow model version, and whether the alias moved.

    Raises:
        PromotionRefused: an alias was asked and the version's gate did not pass (nothing sent).
        NotFound: no such version in onnxgate's registry.
        MlflowUnreachable: the tracking server cannot be reached or refuses (exit 3).
        ExtraMissing: MLflow is not installed.
    """
    uri = tracking_uri(uri)
    detail = registry.show(ref)
    version = detail.version
    target = name or version.name
    if alias is not None:
        check_alias(alias)
        if not version.passed:
            raise PromotionRefused(
                f"{version.ref} did not pass its gate; not publishing it as {target}@{alias} "
                f"to {mask_uri(uri)}.",
                hint="Publish a version that passed, or publish this one without an alias "
                "(--no-alias).",
            )
    if "model" not in version.artefacts:
        raise ConfigError(f"{version.ref} has no model artefact to publish.")
    _import_mlflow()
    probe(uri)
    document = registry.gate_report(version.ref)
    sha = version.artefacts["model"]
    with _talking_to(uri, f"publishing {version.ref} to MLflow") as mlflow:
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        found = _published(client, target, version.ref, sha)
        created = found is None
        run_id = found.run_id if found is not None else ""
        if found is None:
            with tempfile.TemporaryDirectory(prefix="onnxgate-mlflow-") as tmp:
                fetched = registry.fetch(version.ref, Path(tmp) / "files")
                files = {f.role: Path(f.path) for f in fetched.files}
                found, run_id = _log(
                    mlflow, files, document, reports, target, version, experiment, Path(tmp)
                )
        number = int(found.version)
        moved, previous = False, None
        if alias is not None:
            previous = _alias_version(client, target, alias)
            client.set_registered_model_alias(target, alias, str(number))
            moved = True
    publication = MlflowPublication(
        tracking_uri=mask_uri(uri),
        name=target,
        version=number,
        source=version.ref,
        model_sha256=sha,
        run_id=run_id or "",
        created=created,
        alias=alias,
        alias_moved=moved,
        previous=previous,
    )
    log.info(
        "published %s to MLflow %s as %s/%d%s",
        version.ref,
        publication.tracking_uri,
        target,
        number,
        f" ({target}@{alias})" if moved else "",
    )
    return publication


def _published(client: Any, name: str, ref: str, sha: str) -> Any | None:
    """The MLflow version already published from ``ref`` with this model, if any."""
    query = f"name = '{_quoted(name)}' and tags.`{TAG_REF}` = '{_quoted(ref)}'"
    for found in client.search_model_versions(query):
        if (found.tags or {}).get(TAG_SHA) == sha:
            return found
    return None


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _alias_version(client: Any, name: str, alias: str) -> int | None:
    from mlflow.exceptions import MlflowException

    try:
        return int(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def _log(
    mlflow: Any,
    files: Mapping[str, Path],
    document: Mapping[str, Any],
    reports: Mapping[str, str | os.PathLike[str]] | None,
    target: str,
    version: Any,
    experiment: str | None,
    tmp: Path,
) -> tuple[Any, str]:
    """One run that logs the model with its files, figures and tags; then the model version."""
    import mlflow.onnx
    import onnx

    model_bytes = files["model"].read_bytes()
    proto = onnx.load_model_from_string(model_bytes)
    same = hashlib.sha256(proto.SerializeToString()).hexdigest() == version.artefacts["model"]
    extra = tmp / "extra"
    extra.mkdir()
    manifest: list[dict[str, Any]] = []
    for role, path in sorted(files.items()):
        if role.partition(".")[0] not in PUBLISHED_ROLES or (role == "model" and same):
            continue
        shutil.copyfile(path, extra / path.name)
        manifest.append(_entry(role, path, f"extra_files/{path.name}"))
    if same:
        manifest.append(_entry("model", files["model"], "model.onnx"))
    given = {k: Path(v) for k, v in (reports or {}).items()}
    if "report.json" not in given:
        (extra / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    for report_name, path in given.items():
        shutil.copyfile(path, extra / report_name)
    for report_name in sorted({"report.json", *given}):
        manifest.append(_entry("report", extra / report_name, f"extra_files/{report_name}"))
    (extra / MANIFEST).write_text(
        json.dumps({"format": 1, "source": version.ref, "files": manifest}, indent=2) + "\n"
    )
    tags = _tags(document, version)
    mlflow.set_experiment(experiment or DEFAULT_EXPERIMENT)
    with mlflow.start_run(run_name=version.ref, tags=tags) as run:
        mlflow.log_metrics(_metrics(document))
        info = mlflow.onnx.log_model(
            proto,
            name="model",
            extra_files=[str(p) for p in sorted(extra.iterdir())],
            save_as_external_data=False,
            pip_requirements=mlflow.onnx.get_default_pip_requirements(),
        )
        for path in sorted(extra.iterdir()):  # the run's page shows the reports too
            mlflow.log_artifact(str(path), artifact_path="onnxgate")
    registered = mlflow.register_model(
        info.model_uri,
        target,
        tags={TAG_REF: version.ref, TAG_SHA: version.artefacts["model"], **_version_tags(version)},
    )
    return registered, run.info.run_id


def _entry(role: str, path: Path, where: str) -> dict[str, Any]:
    sha, size = sha256_path(path)
    return {"role": role, "name": path.name, "path": where, "sha256": sha, "size": size}


def _version_tags(version: Any) -> dict[str, str]:
    return {
        "onnxgate.gate": "passed" if version.passed else "failed",
        "onnxgate.status": version.status,
    }


def _tags(document: Mapping[str, Any], version: Any) -> dict[str, str]:
    """The run's provenance: what the model came from, which onnxgate judged it, where."""
    environment = document.get("environment") or {}
    tags = {
        TAG_REF: version.ref,
        TAG_SHA: version.artefacts["model"],
        "onnxgate.gate": "passed" if version.passed else "failed",
        "onnxgate.source": str(document.get("source") or ""),
        "onnxgate.config_hash": str(document.get("config_hash") or ""),
        "onnxgate.started": str(document.get("started") or ""),
    }
    for key in ("onnxgate", "onnxruntime", "onnx", "fingerprint", "cpu"):
        if environment.get(key):
            tags[f"onnxgate.env.{key}"] = str(environment[key])
    return {k: v[:5000] for k, v in tags.items() if v}


def _metrics(document: Mapping[str, Any]) -> dict[str, float]:
    """Every numeric figure of every step as ``STEP.FIGURE``, booleans as 0/1, and the verdict."""
    metrics: dict[str, float] = {"gate.passed": float(bool(document.get("passed")))}
    for step in document.get("steps") or ():
        if not isinstance(step, Mapping):
            continue
        metrics[f"{step.get('name')}.passed"] = float(step.get("status") == "passed")
        for key, value in (step.get("figures") or {}).items():
            if isinstance(value, bool | int | float) and value == value:  # not NaN
                metrics[_metric_key(f"{step.get('name')}.{key}")] = float(value)
    return metrics


def _metric_key(key: str) -> str:
    """MLflow takes letters, digits, ``_-. /`` in a metric's name."""
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)[:250]
