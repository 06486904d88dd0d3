"""The registry's tables, as SQLAlchemy 2 typed ORM classes.

A registered model owns numbered versions; a version owns its artefacts (by sha256, the bytes live
in the content-addressed store), the gate runs that judged it (the first one registered it),
performance figures per machine fingerprint, and is the target of aliases (``name@champion``).
MLflow's stages are left out on purpose: an alias says the same without a fixed vocabulary.

``registered_models.last_version`` is the per-model counter a registration increments under a row
lock, in the same transaction that inserts the version: numbers are unique and gapless, and a
transaction that dies takes its number with it.

The migrations in ``migrations/versions`` must produce exactly this metadata; a test compares them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (  # noqa: TID251
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column  # noqa: TID251

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names fixed by convention, so migrations and the ORM agree on every dialect."""


class Base(DeclarativeBase):
    """Declarative base with the naming convention and JSON for dict columns."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class RegisteredModel(Base):
    """A model name, its description and the counter of its versions."""

    __tablename__ = "registered_models"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    last_version: Mapped[int] = mapped_column(default=0, server_default="0")
    """The highest version number handed out; versions are exactly 1..last_version."""
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ModelTag(Base):
    """A key/value tag of a registered model."""

    __tablename__ = "model_tags"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class ModelVersionRow(Base):
    """One registered version: what was judged, by whom, and whether its gate passed."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "number", name="uq_model_versions_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("registered_models.id", ondelete="CASCADE"))
    number: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))
    """``ready`` (its gate passed) or ``failed`` (registered for the record; never promoted
    without ``--force``)."""
    passed: Mapped[bool]
    artefact_count: Mapped[int]
    """How many artefact rows the version was registered with: fsck's proof none went missing."""
    source: Mapped[dict[str, Any]]
    """Provenance: source kind and path, exporter, git commit, as the caller gave them."""
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))


class VersionArtefact(Base):
    """One file of a version, by role, referring to its bytes in the store by sha256."""

    __tablename__ = "version_artefacts"

    version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(128), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    filename: Mapped[str] = mapped_column(String(255))
    """The file's name when it was registered (external data keeps it on fetch)."""


class GateRunRow(Base):
    """A gate run over a version's artefacts; the first one is the run that registered it."""

    __tablename__ = "gate_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), index=True
    )
    passed: Mapped[bool]
    started: Mapped[str] = mapped_column(String(40))
    seconds: Mapped[float] = mapped_column(Float)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    config_hash: Mapped[str] = mapped_column(String(64))
    report: Mapped[dict[str, Any]]
    """The whole ``GateReport`` as JSON: nothing the gate measured is lost."""
    recorded_at: Mapped[datetime]


class GateStepRow(Base):
    """One step of a gate run, with its status and flat figures (queryable without the report)."""

    __tablename__ = "gate_steps"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("gate_runs.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    seconds: Mapped[float] = mapped_column(Float)
    summary: Mapped[str] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    figures: Mapped[dict[str, Any]]


class AliasRow(Base):
    """``name@alias``: a movable pointer at one version of the same model."""

    __tablename__ = "aliases"

    model_id: Mapped[int] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_at: Mapped[datetime]


# Revision 0002 ------------------------------------------------------------------------------


class PromotionRow(Base):
    """Every move of an alias: who, when, from which version, and the reason of a forced one."""

    __tablename__ = "promotions"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), index=True
    )
    alias: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    previous_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="SET NULL")
    )
    forced: Mapped[bool]
    reason: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[dict[str, Any] | None]
    """Revision 0003: what the move rests on beyond the gate, as JSON (the shadow verdict's
    figures for ``promote --when-shadow-passes``); None for a plain promotion."""
    promoted_by: Mapped[str] = mapped_column(String(128))
    promoted_at: Mapped[datetime]


class PerformanceRow(Base):
    """Figures measured for a version on one machine (fingerprint), from a gate run's step."""

    __tablename__ = "performance"
    __table_args__ = (Index("ix_performance_version_fingerprint", "version_id", "fingerprint"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))
    step: Mapped[str] = mapped_column(String(32))
    """The gate step the figures come from (``bench``, ``tune``)."""
    run_id: Mapped[int | None] = mapped_column(ForeignKey("gate_runs.id", ondelete="SET NULL"))
    figures: Mapped[dict[str, Any]]
    recorded_at: Mapped[datetime]


# Revision 0003 ------------------------------------------------------------------------------

PAIR_ID = BigInteger().with_variant(Integer(), "sqlite")
"""A shadow pair's id: 64-bit on a server; SQLite only counts up an ``INTEGER`` primary key."""


class ShadowRunRow(Base):
    """A candidate version shadowing a champion version, from one server's start (or switch)."""

    __tablename__ = "shadow_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), index=True
    )
    candidate_version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), index=True
    )
    champion_version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE")
    )
    started_at: Mapped[datetime]
    host: Mapped[str] = mapped_column(String(255))
    settings: Mapped[dict[str, Any]]
    """The server's shadow settings (fraction, queue, whether inputs are kept ...)."""
    pairs: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Pairs ever added (kept or pruned); the tallies count the same."""
    last_at: Mapped[datetime | None]
    """When pairs were last added."""


class ShadowPairRow(Base):
    """One judged request, kept while it is among its run's failing or newest ``keep``."""

    __tablename__ = "shadow_pairs"
    __table_args__ = (Index("ix_shadow_pairs_run_passed", "run_id", "passed", "id"),)

    id: Mapped[int] = mapped_column(PAIR_ID, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("shadow_runs.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    bucket: Mapped[str] = mapped_column(String(255))
    passed: Mapped[bool]
    outputs: Mapped[dict[str, Any]]
    """Each output's figures (``OutputFigures`` as JSON) under ``{"outputs": [...]}``."""
    input_digest: Mapped[str] = mapped_column(String(64))
    inputs: Mapped[bytes | None] = mapped_column(LargeBinary)
    """The feeds as ``.npz``, only when the server was allowed to keep inputs."""
    champion_ms: Mapped[float] = mapped_column(Float)
    candidate_ms: Mapped[float] = mapped_column(Float)
    min_cosine: Mapped[float | None] = mapped_column(Float)
    """The lowest cosine over its outputs: orders the worst requests without reading JSON."""
    max_abs: Mapped[float | None] = mapped_column(Float)
    """The largest max abs over its outputs."""


class ShadowTallyRow(Base):
    """Every pair of a run, counted per output and bucket, pruned or not (see ``shadow``)."""

    __tablename__ = "shadow_tallies"

    run_id: Mapped[int] = mapped_column(
        ForeignKey("shadow_runs.id", ondelete="CASCADE"), primary_key=True
    )
    output: Mapped[str] = mapped_column(String(255), primary_key=True)
    """The output's name; ``""`` for the whole request."""
    bucket: Mapped[str] = mapped_column(String(255), primary_key=True)
    rule: Mapped[str] = mapped_column(Text)
    pairs: Mapped[int] = mapped_column(BigInteger)
    failed: Mapped[int] = mapped_column(BigInteger)
    nonfinite: Mapped[int] = mapped_column(BigInteger)
    worst_max_abs: Mapped[float | None] = mapped_column(Float)
    min_cosine: Mapped[float | None] = mapped_column(Float)
    min_top1: Mapped[float | None] = mapped_column(Float)
    first_failure: Mapped[str | None] = mapped_column(Text)
