"""Shadow runs in the registry: judged pairs kept bounded, tallies kept whole, verdicts read back.

A server shadowing a candidate opens a run (``open_run``) and adds its judged pairs in batches
(``add_pairs``). Each batch is one transaction that locks the run's row (its ``pairs`` counter),
inserts the pairs, adds them to the run's tallies, and prunes the run's pairs beyond ``keep``,
failing ones kept first, then the newest: the tallies count every pair ever added, so pruning
loses examples, never evidence.

``runs_of`` lists the runs one version took part in, each with its figures (``registry show``).

``report`` sums the tallies of every run of a candidate against the version the champion's
alias names NOW (runs against an earlier champion judged another comparison) and draws the
verdict with ``onnxgate.shadow.judge``. Every function runs inside its caller's transaction.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import case, delete, func, or_, select, update  # noqa: TID251
from sqlalchemy.orm import Session, aliased  # noqa: TID251

from onnxgate.errors import ConfigError, NotFound, ShadowRefused
from onnxgate.registry import _queries
from onnxgate.registry._models import (
    ModelVersionRow,
    RegisteredModel,
    ShadowPairRow,
    ShadowRunRow,
    ShadowTallyRow,
)
from onnxgate.registry._records import ShadowRunRecord, parse_ref
from onnxgate.settings import invalid
from onnxgate.shadow import (
    REQUEST,
    ShadowCriteria,
    ShadowPair,
    ShadowReport,
    ShadowRunInfo,
    ShadowTally,
    WorstPair,
    judge,
    storable,
    tally,
)

WORST = 10
"""Worst requests a report shows."""
_TALLY_FIGURES = (
    "rule",
    "pairs",
    "failed",
    "nonfinite",
    "worst_max_abs",
    "min_cosine",
    "min_top1",
    "first_failure",
)


def criteria(given: ShadowCriteria | None, **values: Any) -> ShadowCriteria:
    """The verdict's criteria, a refused value as a ConfigError naming the setting."""
    if given is not None:
        return given
    try:
        return ShadowCriteria(**values)
    except ValidationError as err:
        raise invalid(err, ShadowCriteria) from err


def refuse(report: ShadowReport, alias: str) -> None:
    """Refuse the move of ``alias`` on a verdict that did not pass, saying why."""
    verdict = report.verdict
    name = report.candidate.split("@")[0]
    if verdict.status == "failed":
        hint = (
            f"A failing candidate is not promoted; `onnxgate registry shadow-report "
            f"{report.candidate} --against {report.against}` lists the worst requests."
        )
    else:
        hint = (
            f"Let the shadow run longer (`onnxgate serve {name}@{report.against} --shadow "
            f"{report.candidate}`), or ask for less evidence (--min-pairs, --min-per-bucket)."
        )
    raise ShadowRefused(
        f"not pointing {name}@{alias} at {report.candidate}: its shadow verdict against "
        f"{report.champion} is {verdict.status}: " + "; ".join(verdict.reasons) + ".",
        hint=hint,
    )


def open_run(
    session: Session,
    name: str,
    candidate: int,
    champion: int,
    settings: dict[str, Any],
    where: str,
    when: datetime,
) -> int:
    """Insert a run of version ``candidate`` shadowing version ``champion`` of ``name``."""
    model = _queries.find_model(session, name, where)
    ids = {}
    for role, number in (("candidate", candidate), ("champion", champion)):
        row = _queries.resolve(session, f"{name}@{int(number)}", where)
        ids[role] = row.id
    run = ShadowRunRow(
        model_id=model.id,
        candidate_version_id=ids["candidate"],
        champion_version_id=ids["champion"],
        started_at=when,
        host=socket.gethostname()[:255],
        settings=_clean(dict(settings)),
        pairs=0,
    )
    session.add(run)
    session.flush()
    return run.id


def add_pairs(
    session: Session, run_id: int, pairs: Sequence[ShadowPair], keep: int, when: datetime
) -> None:
    """Append ``pairs`` to run ``run_id``, add them to its tallies, prune beyond ``keep``."""
    if keep < 0:
        raise ConfigError(f"keep must be 0 or more, not {keep}.", field="shadow.keep_pairs")
    # the run's row lock: batches of one run are added one after the other
    locked = session.execute(
        update(ShadowRunRow)
        .where(ShadowRunRow.id == run_id)
        .values(pairs=ShadowRunRow.pairs + len(pairs), last_at=when)
    )
    if not locked.rowcount:  # type: ignore[attr-defined]
        raise NotFound(
            f"no shadow run {run_id} in the registry.",
            hint="Open one with Registry.shadow_open(name, candidate, champion, settings).",
        )
    if not pairs:
        return
    session.add_all(_row(run_id, pair) for pair in pairs)
    have = {
        (t.output, t.bucket): t
        for t in session.scalars(select(ShadowTallyRow).where(ShadowTallyRow.run_id == run_id))
    }
    for new in tally(pairs):
        row = have.get((new.output, new.bucket))
        if row is None:
            session.add(ShadowTallyRow(run_id=run_id, **_figures(new)))
            continue
        merged = _tally(row).merge(new)
        for key, value in _figures(merged).items():
            setattr(row, key, value)
    session.flush()
    _prune(session, run_id, keep)


