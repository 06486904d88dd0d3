"""The model registry: register what a gate judged, move aliases, read it back.

Registration is ordered so that a process killed at any instant leaves nothing half-visible:

1. every artefact goes into the content-addressed store (temporary file, fsync, rename, folder
   fsync; identical content is stored once);
2. ONE transaction then takes the model's row lock, increments its version counter, and inserts
   the version, its artefact rows, its gate run with every step, its performance figures and its
   alias. Until the commit, none of it exists for anyone else; after it, all of it does.

A kill during (1) leaves a temporary file, during or after (1) but before the commit unreferenced
blobs; ``fsck`` reports both and removes them on request. No kill can leave a version that names
a blob not in the store.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, select, update  # noqa: TID251
from sqlalchemy.engine import URL  # noqa: TID251
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError  # noqa: TID251
from sqlalchemy.orm import Session  # noqa: TID251

from onnxgate.errors import (
    ArtefactCorrupt,
    ConfigError,
    NotFound,
    PromotionRefused,
)
from onnxgate.registry import _db, _queries, _shadow, _writes
from onnxgate.registry._models import (
    GateRunRow,
    ModelTag,
    ModelVersionRow,
    RegisteredModel,
    VersionArtefact,
)
from onnxgate.registry._records import (
    FetchResult,
    FsckReport,
    GateRunRecord,
    ModelSummary,
    ModelVersion,
    VersionDetail,
    check_alias,
    check_name,
    parse_ref,
)
from onnxgate.registry._store import ArtefactStore, Blob
from onnxgate.shadow import ShadowCriteria, ShadowPair, ShadowReport

log = logging.getLogger(__name__)

T = TypeVar("T")


class Registry:
    """A registry: a database (SQLite file or server) and a content-addressed store.

    Open one with :func:`open_registry`; close it (or use it as a context manager) when done.
    """

    def __init__(self, engine: Engine, url: URL, store: ArtefactStore) -> None:
        self._engine = engine
        self._url = url
        self.store = store

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def url_masked(self) -> str:
        """The registry's URL with its password masked."""
        return _db.mask(self._url)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and maintenance; not part of the stable API)."""
        return self._engine

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registry({self.url_masked!r}, store={self.store.location!r})"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except (OperationalError, InterfaceError) as err:
            raise _db.unreachable(self._url, err, opening=False) from err
        except DBAPIError as err:
            if err.connection_invalidated:
                raise _db.unreachable(self._url, err, opening=False) from err
            raise

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        with self._guard(), self._engine.connect() as conn:
            if conn.dialect.name == "postgresql":  # one snapshot for the whole read
                conn.execution_options(isolation_level="REPEATABLE READ")
            with Session(bind=conn) as session, session.begin():
                yield session

    def _writing(self, work: Callable[[Session], T]) -> T:
        def attempt() -> T:
            with _db.write_connection(self._engine) as conn:
                with Session(bind=conn, expire_on_commit=False) as session, session.begin():
                    return work(session)

        with self._guard():
            return _db.retrying(attempt)

    # -- writing -------------------------------------------------------------------------------

    def register(
        self,
        name: str,
        artefacts: Mapping[str, str | os.PathLike[str]],
        gate: Any,
        *,
        alias: str | None = None,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        source: Mapping[str, Any] | None = None,
        created_by: str | None = None,
    ) -> ModelVersion:
        """Register a new version of ``name`` with its artefacts and the gate run that judged it.

        Args:
            name: The registered model's name (created on its first version).
            artefacts: Files by role: ``model``, ``contract``, ``golden``, ``model.int8`` ...
            gate: The ``GateReport`` of the run (or its ``model_dump(mode="json")``), stored whole.
            alias: Point ``name@alias`` at the new version; only for a gate that passed.
            description: The model's description (replaces the previous one when given).
            tags: Tags of the model, merged into the existing ones.
            source: Provenance (source kind and path, exporter, git commit).
            created_by: Who registers; the login name by default.

        Returns:
            The new version, numbered one past the model's last.

        Raises:
            PromotionRefused: an alias was asked and the gate did not pass (nothing is written).
            ConfigError: a bad name or alias, no artefacts, or an artefact file is missing.
            ArtefactCorrupt: an artefact is not the file the gate judged (its sha256 changed).
            RegistryUnreachable: the database cannot be reached.
        """
        check_name(name)
        if alias is not None:
            check_alias(alias)
        document = _writes.gate_document(gate)
        passed = document["passed"]
        if alias is not None and not passed:
            _refuse_promotion(name, alias, document)
        files = _artefact_files(name, artefacts)
        blobs = self._put_artefacts(name, files, document)
        environment = document.get("environment") or {}
        new = _NewVersion(
            name=name,
            passed=passed,
            blobs=blobs,
            document=document,
            by=created_by or _writes.user(),
            fingerprint=str(environment.get("fingerprint") or "unknown"),
            provenance=dict(source) if source is not None else {"source": document.get("source")},
            now=_writes.now(),
            alias=alias,
            description=description,
            tags=tags,
        )
        number, _ = self._writing(new.insert)
        log.info("registered %s@%d (%s)", name, number, "passed" if passed else "failed gate")
        return ModelVersion(
            name=name,
            number=number,
            status="ready" if passed else "failed",
            passed=passed,
            aliases=(alias,) if alias else (),
            created_at=new.now,
            created_by=new.by,
            artefacts={role: blob.sha256 for role, (blob, _) in blobs.items()},
        )

    def _put_artefacts(
        self, name: str, files: Mapping[str, Path], document: Mapping[str, Any]
    ) -> dict[str, tuple[Blob, str]]:
        """Every artefact into the store, before the transaction (see the module docstring).

        Returns the blob and the file name by role.

        Raises:
            ArtefactCorrupt: an artefact is not the file the gate judged (its sha256 changed).
        """
        judged = {
            a.get("role"): a.get("sha256")
            for a in document.get("artefacts", [])
            if isinstance(a, Mapping)
        }
        blobs: dict[str, tuple[Blob, str]] = {}
        for role, path in sorted(files.items()):
            blob = self.store.put(path)  # before the transaction: see the module docstring
            if judged.get(role) not in (None, blob.sha256):
                raise ArtefactCorrupt(
                    f"registering {name}: {path} ({role}) is not the file the gate judged: "
                    f"sha256 {blob.sha256[:16]}…, the report says {str(judged[role])[:16]}….",
                    hint="Something changed the run folder after the gate; run the gate again.",
                )
            blobs[role] = (blob, path.name)
        return blobs

    def record_gate_run(self, ref: str, gate: Any) -> GateRunRecord:
        """Add a later gate run over a version's artefacts (another machine's figures, say).

        The run's ``artefacts`` must match the version's by role and sha256 where both have them.

        Raises:
            NotFound: no such version.
            ArtefactCorrupt: the run judged other bytes than the version's.
        """
        document = _writes.gate_document(gate)
        environment = document.get("environment") or {}
        fingerprint = str(environment.get("fingerprint") or "unknown")
        now = _writes.now()

        def work(session: Session) -> int:
            row = _queries.resolve(session, ref, self.url_masked)
            have = {a.role: a.sha256 for a in _queries.artefacts(session, row.id)}
            for item in document.get("artefacts", []):
                role, sha = item.get("role"), item.get("sha256")
                if role in have and have[role] != sha:
                    raise ArtefactCorrupt(
                        f"{ref}: the gate run judged another {role} (sha256 {str(sha)[:16]}…) "
                        f"than the version's ({have[role][:16]}…)."
                    )
            return _writes.add_run(session, row.id, document, fingerprint, now)

        run_id = self._writing(work)
        return next(r for r in self.show(ref).gate_runs if r.id == run_id)

    def promote(
        self,
        ref: str,
        alias: str,
        *,
        force: bool = False,
        reason: str | None = None,
        by: str | None = None,
        when_shadow_passes: bool = False,
        shadow: ShadowCriteria | None = None,
    ) -> ModelVersion:
        """Point ``NAME@alias`` at the version ``ref`` names (``NAME@3``, ``NAME@other-alias``).

        Args:
            ref: The version to promote.
            alias: The alias to point at it.
            force: Promote a version whose gate did not pass (needs ``reason``).
            reason: Why; recorded with the move.
            by: Who promotes (the login name by default).
            when_shadow_passes: Move the alias only if the version's shadow verdict passes
                (``shadow_report``), judged in the same transaction as the move; the verdict's
                figures are recorded with it. ``force`` does not override a shadow verdict.
            shadow: The verdict's criteria; ``against`` defaults to ``alias`` (the candidate
                must have been compared with the version the alias names now).

        Raises:
            PromotionRefused: the version's gate did not pass and ``force`` is off.
            ShadowRefused: ``when_shadow_passes`` and the verdict failed or is inconclusive.
            ConfigError: ``force`` without a ``reason``, or a malformed alias or reference.
            NotFound: no such model, version or alias.
        """
        check_alias(alias)
        criteria = None
        if when_shadow_passes:
            criteria = _shadow.criteria(shadow)
            criteria = criteria.model_copy(update={"against": criteria.against or alias})
        if force and not (reason and reason.strip()):
            raise ConfigError(
                "--force needs --reason TEXT: a forced promotion is recorded with its reason."
            )
        who = by or _writes.user()
        now = _writes.now()

        def work(session: Session) -> int:
            row = _queries.resolve(session, ref, self.url_masked)
            # lock the model's row: alias moves of one model are serialised with registrations
            session.execute(
                update(RegisteredModel)
                .where(RegisteredModel.id == row.model_id)
                .values(updated_at=now)
            )
            if not row.passed and not force:
                name = _queries.model_name(session, row.model_id)
                raise PromotionRefused(
                    f"{name}@{row.number} did not pass its gate; not pointing {name}@{alias} at it.",
                    hint="Promote a version that passed, or override with --force --reason TEXT "
                    "(the reason is recorded and shown by `registry show`).",
                )
            evidence, why = None, reason.strip() if reason else None
            if criteria is not None:
                verdict = _shadow.report(session, ref, criteria, self.url_masked)
                if not verdict.passed:
                    _shadow.refuse(verdict, alias)
                evidence = verdict.evidence()
                why = why or (
                    f"shadow verdict passed: {verdict.verdict.pairs} request(s) against "
                    f"{verdict.champion}"
                )
            _writes.move_alias(
                session,
                row.model_id,
                alias,
                row.id,
                who,
                now,
                forced=not row.passed,
                reason=why,
                evidence=evidence,
            )
            return row.number

        number = self._writing(work)
        name, _ = parse_ref(ref)
        log.info("%s@%s -> %d%s", name, alias, number, " (forced)" if force else "")
        return self.get(f"{name}@{number}")

    # -- shadow runs ---------------------------------------------------------------------------

    def shadow_open(
        self, name: str, candidate: int, champion: int, settings: dict[str, Any]
    ) -> int:
        """Start a shadow run: version ``candidate`` of ``name`` judged beside ``champion``.

        Args:
            name: The registered model.
            candidate: The candidate's version number.
            champion: The number of the champion version it is compared with.
            settings: The server's shadow settings, recorded with the run (JSON data).

        Returns:
            The new run's id, for :meth:`shadow_add`.

        Raises:
            NotFound: no such model or version.
        """
        check_name(name)
        now = _writes.now()
        run = self._writing(
            lambda session: _shadow.open_run(
                session, name, candidate, champion, settings, self.url_masked, now
            )
        )
        log.info("shadow run %d: %s@%d beside %s@%d", run, name, candidate, name, champion)
        return run

    def shadow_add(self, run_id: int, pairs: Sequence[ShadowPair], *, keep: int = 10_000) -> None:
        """Add judged pairs to a run, in one transaction with its tallies and pruning.

        The tallies count every pair ever added; the run keeps ``keep`` pairs at most, failing
        ones first, then the newest.

        Raises:
            NotFound: no such run.
            ConfigError: ``keep`` is negative.
        """
        now = _writes.now()
        self._writing(lambda session: _shadow.add_pairs(session, run_id, pairs, keep, now))

    def shadow_report(
        self,
        ref: str,
        *,
        min_pairs: int = 1000,
        min_per_bucket: int = 30,
        max_failure_rate: float = 0.0,
        against: str = "champion",
    ) -> ShadowReport:
        """The shadow verdict on the version ``ref`` names, from traffic.

        Sums every run of that version against the version ``NAME@against`` names now; runs
        against another version are listed and not counted (only such runs: inconclusive,
        the champion moved).

        Raises:
            NotFound: no such version, or no alias ``against``.
            ConfigError: a criterion out of range.
        """
        criteria = _shadow.criteria(
            None,
            min_pairs=min_pairs,
            min_per_bucket=min_per_bucket,
            max_failure_rate=max_failure_rate,
            against=against,
        )
        with self._reading() as session:
            return _shadow.report(session, ref, criteria, self.url_masked)

    def shadow_inputs(self, pair_id: int) -> bytes | None:
        """The inputs (``.npz`` bytes) of a kept pair, or None when the server did not keep them.

        Raises:
            NotFound: no such pair (pruned, or never added).
        """
        with self._reading() as session:
            return _shadow.inputs(session, pair_id)

    # -- reading -------------------------------------------------------------------------------

    def models(self) -> list[ModelSummary]:
        """Every registered model, by name."""
        with self._reading() as session:
            return _queries.summaries(session)

    def versions(self, name: str) -> list[ModelVersion]:
        """Every version of ``name``, oldest first.

        Raises:
            NotFound: no model of that name.
        """
        check_name(name)
        with self._reading() as session:
            model = _queries.find_model(session, name, self.url_masked)
            rows = session.scalars(
                select(ModelVersionRow)
                .where(ModelVersionRow.model_id == model.id)
                .order_by(ModelVersionRow.number)
            ).all()
            return _queries.records(session, name, rows)

    def get(self, ref: str) -> ModelVersion:
        """The version ``ref`` names: ``NAME`` (latest), ``NAME@NUMBER`` or ``NAME@ALIAS``.

        Raises:
            NotFound: no such model, version or alias.
        """
        with self._reading() as session:
            row = _queries.resolve(session, ref, self.url_masked)
            name = _queries.model_name(session, row.model_id)
            return _queries.records(session, name, [row])[0]

    def show(self, ref: str) -> VersionDetail:
        """Everything recorded about the version ``ref`` names.

        Raises:
            NotFound: no such model, version or alias.
        """
        with self._reading() as session:
            row = _queries.resolve(session, ref, self.url_masked)
            return _queries.detail(session, row, shadow_runs=_shadow.runs_of(session, row.id))

    def gate_report(self, ref: str, run: int | None = None) -> dict[str, Any]:
        """The whole gate report stored for a version (its registering run unless ``run``).

        Raises:
            NotFound: no such version or run.
        """
        with self._reading() as session:
            row = _queries.resolve(session, ref, self.url_masked)
            query = select(GateRunRow).where(GateRunRow.version_id == row.id)
            if run is not None:
                query = query.where(GateRunRow.id == run)
            found = session.scalars(query.order_by(GateRunRow.id).limit(1)).first()
            if found is None:
                raise NotFound(f"{ref} has no gate run {run}.")
            return found.report

    def fetch(self, ref: str, out: str | os.PathLike[str]) -> FetchResult:
        """Write a version's files under ``out`` and re-check each sha256 (see ``_fetch``).

        Raises:
            NotFound: no such version.
            ArtefactCorrupt: a blob is missing or damaged, or a written file does not re-hash.
        """
        from onnxgate.registry._fetch import materialise

        detail = self.show(ref)
        return materialise(self.store, detail, Path(out))

    def fsck(
        self, *, remove: bool = False, min_age: float = 3600.0, rehash: bool = True
    ) -> FsckReport:
        """Check that every version is whole and every blob it names is in the store, intact.

        Args:
            remove: Remove orphan blobs and temporary files older than ``min_age`` seconds.
            min_age: Grace period protecting blobs of registrations still in progress.
            rehash: Recompute every referenced blob's sha256 (else compare sizes only).
        """
        from onnxgate.registry._fsck import fsck

        with self._reading() as session:
            return fsck(
                session, self.store, self.url_masked, remove=remove, min_age=min_age, rehash=rehash
            )


def open_registry(
    url: str | None = None,
    store: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
) -> Registry:
    """Open (creating and migrating to the newest schema if needed) a model registry.

    Args:
        url: A SQLAlchemy URL (``sqlite:////path/registry.db``,
            ``postgresql+psycopg://user:pw@host/db``) or a plain path of a SQLite file. Default:
            ``$ONNXGATE_REGISTRY``, else ``registry.db`` in onnxgate's user data folder.
        store: The artefact store: a folder (or ``file://`` URL), or ``s3://bucket/prefix``
            (see ``_s3store``). Default: ``$ONNXGATE_STORE``, else ``<db>-store`` beside a
            SQLite file, else ``store`` in the user data folder.
        read_only: Only read (list, show, fetch, fsck): an existing SQLite file at the newest
            schema is opened read-only, so reading works on a disk with no byte free; anything
            else is opened as usual. Writing through such a registry fails.

    Raises:
        RegistryUnreachable: the database cannot be reached or opened (exit 3; the message shows
            the URL with its password masked).
        ResourceExhausted: the database's disk is full, or the store's folder cannot be made.
        ExtraMissing: the URL's driver is not installed.
        ConfigError: the URL is malformed.
    """
    parsed = _db.resolve_url(url)
    location = _db.open_store(parsed, store)
    if read_only and (engine := _open_read_only(parsed)) is not None:
        log.debug("opened registry %s read-only (store %s)", _db.mask(parsed), location.location)
        return Registry(engine, parsed, location)
    try:
        engine = _db.create(parsed)
    except OSError as err:  # the SQLite file's folder cannot be made
        raise _db.unreachable(parsed, err) from err

    def probe() -> None:
        with engine.connect() as conn:  # connecting runs the pragmas (WAL may meet a lock)
            conn.exec_driver_sql("SELECT 1")
            conn.rollback()

    try:
        _db.retrying(probe)
        _db.migrate(engine, parsed)
    except DBAPIError as err:
        engine.dispose()
        raise _db.unreachable(parsed, err) from err
    except BaseException:
        engine.dispose()
        raise
    location.ensure()
    log.debug("opened registry %s (store %s)", _db.mask(parsed), location.location)
    return Registry(engine, parsed, location)


def _open_read_only(url: URL) -> Engine | None:
    """A read-only engine on an existing SQLite file at the newest schema, else None.

    ``mode=ro`` first. On a disk with no byte free SQLite cannot size the WAL index (``-shm``)
    a WAL reader needs; when the WAL holds nothing (every commit is in the file) the file is
    then read as ``immutable``, without any index. A WAL with frames in it is not read that
    way, since they would be missed: the usual open reports the full disk instead.
    """
    if url.get_backend_name() != "sqlite" or not url.database or not Path(url.database).is_file():
        return None
    wal = Path(f"{url.database}-wal")
    empty_wal = not wal.exists() or wal.stat().st_size == 0
    for immutable in (False, True) if empty_wal else (False,):
        engine = _db.create(_db.read_only_url(url, immutable=immutable), read_only=True)
        try:
            with engine.connect() as conn:
                current = _db.current_revision(conn)
                conn.rollback()
        except DBAPIError as err:
            engine.dispose()
            log.debug(
                "cannot open %s read-only (immutable=%s): %s", _db.mask(url), immutable, err.orig
            )
            continue
        if current == _db.head_revision():
            return engine
        engine.dispose()  # an older schema: the usual open migrates it
        return None
    return None


def _refuse_promotion(name: str, alias: str, document: Mapping[str, Any]) -> None:
    """Refuse ``name@alias`` for a gate that did not pass, naming the steps that failed."""
    failed = [s.get("name") for s in document.get("steps", []) if not _writes.ok(s)]
    raise PromotionRefused(
        f"not registering {name}@{alias}: the gate did not pass"
        + (f" (failed: {', '.join(map(str, failed))})." if failed else "."),
        hint="Register without an alias, or fix what failed and run the gate again.",
    )


def _artefact_files(name: str, artefacts: Mapping[str, str | os.PathLike[str]]) -> dict[str, Path]:
    """The artefacts' files by role, refused when there are none or one is not a file."""
    if not artefacts:
        raise ConfigError(f"registering {name}: no artefacts were given.")
    files = {role: Path(path) for role, path in artefacts.items()}
    for role, path in files.items():
        if not path.is_file():
            raise ConfigError(f"registering {name}: artefact {role!r} ({path}) is not a file.")
    return files


@dataclass(frozen=True)
class _NewVersion:
    """Everything a registration writes, computed before its one transaction starts."""

    name: str
    passed: bool
    blobs: Mapping[str, tuple[Blob, str]]
    """The artefacts, already in the store: blob and file name by role."""
    document: Mapping[str, Any]
    """The gate report, stored whole."""
    by: str
    fingerprint: str
    provenance: dict[str, Any]
    now: datetime
    alias: str | None
    description: str | None
    tags: Mapping[str, str] | None

    def insert(self, session: Session) -> tuple[int, int]:
        """The transaction's work: the model's row lock and counter, then every row.

        Returns the version's number and id.
        """
        model_id, number = _writes.next_number(session, self.name, self.now)
        if self.description is not None:
            session.execute(
                update(RegisteredModel)
                .where(RegisteredModel.id == model_id)
                .values(description=self.description)
            )
        for key, value in (self.tags or {}).items():
            _writes.upsert(
                session,
                ModelTag.__table__,
                {"model_id": model_id, "key": str(key), "value": str(value)},
                ["model_id", "key"],
                ["value"],
            )
        version = ModelVersionRow(
            model_id=model_id,
            number=number,
            status="ready" if self.passed else "failed",
            passed=self.passed,
            artefact_count=len(self.blobs),
            source=self.provenance,
            created_at=self.now,
            created_by=self.by,
        )
        session.add(version)
        session.flush()
        session.add_all(
            VersionArtefact(
                version_id=version.id,
                role=role,
                sha256=blob.sha256,
                size=blob.size,
                filename=filename,
            )
            for role, (blob, filename) in self.blobs.items()
        )
        _writes.add_run(session, version.id, self.document, self.fingerprint, self.now)
        if self.alias is not None:
            _writes.move_alias(
                session,
                model_id,
                self.alias,
                version.id,
                self.by,
                self.now,
                forced=False,
                reason="set when the version was registered",
            )
        return number, version.id
