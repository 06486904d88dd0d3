"""The reading half of the registry: references resolved, rows turned into records.

Every function takes an open session and returns records (``_records``), never rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select  # noqa: TID251
from sqlalchemy.orm import Session  # noqa: TID251

from onnxgate.errors import NotFound
from onnxgate.registry._models import (
    AliasRow,
    GateRunRow,
    GateStepRow,
    ModelTag,
    ModelVersionRow,
    PerformanceRow,
    PromotionRow,
    RegisteredModel,
    VersionArtefact,
)
from onnxgate.registry._records import (
    ArtefactRecord,
    GateRunRecord,
    ModelSummary,
    ModelVersion,
    PerformanceRecord,
    PromotionRecord,
    ShadowRunRecord,
    StepRecord,
    VersionDetail,
    parse_ref,
)


def version_numbers(session: Session, model_id: int) -> dict[int, int]:
    """Every version of one model: its row id to its number."""
    rows = session.execute(
        select(ModelVersionRow.id, ModelVersionRow.number).where(
            ModelVersionRow.model_id == model_id
        )
    )
    return dict(rows.all())


def utc(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands back naive ones)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def find_model(session: Session, name: str, where: str) -> RegisteredModel:
    """The model named ``name``; NotFound names the registry (``where``) and what it holds."""
    model = session.scalar(select(RegisteredModel).where(RegisteredModel.name == name))
    if model is None:
        known = session.scalars(select(RegisteredModel.name).order_by(RegisteredModel.name))
        names = list(known)[:10]
        raise NotFound(
            f"no registered model named {name!r} in {where}.",
            hint=f"Registered models: {', '.join(names)}." if names else "The registry is empty.",
        )
    return model


def model_name(session: Session, model_id: int) -> str:
    """The name of a model by id."""
    return session.get_one(RegisteredModel, model_id).name


def resolve(session: Session, ref: str, where: str) -> ModelVersionRow:
    """The version row ``NAME``, ``NAME@NUMBER`` or ``NAME@ALIAS`` names, or NotFound."""
    name, which = parse_ref(ref)
    model = find_model(session, name, where)
    if isinstance(which, str):
        row = session.scalar(
            select(ModelVersionRow)
            .join(AliasRow, AliasRow.version_id == ModelVersionRow.id)
            .where(AliasRow.model_id == model.id, AliasRow.alias == which)
        )
        if row is None:
            known = session.scalars(
                select(AliasRow.alias).where(AliasRow.model_id == model.id).order_by(AliasRow.alias)
            ).all()
            raise NotFound(
                f"{name} has no alias {which!r}.",
                hint=f"Its aliases: {', '.join(known)}."
                if known
                else f"It has no aliases yet; set one with `onnxgate registry promote {name}@N {which}`.",
            )
        return row
    number = which if which is not None else model.last_version
    row = session.scalar(
        select(ModelVersionRow).where(
            ModelVersionRow.model_id == model.id, ModelVersionRow.number == number
        )
    )
    if row is None:
        raise NotFound(
            f"{name} has no version {number}." if which is not None else f"{name} has no versions.",
            hint=f"Its versions are 1 to {model.last_version}." if model.last_version else None,
        )
    return row


def artefacts(session: Session, version_id: int) -> list[VersionArtefact]:
    """A version's artefact rows, by role."""
    return list(
        session.scalars(
            select(VersionArtefact)
            .where(VersionArtefact.version_id == version_id)
            .order_by(VersionArtefact.role)
        )
    )


def records(session: Session, name: str, rows: list[ModelVersionRow] | Any) -> list[ModelVersion]:
    """Version rows of model ``name`` as records, with their aliases and digests."""
    rows = list(rows)
    ids = [r.id for r in rows]
    aliases: dict[int, list[str]] = {}
    digests: dict[int, dict[str, str]] = {}
    if ids:
        for version_id, alias in session.execute(
            select(AliasRow.version_id, AliasRow.alias)
            .where(AliasRow.version_id.in_(ids))
            .order_by(AliasRow.alias)
        ):
            aliases.setdefault(version_id, []).append(alias)
        for a in session.scalars(
            select(VersionArtefact).where(VersionArtefact.version_id.in_(ids))
        ):
            digests.setdefault(a.version_id, {})[a.role] = a.sha256
    return [
        ModelVersion(
            name=name,
            number=r.number,
            status=r.status,  # type: ignore[arg-type]
            passed=r.passed,
            aliases=tuple(aliases.get(r.id, ())),
            created_at=utc(r.created_at),
            created_by=r.created_by,
            artefacts=dict(sorted(digests.get(r.id, {}).items())),
        )
        for r in rows
    ]


