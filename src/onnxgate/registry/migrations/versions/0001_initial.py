"""The first registry schema: models, tags, versions, artefacts, gate runs and steps, aliases.

Revision ID: 0001
Revises:
Create Date: 2025-11-24
"""

from __future__ import annotations

import sqlalchemy as sa  # noqa: TID251
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables of the first release."""
    op.create_table(
        "registered_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("last_version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registered_models")),
        sa.UniqueConstraint("name", name=op.f("uq_registered_models_name")),
    )
    op.create_table(
        "model_tags",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["registered_models.id"],
            name=op.f("fk_model_tags_model_id_registered_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("model_id", "key", name=op.f("pk_model_tags")),
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("artefact_count", sa.Integer(), nullable=False),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["registered_models.id"],
            name=op.f("fk_model_versions_model_id_registered_models"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sa.UniqueConstraint("model_id", "number", name="uq_model_versions_number"),
    )
    op.create_table(
        "aliases",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["registered_models.id"],
            name=op.f("fk_aliases_model_id_registered_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_aliases_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("model_id", "alias", name=op.f("pk_aliases")),
    )
    op.create_table(
        "gate_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("started", sa.String(length=40), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_gate_runs_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gate_runs")),
    )
    op.create_index(op.f("ix_gate_runs_fingerprint"), "gate_runs", ["fingerprint"], unique=False)
    op.create_index(op.f("ix_gate_runs_version_id"), "gate_runs", ["version_id"], unique=False)
    op.create_table(
        "version_artefacts",
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=128), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_version_artefacts_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("version_id", "role", name=op.f("pk_version_artefacts")),
    )
    op.create_index(
        op.f("ix_version_artefacts_sha256"), "version_artefacts", ["sha256"], unique=False
    )
    op.create_table(
        "gate_steps",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["gate_runs.id"],
            name=op.f("fk_gate_steps_run_id_gate_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "position", name=op.f("pk_gate_steps")),
    )


def downgrade() -> None:
    """Drop every table (the registry's content with them)."""
    op.drop_table("gate_steps")
    op.drop_index(op.f("ix_version_artefacts_sha256"), table_name="version_artefacts")
    op.drop_table("version_artefacts")
    op.drop_index(op.f("ix_gate_runs_version_id"), table_name="gate_runs")
    op.drop_index(op.f("ix_gate_runs_fingerprint"), table_name="gate_runs")
    op.drop_table("gate_runs")
    op.drop_table("aliases")
    op.drop_table("model_versions")
    op.drop_table("model_tags")
    op.drop_table("registered_models")
