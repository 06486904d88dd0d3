"""Promotion history (who moved which alias, forced or not, and why) and performance figures.

Existing aliases get one history row each (``reason`` says they predate the history), and the
figures of every recorded gate run's ``bench`` and ``tune`` steps that ran are copied into ``performance``
under the run's machine fingerprint.

Revision ID: 0002
Revises: 0001
Create Date: 2025-11-24
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa  # noqa: TID251
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PERFORMANCE_STEPS = ("bench", "tune")


def upgrade() -> None:
    """Create ``promotions`` and ``performance`` and fill them from what is already recorded."""
    promotions = op.create_table(
        "promotions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("previous_version_id", sa.Integer(), nullable=True),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("promoted_by", sa.String(length=128), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["registered_models.id"],
            name=op.f("fk_promotions_model_id_registered_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["previous_version_id"],
            ["model_versions.id"],
            name=op.f("fk_promotions_previous_version_id_model_versions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_promotions_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_promotions")),
    )
    op.create_index(op.f("ix_promotions_model_id"), "promotions", ["model_id"], unique=False)
    performance = op.create_table(
        "performance",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["gate_runs.id"],
            name=op.f("fk_performance_run_id_gate_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_performance_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_performance")),
    )
    op.create_index(
        "ix_performance_version_fingerprint",
        "performance",
        ["version_id", "fingerprint"],
        unique=False,
    )
    _backfill(promotions, performance)


def _backfill(promotions: sa.Table, performance: sa.Table) -> None:
    bind = op.get_bind()
    aliases = sa.table(
        "aliases",
        sa.column("model_id", sa.Integer()),
        sa.column("alias", sa.String()),
        sa.column("version_id", sa.Integer()),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    rows = bind.execute(sa.select(aliases)).mappings().all()
    if rows:
        op.bulk_insert(
            promotions,
            [
                {
                    "model_id": row["model_id"],
                    "alias": row["alias"],
                    "version_id": row["version_id"],
                    "previous_version_id": None,
                    "forced": False,
                    "reason": "set before promotions were recorded",
                    "promoted_by": "unknown",
                    "promoted_at": row["updated_at"],
                }
                for row in rows
            ],
        )
    runs = sa.table(
        "gate_runs",
        sa.column("id", sa.Integer()),
        sa.column("version_id", sa.Integer()),
        sa.column("fingerprint", sa.String()),
        sa.column("report", sa.JSON()),
        sa.column("recorded_at", sa.DateTime(timezone=True)),
    )
    figures = []
    for run in bind.execute(sa.select(runs)).mappings():
        for step in (run["report"] or {}).get("steps", []):
            if (
                step.get("name") in PERFORMANCE_STEPS
                and step.get("status") in ("passed", "failed")
                and step.get("figures")
            ):
                figures.append(
                    {
                        "version_id": run["version_id"],
                        "fingerprint": run["fingerprint"],
                        "step": step["name"],
                        "run_id": run["id"],
                        "figures": step["figures"],
                        "recorded_at": run["recorded_at"] or datetime.now(UTC),
                    }
                )
    if figures:
        op.bulk_insert(performance, figures)


def downgrade() -> None:
    """Drop the promotion history and the performance figures."""
    op.drop_index("ix_performance_version_fingerprint", table_name="performance")
    op.drop_table("performance")
    op.drop_index(op.f("ix_promotions_model_id"), table_name="promotions")
    op.drop_table("promotions")
