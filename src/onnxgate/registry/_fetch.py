"""``fetch``: write a version's files where ``onnxgate verify`` and a server expect them.

Names follow the contract's convention (``contract_paths``): ``<name>.onnx`` with
``<name>.contract.json`` and ``<name>.golden.npz`` beside it; a variant role such as
``model.int8`` becomes ``<name>.int8.onnx``. The contract's bytes are never rewritten (its sha256
is what the registry vouches for), so when it names its golden file differently (a model
registered under another name than the one it was exported as), the golden file is written
under that name too, and ``onnxgate verify OUT/<name>.onnx`` finds it. Other artefacts (external
data) keep the file name they were registered with, which is what the model refers to; a step
folder's files (``web/mnist.ort``) keep their path in the run folder, checked to stay inside ``out``.

Every file is copied through a temporary file while its sha256 is checked against the
registry's, renamed into place, then read back and hashed again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from onnxgate.errors import ArtefactCorrupt
from onnxgate.registry._records import FetchedFile, FetchResult, VersionDetail
from onnxgate.registry._store import ArtefactStore, sha256_path

log = logging.getLogger(__name__)

SUFFIXES = {"model": ".onnx", "contract": ".contract.json", "golden": ".golden.npz"}
CONTRACT_LIMIT = 64 << 20
"""Contracts are small JSON documents; a larger blob is not parsed for its golden file's name."""


def _plain(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def _relative(role: str) -> bool:
    """``web/mnist.ort``: a path inside the output folder (no ``..``, not absolute, no backslash)."""
    parts = role.split("/")
    return len(parts) > 1 and ":" not in role and all(_plain(part) for part in parts)


def file_name(name: str, role: str, registered: str) -> str:
    """The file name of an artefact under the output folder.

    ``model`` → ``NAME.onnx``, ``contract.int8`` → ``NAME.int8.contract.json``; a role that is a
    path in the run folder (``web/mnist.ort``, a step's folder) keeps that path, so that the files
    of two steps' folders neither collide nor land beside the gated model; another role keeps its
    registered file name (or the role itself, flattened, when that is not a plain name).
    """
    kind, _, variant = role.partition(".")
    if kind in SUFFIXES:
        return (f"{name}.{variant}" if variant else name) + SUFFIXES[kind]
    if _relative(role):
        return role
    return registered if _plain(registered) else role.replace("/", "_").replace("\\", "_")


def _golden_name(store: ArtefactStore, sha256: str) -> str | None:
    """The golden file a contract names (``golden.file``), when it is a plain file name."""
    data = store.read_bytes(sha256, CONTRACT_LIMIT)
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    golden = document.get("golden") if isinstance(document, dict) else None
    named = golden.get("file") if isinstance(golden, dict) else None
    return named if isinstance(named, str) and _plain(named) else None


def materialise(store: ArtefactStore, detail: VersionDetail, out: Path) -> FetchResult:
    """Write every artefact of ``detail`` under ``out``, checked twice against its sha256.

    Raises:
        ArtefactCorrupt: a blob is missing or damaged, or a written file does not re-hash.
    """
    version = detail.version
    out.mkdir(parents=True, exist_ok=True)
    by_role = {a.role: a for a in detail.artefacts}
    plan: list[tuple[str, str]] = []  # (role, file name)
    taken: set[str] = set()
    for artefact in detail.artefacts:
        target = file_name(version.name, artefact.role, artefact.filename)
        if target in taken:
            target = f"{version.name}.{artefact.role}".replace("/", "_").replace("\\", "_")
        taken.add(target)
        plan.append((artefact.role, target))
    for role, _ in list(plan):
        kind, _, variant = role.partition(".")
        golden_role = "golden" + (f".{variant}" if variant else "")
        if kind != "contract" or golden_role not in by_role:
            continue
        contract = by_role[role]
        named = _golden_name(store, contract.sha256)
        if named and named not in taken:
            taken.add(named)
            plan.append((golden_role, named))
    files = []
    for role, target in plan:
        artefact = by_role[role]
        path = out / target
        store.copy_out(artefact.sha256, artefact.size, path)
        written, size = sha256_path(path)
        if written != artefact.sha256 or size != artefact.size:
            raise ArtefactCorrupt(
                f"{path} does not read back as written: sha256 {written}, expected "
                f"{artefact.sha256} ({version.ref} {role}).",
                hint="The output folder's disk may be failing or full; fetch elsewhere.",
            )
        files.append(FetchedFile(role=role, path=str(path), sha256=written, size=size))
    log.info("fetched %s into %s (%d files)", version.ref, out, len(files))
    return FetchResult(version=version, out=str(out), files=files)
