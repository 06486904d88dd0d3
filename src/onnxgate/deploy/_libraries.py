"""Custom operator libraries in a Triton model repository: chosen, copied and checked.

Triton's ONNX Runtime backend registers each ``model_operations { op_library_filename }`` of a
model's config in its sessions, handing the string to ``RegisterCustomOpsLibrary`` unchanged: a
relative name is resolved by the dynamic loader (the server's working folder, or its library
path), not against the repository. So ``deploy triton`` copies each library the contract requires
into the version folder it writes, beside the model, and names it by its absolute path as the
server sees the repository (``repository_path``: a container's mount point, or where it was
written). The copy must be the file the model was gated with: its sha256 is the contract's.

``deploy check`` maps each named path back into the model's folder (the path's part after the
model's own folder name), and holds the files there against the contracts of the served
versions: a file missing, or not the one a contract requires, is DPL027; a library a contract
requires that the config does not name is DPL028. A Python extension module (onnxruntime-extensions'
pip build is one) is a DPL027 warning: its Python C API symbols stay unresolved in a tritonserver
process, which has no interpreter.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from onnxgate._opslib import EXTENSIONS, OpsLibrary, resolve_ops_library
from onnxgate._words import setting
from onnxgate.contract_store import sha256_file
from onnxgate.deploy._findings import Findings
from onnxgate.errors import ConfigError


def deployed_libraries(
    contract: Any, named: Sequence[str], where: Path, notes: list[str]
) -> list[OpsLibrary]:
    """The library files to deploy with ``where``'s model: the contract's, then any other named.

    A requirement is met by a named file of its sha256, else by the file of its name (a named
    file, or the installed onnxruntime-extensions) when the sha256 agrees.

    Raises:
        ConfigError: a required library has no file here, or its file is not the one the
            contract records (another build or release). ExtraMissing: onnxruntime-extensions
            is required and not installed.
    """
    given = [resolve_ops_library(spec) for spec in named]
    chosen: list[OpsLibrary] = []
    for need in contract.requirements.ops_libraries:
        found = next((lib for lib in given if lib.sha256 == need.sha256), None)
        if found is None:
            found = next((lib for lib in given if lib.name == need.name), None)
            if found is None and need.name == EXTENSIONS:
                found = resolve_ops_library(EXTENSIONS)
            label = f"{need.name} {need.version}" if need.version else need.name
            if found is None:
                raise ConfigError(
                    f"{where}: its contract requires the custom operator library {label} "
                    f"(sha256 {need.sha256}), and no file of it was named.",
                    hint=f"Name the library file the model was gated with: "
                    f"{setting('ops_libraries', ['PATH'])}.",
                    field="ops_libraries",
                )
            if found.sha256 != need.sha256:
                raise ConfigError(
                    f"{where}: its contract requires the custom operator library {label} with "
                    f"sha256 {need.sha256}; {found.path} has sha256 {found.sha256} (another "
                    "build or release).",
                    hint="Name the library file the model was gated with, or gate the model "
                    "again with this one.",
                    field="ops_libraries",
                )
        if found not in chosen:
            chosen.append(found)
    for lib in given:
        if lib not in chosen:
            chosen.append(lib)
            notes.append(
                f"custom operator library {lib.path.name} deployed though the contract does not "
                "require it (the gate did not prove the model with it)"
            )
    files = [lib.path.name for lib in chosen]
    twice = sorted({f for f in files if files.count(f) > 1})
    if twice:
        raise ConfigError(
            f"two custom operator libraries have the same file name {twice[0]}; both would be "
            "copied to one file in the version folder.",
            hint="Rename one of the files.",
            field="ops_libraries",
        )
    return chosen


def served_path(repository: str, name: str, version: int, file: str) -> str:
    """A library's path in the version folder as the server sees the repository."""
    return str(PurePosixPath(repository) / name / str(version) / file)