def summaries(session: Session) -> list[ModelSummary]:
    """Every registered model with its version count, latest number, aliases and tags."""
    models = session.scalars(select(RegisteredModel).order_by(RegisteredModel.name)).all()
    counts = dict(
        session.execute(
            select(ModelVersionRow.model_id, func.count()).group_by(ModelVersionRow.model_id)
        ).all()
    )
    tags: dict[int, dict[str, str]] = {}
    for tag in session.scalars(select(ModelTag)):
        tags.setdefault(tag.model_id, {})[tag.key] = tag.value
    aliases: dict[int, dict[str, int]] = {}
    for model_id, alias, number in session.execute(
        select(AliasRow.model_id, AliasRow.alias, ModelVersionRow.number)
        .join(ModelVersionRow, ModelVersionRow.id == AliasRow.version_id)
        .order_by(AliasRow.alias)
    ):
        aliases.setdefault(model_id, {})[alias] = number
    return [
        ModelSummary(
            name=m.name,
            description=m.description,
            tags=tags.get(m.id, {}),
            versions=counts.get(m.id, 0),
            latest=m.last_version or None,
            aliases=aliases.get(m.id, {}),
            updated_at=utc(m.updated_at),
        )
        for m in models
    ]


def gate_runs(session: Session, version_id: int) -> list[GateRunRecord]:
    """The gate runs of a version with their steps, oldest (the registering run) first."""
    runs = []
    for run in session.scalars(
        select(GateRunRow).where(GateRunRow.version_id == version_id).order_by(GateRunRow.id)
    ):
        steps = session.scalars(
            select(GateStepRow).where(GateStepRow.run_id == run.id).order_by(GateStepRow.position)
        )
        runs.append(
            GateRunRecord(
                id=run.id,
                passed=run.passed,
                started=run.started,
                seconds=run.seconds,
                fingerprint=run.fingerprint,
                config_hash=run.config_hash,
                recorded_at=utc(run.recorded_at),
                steps=[
                    StepRecord(
                        name=s.name,
                        status=s.status,
                        seconds=s.seconds,
                        summary=s.summary,
                        reason=s.reason,
                        figures=s.figures,
                    )
                    for s in steps
                ],
            )
        )
    return runs


def detail(
    session: Session, row: ModelVersionRow, *, shadow_runs: Sequence[ShadowRunRecord] = ()
) -> VersionDetail:
    """Everything recorded about one version; its ``shadow_runs`` come from ``_shadow.runs_of``."""
    model = session.get_one(RegisteredModel, row.model_id)
    tags = {
        t.key: t.value
        for t in session.scalars(select(ModelTag).where(ModelTag.model_id == model.id))
    }
    performance = [
        PerformanceRecord(
            fingerprint=p.fingerprint,
            step=p.step,
            figures=p.figures,
            recorded_at=utc(p.recorded_at),
            run_id=p.run_id,
        )
        for p in session.scalars(
            select(PerformanceRow)
            .where(PerformanceRow.version_id == row.id)
            .order_by(PerformanceRow.id)
        )
    ]
    numbers = version_numbers(session, model.id)
    promotions = [
        PromotionRecord(
            alias=p.alias,
            version=numbers[p.version_id],
            previous=numbers.get(p.previous_version_id) if p.previous_version_id else None,
            forced=p.forced,
            reason=p.reason,
            by=p.promoted_by,
            at=utc(p.promoted_at),
            evidence=p.evidence,
        )
        for p in session.scalars(
            select(PromotionRow).where(PromotionRow.version_id == row.id).order_by(PromotionRow.id)
        )
    ]
    return VersionDetail(
        version=records(session, model.name, [row])[0],
        description=model.description,
        tags=tags,
        source=row.source,
        artefacts=[
            ArtefactRecord(role=a.role, filename=a.filename, sha256=a.sha256, size=a.size)
            for a in artefacts(session, row.id)
        ],
        gate_runs=gate_runs(session, row.id),
        performance=performance,
        promotions=promotions,
        shadow_runs=list(shadow_runs),
    )
