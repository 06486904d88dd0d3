"""Shadow runs, their judged pairs and tallies, and the evidence a promotion rests on.

``shadow_runs`` is a candidate version shadowing a champion version (one server, from its start
or from an alias switch); ``shadow_pairs`` keeps a bounded number of its judged requests;
``shadow_tallies`` counts every one of them per output and shape bucket, pruned or not.
``promotions.evidence`` holds, as JSON, the shadow verdict's figures of a promotion made with
``--when-shadow-passes`` (None for the promotions before it, and for plain ones).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: TID251
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

PAIR_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create the shadow tables and add ``promotions.evidence``."""
    op.create_table(
        "shadow_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("candidate_version_id", sa.Integer(), nullable=False),
        sa.Column("champion_version_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("pairs", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["candidate_version_id"],
            ["model_versions.id"],
            name=op.f("fk_shadow_runs_candidate_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["champion_version_id"],
            ["model_versions.id"],
            name=op.f("fk_shadow_runs_champion_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["registered_models.id"],
            name=op.f("fk_shadow_runs_model_id_registered_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shadow_runs")),
    )
    op.create_index(
        op.f("ix_shadow_runs_candidate_version_id"),
        "shadow_runs",
        ["candidate_version_id"],
        unique=False,
    )
    op.create_index(op.f("ix_shadow_runs_model_id"), "shadow_runs", ["model_id"], unique=False)
    op.create_table(
        "shadow_pairs",
        sa.Column("id", PAIR_ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bucket", sa.String(length=255), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("input_digest", sa.String(length=64), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=True),
        sa.Column("champion_ms", sa.Float(), nullable=False),
        sa.Column("candidate_ms", sa.Float(), nullable=False),
        sa.Column("min_cosine", sa.Float(), nullable=True),
        sa.Column("max_abs", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["shadow_runs.id"],
            name=op.f("fk_shadow_pairs_run_id_shadow_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shadow_pairs")),
    )
    op.create_index(
        "ix_shadow_pairs_run_passed", "shadow_pairs", ["run_id", "passed", "id"], unique=False
    )
    op.create_table(
        "shadow_tallies",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("output", sa.String(length=255), nullable=False),
        sa.Column("bucket", sa.String(length=255), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("pairs", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("nonfinite", sa.BigInteger(), nullable=False),
        sa.Column("worst_max_abs", sa.Float(), nullable=True),
        sa.Column("min_cosine", sa.Float(), nullable=True),
        sa.Column("min_top1", sa.Float(), nullable=True),
        sa.Column("first_failure", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["shadow_runs.id"],
            name=op.f("fk_shadow_tallies_run_id_shadow_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "output", "bucket", name=op.f("pk_shadow_tallies")),
    )
    op.add_column("promotions", sa.Column("evidence", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop ``promotions.evidence`` and the shadow tables (their runs and figures are lost)."""
    with op.batch_alter_table("promotions") as batch:
        batch.drop_column("evidence")
    op.drop_table("shadow_tallies")
    op.drop_index("ix_shadow_pairs_run_passed", table_name="shadow_pairs")
    op.drop_table("shadow_pairs")
    op.drop_index(op.f("ix_shadow_runs_model_id"), table_name="shadow_runs")
    op.drop_index(op.f("ix_shadow_runs_candidate_version_id"), table_name="shadow_runs")
    op.drop_table("shadow_runs")
