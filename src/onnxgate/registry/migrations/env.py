"""Alembic environment: migrations run on the connection ``onnxgate.registry._db`` hands over.

The caller holds the migration lock and the transaction (``BEGIN IMMEDIATE`` on SQLite, an
advisory lock on PostgreSQL), so this file only configures the context and runs the scripts.
Offline (``--sql``) mode renders the DDL for the URL given in the config.
"""

from __future__ import annotations

from alembic import context

from onnxgate.registry._models import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