def _prune(session: Session, run_id: int, keep: int) -> None:
    """Delete the run's pairs beyond ``keep``: failing ones are kept first, then the newest."""
    count = session.scalar(
        select(func.count()).select_from(ShadowPairRow).where(ShadowPairRow.run_id == run_id)
    )
    if not count or count <= keep:
        return
    kept = (
        select(ShadowPairRow.id)
        .where(ShadowPairRow.run_id == run_id)
        .order_by(ShadowPairRow.passed.asc(), ShadowPairRow.id.desc())
        .limit(keep)
    )
    session.execute(
        delete(ShadowPairRow).where(
            ShadowPairRow.run_id == run_id, ShadowPairRow.id.not_in(kept.scalar_subquery())
        )
    )


def report(
    session: Session, ref: str, criteria: ShadowCriteria, where: str, *, worst: int = WORST
) -> ShadowReport:
    """The verdict on the version ``ref`` names from its runs against ``criteria.against`` now."""
    against = criteria.against or "champion"
    name, _ = parse_ref(ref)
    candidate = _queries.resolve(session, ref, where)
    champion = _queries.resolve(session, f"{name}@{against}", where)
    numbers = _queries.version_numbers(session, candidate.model_id)
    runs = [
        ShadowRunInfo(
            id=r.id,
            champion=f"{name}@{numbers[r.champion_version_id]}",
            started_at=_queries.utc(r.started_at),
            host=r.host,
            pairs=r.pairs,
            counted=r.champion_version_id == champion.id,
        )
        for r in session.scalars(
            select(ShadowRunRow)
            .where(ShadowRunRow.candidate_version_id == candidate.id)
            .order_by(ShadowRunRow.id)
        )
    ]
    counted = [r.id for r in runs if r.counted]
    now_names = f"{name}@{against} now names {name}@{champion.number}"
    unsure, notes = [], []
    other = [r for r in runs if not r.counted]
    if other:
        compared = sorted({r.champion for r in other})
        seen = sum(r.pairs for r in other)
        text = (
            f"{seen} request(s) of run(s) {', '.join(str(r.id) for r in other)} were compared "
            f"with {', '.join(compared)}; {now_names}"
        )
        if counted:
            notes.append(f"not counted: {text}")
        else:
            unsure.append(f"the champion moved since the shadow ran: {text}")
    elif not runs:
        notes.append(
            f"{name}@{candidate.number} has no shadow run: serve {name}@{against} with "
            f"--shadow {name}@{candidate.number} (from the registry) to judge it on traffic"
        )
    if candidate.id == champion.id:
        unsure.append(f"{name}@{candidate.number} is {name}@{against} itself")
    tallies = [
        _tally(t)
        for t in session.scalars(select(ShadowTallyRow).where(ShadowTallyRow.run_id.in_(counted)))
    ]
    return ShadowReport(
        candidate=f"{name}@{candidate.number}",
        champion=f"{name}@{champion.number}",
        against=against,
        runs=tuple(runs),
        verdict=judge(
            tallies, criteria.model_copy(update={"against": against}), inconclusive=unsure
        ),
        worst=tuple(_worst(session, counted, worst)),
        notes=tuple(notes),
    )


