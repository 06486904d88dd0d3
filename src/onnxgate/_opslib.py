"""Custom operator libraries: what ``--ops-library`` names, and the file and identity behind it.

A library is named by a path to a shared library (``libcustom_ops.so``) or by the name of a
package that ships one (``onnxruntime-extensions``). Sessions register the library by the same
name wherever they are made (``runners._session`` resolves it there, in the environment that makes
the session); the contract records the identity resolved here: name, version and the file's
sha256, so that a host whose library differs is refused.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from onnxgate._words import setting
from onnxgate.errors import ConfigError, ExtraMissing

EXTENSIONS = "onnxruntime-extensions"
"""The package name that stands for onnxruntime-extensions' library (``get_library_path()``)."""

PACKAGES = (EXTENSIONS,)
"""Package names ``--ops-library`` takes instead of a path."""


@dataclass(frozen=True)
class OpsLibrary:
    """One custom operator library as found on this host."""

    spec: str
    """As named: a path, or a package name from ``PACKAGES``."""
    name: str
    """The package name, or the file's name for a path."""
    version: str | None
    """The package's version; None for a bare file."""
    sha256: str
    path: Path

    def requirement(self) -> dict[str, Any]:
        """The library as the contract records it."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256}


def library_spec(spec: str | os.PathLike[str]) -> str:
    """The spec as sessions and records hold it: a package name as is, a path made absolute.

    Raises:
        ConfigError: an empty spec.
    """
    text = os.fspath(spec).strip()
    if not text:
        raise ConfigError(
            "an empty custom operator library was named.",
            hint=f"Name a shared library file or {EXTENSIONS}.",
            field="ops_libraries",
        )
    if text in PACKAGES:
        return text
    return str(Path(text).expanduser().absolute())


def library_specs(value: Any) -> Any:
    """A config's list of libraries as specs (``library_spec``), duplicates dropped, in order.

    For a ``mode="before"`` validator: one spec or a list of them; anything else is left for the
    field's own type check.
    """
    if isinstance(value, str | os.PathLike):
        value = [value]
    if isinstance(value, list | tuple):
        return tuple(dict.fromkeys(library_spec(item) for item in value))
    return value


def package_library(name: str) -> tuple[Path, str]:
    """(library file, version) of a package from ``PACKAGES``, installed beside onnxgate.

    Raises:
        ExtraMissing: the package is not installed.
    """
    try:
        version = metadata.version(name)
        found = importlib.util.find_spec("onnxruntime_extensions")
    except (metadata.PackageNotFoundError, ImportError) as err:
        found = None
        missing: Exception | None = err
    else:
        missing = None
    if found is None:
        raise ExtraMissing(
            f"the custom operator library {name} is named but not installed.", extra="extensions"
        ) from missing
    # get_library_path() is the file of its _extensions_pydll module; importing the package to
    # ask takes seconds (it imports transformers), so the file is found beside its __init__
    for folder in found.submodule_search_locations or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            library = Path(folder) / f"_extensions_pydll{suffix}"
            if library.is_file():
                return library, version
    return Path(import_extensions().get_library_path()), version


PROTOBUF_IMPLEMENTATION = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def import_extensions() -> Any:
    """``onnxruntime_extensions``, imported without changing this process's environment.

    Its ``cvt`` module sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` in ``os.environ``
    on import: every process started afterwards (bench workers, servers, runtimes) would run
    the pure-Python protobuf, many times slower and stricter about strings. The variable is put
    back as it was.
    """
    before = os.environ.get(PROTOBUF_IMPLEMENTATION)
    try:
        import onnxruntime_extensions
    finally:
        if before is None:
            os.environ.pop(PROTOBUF_IMPLEMENTATION, None)
        else:
            os.environ[PROTOBUF_IMPLEMENTATION] = before
    return onnxruntime_extensions


def require_file(path: Path, spec: str) -> None:
    """Refuse a library path that is not a file, before a session is asked to load it.

    Raises:
        ConfigError: no such file, or a folder.
    """
    if not path.is_file():
        raise ConfigError(
            f"custom operator library {spec}: "
            + ("a folder, not a file." if path.is_dir() else "no such file."),
            hint="Give the path of the shared library (.so, .dylib, .dll) that implements the "
            f"model's custom operators ({setting('ops_libraries', ['PATH'])}), or {EXTENSIONS}.",
            field="ops_libraries",
        )


def resolve_ops_library(spec: str | os.PathLike[str]) -> OpsLibrary:
    """The file behind a library spec, with its identity.

    Raises:
        ConfigError: the path is not a readable regular file.
        ExtraMissing: a named package is not installed.
    """
    text = library_spec(spec)
    if text in PACKAGES:
        path, version = package_library(text)
        name: str = text
    else:
        path, version, name = Path(text), None, Path(text).name
    require_file(path, text)
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as err:
        raise ConfigError(
            f"custom operator library {path}: cannot be read ({err.strerror or err}).",
            field="ops_libraries",
        ) from err
    return OpsLibrary(text, name, version, digest.hexdigest(), path)
