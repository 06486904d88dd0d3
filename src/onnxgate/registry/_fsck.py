"""``fsck``: does every version have all it was registered with, and is every byte intact?

The database is read in one snapshot first, the store listed after it: a blob a committed version
names was in the store before the commit, so a registration running meanwhile can only add
orphans (blobs not yet referenced), never a false "missing blob". Orphans and temporary files are
reported, not counted as inconsistencies, and removed only when older than a grace period, so a
registration in progress keeps its blobs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select  # noqa: TID251
from sqlalchemy.orm import Session  # noqa: TID251

from onnxgate.registry._models import (
    AliasRow,
    GateRunRow,
    ModelVersionRow,
    RegisteredModel,
    VersionArtefact,
)
from onnxgate.registry._records import FsckProblem, FsckReport
from onnxgate.registry._store import ArtefactStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Snapshot:
    """What the database holds, as plain rows (no ORM instances), read in one transaction."""

    models: dict[int, Any]
    versions: dict[int, Any]
    artefacts: list[Any]
    with_runs: set[int]
    aliases: list[Any]

    def where(self, version_id: int) -> str:
        """``name@number`` of a version, as problems name it."""
        version = self.versions[version_id]
        return f"{self.models[version.model_id].name}@{version.number}"


def fsck(
    session: Session,
    store: ArtefactStore,
    registry: str,
    *,
    remove: bool = False,
    min_age: float = 3600.0,
    rehash: bool = True,
) -> FsckReport:
    """Check the registry read through ``session`` against ``store``; see the module docstring."""
    snapshot = _read_snapshot(session)
    session.rollback()  # end the snapshot before the (slow) store scan

    problems = _check_versions(snapshot)
    referenced: dict[str, list[Any]] = defaultdict(list)
    for artefact in snapshot.artefacts:
        referenced[artefact.sha256].append(artefact)
    problems += _check_blobs(snapshot, referenced, store, rehash=rehash)
    orphans, stray, removed = [], [], []
    blobs = blob_bytes = 0
    for item in store.list_blobs():
        if not item.blob:
            stray.append(item.where)
            continue
        blobs += 1
        blob_bytes += item.size
        if item.name not in referenced:
            orphans.append(item.name)
            if remove and item.age >= min_age:
                store.remove(item)
                removed.append(item.where)
    temp_files = []
    for item in store.list_leftovers():
        temp_files.append(item.where)
        if remove and item.age >= min_age:
            store.remove(item)
            removed.append(item.where)
    report = FsckReport(
        registry=registry,
        store=store.location,
        models=len(snapshot.models),
        versions=len(snapshot.versions),
        artefacts=len(snapshot.artefacts),
        blobs=blobs,
        blob_bytes=blob_bytes,
        hashed=rehash,
        problems=problems,
        orphans=orphans,
        temp_files=temp_files,
        stray=stray,
        removed=removed,
    )
    log.info(
        "fsck %s: %d problem(s), %d orphan(s), %d temp file(s), %d removed",
        registry,
        len(problems),
        len(orphans),
        len(temp_files),
        len(removed),
    )
    return report


def _read_snapshot(session: Session) -> _Snapshot:
    """The database's rows, read in ``session``'s transaction (the caller ends it)."""
    models = {
        m.id: m
        for m in session.execute(
            select(RegisteredModel.id, RegisteredModel.name, RegisteredModel.last_version)
        )
    }
    versions = {
        v.id: v
        for v in session.execute(
            select(
                ModelVersionRow.id,
                ModelVersionRow.model_id,
                ModelVersionRow.number,
                ModelVersionRow.artefact_count,
            )
        )
    }
    artefacts = session.execute(
        select(
            VersionArtefact.version_id,
            VersionArtefact.role,
            VersionArtefact.sha256,
            VersionArtefact.size,
        )
    ).all()
    with_runs = set(session.scalars(select(GateRunRow.version_id).distinct()))
    aliases = session.execute(select(AliasRow.model_id, AliasRow.alias, AliasRow.version_id)).all()
    return _Snapshot(models, versions, list(artefacts), with_runs, list(aliases))


def _check_versions(snapshot: _Snapshot) -> list[FsckProblem]:
    """Versions whole, with a gate run, numbered without gaps; aliases on their own model."""
    models, versions = snapshot.models, snapshot.versions
    where = snapshot.where
    problems: list[FsckProblem] = []
    counted: dict[int, int] = defaultdict(int)
    for artefact in snapshot.artefacts:
        counted[artefact.version_id] += 1
    numbers: dict[int, set[int]] = defaultdict(set)
    for version in versions.values():
        numbers[version.model_id].add(version.number)
        have = counted.get(version.id, 0)
        if have != version.artefact_count or have == 0:
            problems.append(
                FsckProblem(
                    kind="missing-artefacts",
                    where=where(version.id),
                    detail=f"{have} artefact row(s), registered with {version.artefact_count}",
                )
            )
        if version.id not in snapshot.with_runs:
            problems.append(
                FsckProblem(kind="no-gate-run", where=where(version.id), detail="no gate run")
            )
    for model in models.values():
        expected = set(range(1, model.last_version + 1))
        missing, extra = expected - numbers[model.id], numbers[model.id] - expected
        if missing or extra:
            detail = []
            if missing:
                detail.append(f"versions {_ranges(missing)} are missing")
            if extra:
                detail.append(f"versions {_ranges(extra)} exceed the counter {model.last_version}")
            problems.append(FsckProblem(kind="gap", where=model.name, detail="; ".join(detail)))
    for alias in snapshot.aliases:
        target = versions.get(alias.version_id)
        name = models[alias.model_id].name if alias.model_id in models else str(alias.model_id)
        if target is None or target.model_id != alias.model_id:
            problems.append(
                FsckProblem(
                    kind="dangling-alias",
                    where=f"{name}@{alias.alias}",
                    detail=f"points at version id {alias.version_id}, not a version of {name}",
                )
            )
    return problems


def _check_blobs(
    snapshot: _Snapshot, referenced: dict[str, list[Any]], store: ArtefactStore, *, rehash: bool
) -> list[FsckProblem]:
    """Every referenced blob present, of the recorded size, with the recorded sha256."""
    problems: list[FsckProblem] = []
    for sha256, users in sorted(referenced.items()):
        size = store.size(sha256)
        actual = store.hash(sha256) if rehash and size is not None else None
        for artefact in users:
            spot = f"{snapshot.where(artefact.version_id)} {artefact.role}"
            if size is None:
                problems.append(
                    FsckProblem(kind="missing-blob", where=spot, detail=f"blob {sha256} is missing")
                )
            elif size != artefact.size:
                problems.append(
                    FsckProblem(
                        kind="bad-size",
                        where=spot,
                        detail=f"blob {sha256} has {size} bytes, registered with {artefact.size}",
                    )
                )
            elif actual is not None and actual != sha256:
                problems.append(
                    FsckProblem(
                        kind="bad-sha256",
                        where=spot,
                        detail=f"blob {sha256} hashes to {actual}",
                    )
                )
    return problems


def _ranges(numbers: set[int]) -> str:
    """``{1, 2, 3, 7}`` → ``1-3, 7``."""
    ordered = sorted(numbers)
    parts: list[str] = []
    start = prev = ordered[0]
    for n in ordered[1:] + [None]:  # type: ignore[list-item]
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        if n is not None:
            start = prev = n
    return ", ".join(parts)