def local_file(model_dir: Path, named: str) -> Path | None:
    """Where a path the config names lies in the model folder, or None when outside it."""
    parts = PurePosixPath(named).parts
    inside = [i for i, part in enumerate(parts) if part == model_dir.name]
    if not inside or inside[-1] == len(parts) - 1:
        return None
    rest = parts[inside[-1] + 1 :]
    if any(part in ("", ".", "..") for part in rest):
        return None
    return model_dir.joinpath(*rest)


def check_libraries(
    config: Any, model_dir: Path, contracts: dict[str, Any], found: Findings
) -> None:
    """DPL027 and DPL028: the libraries the config names against the served versions' contracts.

    Args:
        config: the parsed ``ModelConfig``.
        model_dir: the model's folder.
        contracts: each served version's contract (``NAME/VERSION`` → contract), where read.
        found: where findings go.
    """
    name = model_dir.name
    redeploy = "Deploy the gated model again (onnxgate deploy triton), which copies the library."
    present: dict[str, str] = {}  # the path the config names → its file's sha256
    missing: list[str] = []
    for named in config.model_operations.op_library_filename:
        local = local_file(model_dir, named)
        if local is None:
            found.add(
                "DPL027", "warning", name,
                f"model_operations names {named}, outside the model's folder: not checked (the "
                "server must hold that file, built for its ONNX Runtime)",
                "Keep the library in the model's folder so it travels with the model.",
            )  # fmt: skip
            continue
        try:
            present[named] = sha256_file(local)
            if python_module(local):
                found.add(
                    "DPL027", "warning", name,
                    f"{named} is a Python extension module (onnxruntime-extensions' pip build): "
                    "it needs a Python interpreter's C API, which a tritonserver process does not "
                    "have, so Triton fails to load it ('undefined symbol: Py...')",
                    PYTHON_MODULE_HINT,
                )  # fmt: skip
        except FileNotFoundError:
            missing.append(named)
            found.add(
                "DPL027", "error", name,
                f"model_operations names {named}, and {local} is missing: Triton fails to load "
                "the model",
                redeploy,
            )  # fmt: skip
        except OSError as err:
            missing.append(named)
            found.add("DPL027", "error", name, f"{local} cannot be read: {err.strerror or err}")
    for where, contract in contracts.items():
        for need in contract.requirements.ops_libraries:
            if need.sha256 in present.values() or any(_named(n, need) for n in missing):
                continue  # met, or its file is missing (said above)
            label = f"{need.name} {need.version}" if need.version else need.name
            same = [n for n in present if _named(n, need)]
            if same:
                found.add(
                    "DPL027", "error", where,
                    f"{same[0]} is not the custom operator library {label} its contract requires "
                    f"(sha256 {need.sha256} differs)",
                    redeploy,
                )  # fmt: skip
            else:
                found.add(
                    "DPL028", "error", where,
                    f"its contract requires the custom operator library {label} (sha256 "
                    f"{need.sha256}) and model_operations names no such file: Triton cannot "
                    "load the model's custom operators",
                    redeploy,
                )  # fmt: skip


PYTHON_MODULE_HINT = (
    "Gate and deploy the model with onnxruntime-extensions built as a plain shared library "
    "(libortextensions.so: build.sh at the root of its source) for the server's ONNX Runtime, "
    "or start "
    "the server with that Python's libpython preloaded (LD_PRELOAD)."
)


def python_module(path: Path) -> bool:
    """Whether a library file is a Python extension module (it exports ``PyInit_``).

    Such a file (``_extensions_pydll.cpython-311-x86_64-linux-gnu.so``, or a renamed copy) leaves
    the Python C API unresolved for the interpreter that imports it to provide.
    """
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(b"PyInit_") >= 0
    except (OSError, ValueError):  # unreadable (said elsewhere), or empty
        return False


def _named(path: str, need: Any) -> bool:
    """Whether a named path is, by its file name, the required library."""
    file = PurePosixPath(path).name
    return file == need.name or (need.name == EXTENSIONS and "extensions" in file)