def runs_of(session: Session, version_id: int) -> list[ShadowRunRecord]:
    """The shadow runs of one version, as the candidate then as the champion, oldest first.

    One query: each run with both versions' numbers and its failed requests, summed from its
    whole-request tallies (``REQUEST``), so pruned pairs still count.
    """
    candidate, champion = aliased(ModelVersionRow), aliased(ModelVersionRow)
    failed = (
        select(ShadowTallyRow.run_id, func.sum(ShadowTallyRow.failed).label("failed"))
        .where(ShadowTallyRow.output == REQUEST)
        .group_by(ShadowTallyRow.run_id)
        .subquery()
    )
    is_candidate = ShadowRunRow.candidate_version_id == version_id
    rows = session.execute(
        select(
            ShadowRunRow,
            RegisteredModel.name,
            candidate.number,
            champion.number,
            func.coalesce(failed.c.failed, 0),
        )
        .join(RegisteredModel, RegisteredModel.id == ShadowRunRow.model_id)
        .join(candidate, candidate.id == ShadowRunRow.candidate_version_id)
        .join(champion, champion.id == ShadowRunRow.champion_version_id)
        .outerjoin(failed, failed.c.run_id == ShadowRunRow.id)
        .where(or_(is_candidate, ShadowRunRow.champion_version_id == version_id))
        .order_by(case((is_candidate, 0), else_=1), ShadowRunRow.id)
    )
    return [
        ShadowRunRecord(
            id=run.id,
            role="candidate" if run.candidate_version_id == version_id else "champion",
            candidate=f"{name}@{cand}",
            champion=f"{name}@{champ}",
            host=run.host,
            started_at=_queries.utc(run.started_at),
            last_at=_queries.utc(run.last_at) if run.last_at else None,
            pairs=run.pairs,
            failed=int(fails),
        )
        for run, name, cand, champ, fails in rows
    ]


def _worst(session: Session, runs: list[int], limit: int) -> list[WorstPair]:
    if not runs or limit <= 0:
        return []
    rows = session.scalars(
        select(ShadowPairRow)
        .where(ShadowPairRow.run_id.in_(runs))
        .order_by(
            ShadowPairRow.passed.asc(),
            func.coalesce(ShadowPairRow.min_cosine, 2.0).asc(),
            func.coalesce(ShadowPairRow.max_abs, -1.0).desc(),
            ShadowPairRow.id.desc(),
        )
        .limit(limit)
    )
    found = []
    for r in rows:
        outputs = (r.outputs or {}).get("outputs", [])
        failed = [o for o in outputs if not o.get("passed", True)]
        found.append(
            WorstPair(
                id=r.id,
                run=r.run_id,
                at=_queries.utc(r.at),
                bucket=r.bucket,
                passed=r.passed,
                input_digest=r.input_digest,
                inputs_kept=r.inputs is not None,
                failed_outputs=tuple(str(o.get("name")) for o in failed),
                reason=(failed[0].get("reason") or failed[0].get("rule")) if failed else None,
                min_cosine=r.min_cosine,
                max_abs=r.max_abs,
                champion_ms=r.champion_ms,
                candidate_ms=r.candidate_ms,
            )
        )
    return found


def inputs(session: Session, pair_id: int) -> bytes | None:
    """The kept inputs (``.npz``) of a pair, None when they were not kept.

    Raises:
        NotFound: no such pair (it was never added, or was pruned).
    """
    row = session.get(ShadowPairRow, pair_id)
    if row is None:
        raise NotFound(
            f"no shadow pair {pair_id} in the registry (pruned, or never added).",
            hint="`registry shadow-report NAME@REF` lists the kept worst pairs by id.",
        )
    return row.inputs


def _row(run_id: int, pair: ShadowPair) -> ShadowPairRow:
    cosines = [storable(o.cosine) for o in pair.outputs]
    gaps = [storable(o.max_abs) for o in pair.outputs]
    return ShadowPairRow(
        run_id=run_id,
        at=datetime.fromtimestamp(pair.at, UTC),
        bucket=pair.bucket[:255],
        passed=pair.passed,
        outputs={"outputs": [_clean(o.model_dump(mode="json")) for o in pair.outputs]},
        input_digest=pair.input_digest[:64],
        inputs=pair.inputs,
        champion_ms=storable(pair.champion_ms) or 0.0,
        candidate_ms=storable(pair.candidate_ms) or 0.0,
        min_cosine=min((c for c in cosines if c is not None), default=None),
        max_abs=max((g for g in gaps if g is not None), default=None),
    )


def _tally(row: ShadowTallyRow) -> ShadowTally:
    return ShadowTally(
        output=row.output,
        bucket=row.bucket,
        **{key: getattr(row, key) for key in _TALLY_FIGURES},
    )


def _figures(item: ShadowTally) -> dict[str, Any]:
    values = item.model_dump(include={"output", "bucket", *_TALLY_FIGURES})
    values["output"] = values["output"][:255]
    values["bucket"] = values["bucket"][:255]
    return values


def _clean(value: Any) -> Any:
    """JSON data without NaN or infinities (PostgreSQL's JSON refuses them)."""
    if isinstance(value, float):
        return storable(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
