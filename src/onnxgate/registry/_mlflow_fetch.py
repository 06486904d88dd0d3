"""Fetch an MLflow model version that ``registry publish mlflow`` published, checked for ``serve``.

The version's files are downloaded with MLflow's client into a folder of the cache named by the
server and the version's source, laid out by the manifest published with them (``onnxgate.json``)
as ``registry fetch`` lays a version out, and every file is hashed against the manifest and the
model against its contract before anything runs it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from onnxgate._pathtext import mask_uri
from onnxgate.errors import ArtefactCorrupt, ConfigError, MlflowNotFound
from onnxgate.registry._mlflow import (
    MANIFEST,
    PREFIX,
    TAG_REF,
    _import_mlflow,
    _Record,
    _talking_to,
    _without_credentials,
    probe,
    tracking_uri,
)
from onnxgate.registry._records import check_alias
from onnxgate.registry._store import sha256_path

log = logging.getLogger(__name__)


class MlflowFetch(_Record):
    """An MLflow model version laid out in a folder for ``serve`` (see :func:`fetch_mlflow`)."""

    name: str
    version: int
    alias: str | None
    folder: str
    model: str
    """The model file: the contract, golden samples and report.json are beside it."""
    source: str | None
    """The onnxgate version it was published from (its tag), if any."""


def parse_mlflow_ref(ref: str) -> tuple[str, int | str]:
    """``mlflow:/models/NAME@ALIAS`` → (NAME, ALIAS); ``mlflow:/models/NAME/3`` → (NAME, 3).

    Raises:
        ConfigError: the reference is not one of those forms.
    """
    body = ref.removeprefix(PREFIX).lstrip("/")
    what = body.removeprefix("models/")
    name, at, alias = what.partition("@")
    if body.startswith("models/") and at and name and "/" not in name:
        return name, check_alias(alias)
    name, slash, number = what.rpartition("/")
    if body.startswith("models/") and slash and name and number.isdigit():
        return name, int(number)
    raise ConfigError(
        f"{ref!r} is not an MLflow model reference.",
        hint="Use mlflow:/models/NAME@ALIAS (mlflow:/models/bert@champion) or "
        "mlflow:/models/NAME/VERSION (mlflow:/models/bert/3).",
    )


def is_mlflow_ref(ref: str) -> bool:
    """A reference to a model version on an MLflow tracking server (``mlflow:/models/…``)."""
    return ref.startswith(PREFIX)


def fetch_mlflow(
    ref: str,
    uri: str | None,
    cache: Path,
    *,
    progress: Callable[[str], None] | None = None,
) -> MlflowFetch:
    """Download an MLflow model version published by onnxgate into ``cache``, every file checked.

    The folder is ``cache/NAME@VERSION-<hash of the server and the version's source>``; a folder
    already complete is reused after its files are hashed again. The model is laid out with its
    contract, golden samples and ``report.json`` beside it, under the names ``registry fetch``
    gives them, so ``serve`` proves it as it proves a model file. A cached folder whose files
    no longer match is downloaded again.

    Raises:
        ConfigError: a malformed reference, or no tracking server named.
        MlflowNotFound: no such model, version or alias on the server.
        MlflowUnreachable: the server cannot be reached.
        ArtefactCorrupt: the version was not published by onnxgate, or a file's bytes are not
            the ones its manifest and the contract name.
    """
    name, which = parse_mlflow_ref(ref)
    uri = tracking_uri(uri)
    _import_mlflow()
    probe(uri)
    what = (
        f"mlflow:/models/{name}@{which}"
        if isinstance(which, str)
        else f"mlflow:/models/{name}/{which}"
    )
    with _talking_to(uri, f"fetching {what}") as mlflow:
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        if isinstance(which, str):
            _exists(client, name, uri)
            try:
                found = client.get_model_version_by_alias(name, which)
            except mlflow.exceptions.MlflowException as err:
                raise MlflowNotFound(
                    f"the MLflow model {name} at {mask_uri(uri)} has no alias {which!r}.",
                    hint=f"Publish a version with `onnxgate registry publish mlflow … --alias "
                    f"{which}`, or name a version: mlflow:/models/{name}/VERSION.",
                ) from err
        else:
            found = client.get_model_version(name, str(which))
        number = int(found.version)
        key = hashlib.sha256(
            f"{_without_credentials(uri)}|{found.source}|{found.run_id}".encode()
        ).hexdigest()[:12]
        folder = cache / f"{name}@{number}-{key}"
        model = None
        if _complete(folder):
            try:
                model = _verify(folder, _read_manifest(folder / MANIFEST, what), what)
            except ArtefactCorrupt as err:  # a damaged cache: fetched again, and checked again
                log.warning("%s; downloading it again", err.message)
        if model is None:
            if progress:
                progress(f"downloading {name}/{number} from MLflow {mask_uri(uri)}")
            _download(mlflow, name, number, folder, uri)
            model = _verify(folder, _read_manifest(folder / MANIFEST, what), what)
    return MlflowFetch(
        name=name,
        version=number,
        alias=which if isinstance(which, str) else None,
        folder=str(folder),
        model=str(model),
        source=(found.tags or {}).get(TAG_REF),
    )


def _exists(client: Any, name: str, uri: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise MlflowNotFound(
            f"no model named {name!r} in the MLflow registry at {mask_uri(uri)}.",
            hint="Check the name, or publish one: `onnxgate registry publish mlflow NAME@ALIAS "
            "--tracking-uri URI`.",
        ) from err


def _complete(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def _download(mlflow: Any, name: str, number: int, folder: Path, uri: str) -> None:
    """The version's files into ``folder``, laid out by the manifest; renamed into place whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mlflow-", dir=folder.parent) as tmp:
        got = Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=f"models:/{name}/{number}", dst_path=tmp, tracking_uri=uri
            )
        )
        what = f"mlflow:/models/{name}/{number}"
        manifest = _read_manifest(got / "extra_files" / MANIFEST, what)
        staged = Path(tmp) / "staged"
        staged.mkdir()
        inside = got.resolve()
        for item in manifest["files"]:
            source = got / str(item["path"])
            if not source.resolve().is_relative_to(inside):
                raise ArtefactCorrupt(
                    f"{what}: its {MANIFEST} names {item['path']!r}, outside the downloaded model.",
                    hint="Serve only versions published by `onnxgate registry publish mlflow`.",
                )
            if not source.is_file():
                raise ArtefactCorrupt(
                    f"{what}: {item['path']} is missing from the downloaded model.",
                    hint="Publish the version again with `onnxgate registry publish mlflow`.",
                )
            shutil.copyfile(source, staged / item["name"])
        shutil.copyfile(got / "extra_files" / MANIFEST, staged / MANIFEST)
        if folder.exists():
            shutil.rmtree(folder)
        staged.rename(folder)


