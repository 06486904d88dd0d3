"""The writing half of the registry: rows of one registration, alias moves, upserts.

Every function here runs inside the one transaction its caller opened (``Registry._writing``);
none commits. See ``_registry`` for the order that makes a registration kill-safe.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select, update  # noqa: TID251
from sqlalchemy.orm import Session  # noqa: TID251

from onnxgate.errors import ConfigError
from onnxgate.registry._models import (
    AliasRow,
    GateRunRow,
    GateStepRow,
    PerformanceRow,
    PromotionRow,
    RegisteredModel,
)

PERFORMANCE_STEPS = ("bench", "tune")
"""Gate steps whose figures are performance, filed under the run's machine fingerprint."""


def now() -> datetime:
    """The current time in UTC (every stored time is UTC)."""
    return datetime.now(UTC)


def user() -> str:
    """The login name, or ``unknown`` where there is none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


def gate_document(gate: Any) -> dict[str, Any]:
    """The gate report as JSON data (a GateReport or its ``model_dump(mode="json")``)."""
    if hasattr(gate, "model_dump"):
        document = gate.model_dump(mode="json")
    elif isinstance(gate, Mapping):
        document = dict(gate)
    else:
        raise ConfigError(f"gate must be a GateReport or a mapping, not {type(gate).__name__}.")
    if not isinstance(document.get("passed"), bool) or not isinstance(
        document.get("steps", []), list
    ):
        raise ConfigError(
            "the gate report has no boolean 'passed' or its 'steps' is not a list; pass the "
            "GateReport of the run (or its model_dump(mode='json'))."
        )
    return document


def upsert(
    session: Session, table: Any, values: dict[str, Any], keys: list[str], updates: list[str]
) -> None:
    """INSERT … ON CONFLICT (keys) DO UPDATE (or DO NOTHING without ``updates``)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert  # noqa: TID251
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert  # noqa: TID251
    else:  # a dialect without ON CONFLICT: the model's row lock serialises us already
        where = [getattr(table.c, k) == values[k] for k in keys]
        if session.execute(select(func.count()).select_from(table).where(*where)).scalar_one():
            if updates:
                session.execute(update(table).where(*where).values({k: values[k] for k in updates}))
        else:
            session.execute(insert(table).values(values))
        return
    statement = dialect_insert(table).values(values)
    if updates:
        statement = statement.on_conflict_do_update(
            index_elements=keys, set_={k: statement.excluded[k] for k in updates}
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=keys)
    session.execute(statement)


def next_number(session: Session, name: str, when: datetime) -> tuple[int, int]:
    """Create the model if new, lock its row and take the next version number."""
    upsert(
        session,
        RegisteredModel.__table__,
        {"name": name, "last_version": 0, "created_at": when, "updated_at": when},
        ["name"],
        [],
    )
    session.execute(
        update(RegisteredModel)
        .where(RegisteredModel.name == name)
        .values(last_version=RegisteredModel.last_version + 1, updated_at=when)
    )
    model_id, number = session.execute(
        select(RegisteredModel.id, RegisteredModel.last_version).where(RegisteredModel.name == name)
    ).one()
    return model_id, number


def add_run(
    session: Session,
    version_id: int,
    document: dict[str, Any],
    fingerprint: str,
    when: datetime,
) -> int:
    """Insert a gate run, its steps, and its bench/tune figures as performance rows."""
    run = GateRunRow(
        version_id=version_id,
        passed=document["passed"],
        started=str(document.get("started", ""))[:40],
        seconds=float(document.get("seconds") or 0.0),
        fingerprint=fingerprint[:64],
        config_hash=str(document.get("config_hash", ""))[:64],
        report=document,
        recorded_at=when,
    )
    session.add(run)
    session.flush()
    for position, step in enumerate(document.get("steps", [])):
        session.add(
            GateStepRow(
                run_id=run.id,
                position=position,
                name=str(step.get("name", "?"))[:32],
                status=str(step.get("status", "?"))[:16],
                seconds=float(step.get("seconds") or 0.0),
                summary=str(step.get("summary", "")),
                reason=step.get("reason"),
                figures=dict(step.get("figures") or {}),
            )
        )
        figures = step.get("figures") or {}
        # timings other load spoiled are kept in the run's steps, never as the version's speed
        if step.get("name") in PERFORMANCE_STEPS and ran(step) and figures:
            if figures.get("reliable") is False:
                continue
            session.add(
                PerformanceRow(
                    version_id=version_id,
                    fingerprint=fingerprint[:64],
                    step=step["name"],
                    run_id=run.id,
                    figures=dict(step["figures"]),
                    recorded_at=when,
                )
            )
    return run.id


def move_alias(
    session: Session,
    model_id: int,
    alias: str,
    version_id: int,
    by: str,
    when: datetime,
    *,
    forced: bool,
    reason: str | None,
    evidence: dict[str, Any] | None = None,
) -> None:
    """Point an alias at a version and record the move (from which version, forced or not).

    ``evidence``: what the move rests on beyond the gate (a shadow verdict's figures).
    """
    previous = session.scalar(
        select(AliasRow.version_id).where(AliasRow.model_id == model_id, AliasRow.alias == alias)
    )
    upsert(
        session,
        AliasRow.__table__,
        {"model_id": model_id, "alias": alias, "version_id": version_id, "updated_at": when},
        ["model_id", "alias"],
        ["version_id", "updated_at"],
    )
    session.add(
        PromotionRow(
            model_id=model_id,
            alias=alias,
            version_id=version_id,
            previous_version_id=previous,
            forced=forced,
            reason=reason,
            evidence=evidence,
            promoted_by=by,
            promoted_at=when,
        )
    )


def ran(step: Mapping[str, Any]) -> bool:
    """The step ran to a verdict (its figures are measurements)."""
    return step.get("status") in ("passed", "failed")


def ok(step: Mapping[str, Any]) -> bool:
    """The step did not fail the gate."""
    return step.get("status") in ("passed", "not_run")