def _read_manifest(path: Path, what: str) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        for item in files:
            if not all(isinstance(item[key], str) for key in ("name", "path", "role", "sha256")):
                raise TypeError(f"an entry that is not four strings: {str(item)[:200]!r}")
            if "/" in item["name"] or item["name"] in ("", ".", "..", MANIFEST):
                raise ValueError(f"file name {item['name']!r}")
    except FileNotFoundError as err:
        raise ArtefactCorrupt(
            f"{what} was not published by onnxgate: it has no {MANIFEST} (no contract to prove "
            "it against).",
            hint="Publish gated versions with `onnxgate registry publish mlflow`, and serve those.",
        ) from err
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ArtefactCorrupt(f"{what}: its {MANIFEST} is unreadable ({err}).") from err
    return manifest


def _verify(folder: Path, manifest: Mapping[str, Any], what: str) -> Path:
    """Every file's sha256 against the manifest, and the model's against the contract."""
    model: Path | None = None
    contract: Path | None = None
    for item in manifest["files"]:
        path = folder / item["name"]
        sha, _ = sha256_path(path) if path.is_file() else ("missing", 0)
        if sha != item["sha256"]:
            raise ArtefactCorrupt(
                f"{what}: {path} is not the file published (sha256 {sha[:16]}…, published "
                f"{str(item['sha256'])[:16]}…).",
                hint="Publish the version again with `onnxgate registry publish mlflow`.",
            )
        if item["role"] == "model":
            model = path
        elif item["role"] == "contract":
            contract = path
    if model is None or contract is None:
        raise ArtefactCorrupt(f"{what}: its {MANIFEST} names no model or no contract.")
    try:
        named = json.loads(contract.read_text())["identity"]["model"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ArtefactCorrupt(f"{what}: its contract {contract} is unreadable ({err}).") from err
    sha, _ = sha256_path(model)
    if sha != named:
        raise ArtefactCorrupt(
            f"{what}: the model {model} (sha256 {sha[:16]}…) is not the one its contract names "
            f"({str(named)[:16]}…).",
            hint="Serve a version published by `onnxgate registry publish mlflow`.",
        )
    return model
