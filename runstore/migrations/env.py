"""Alembic environment: migrations run on the connection `RunStore` hands over in
`config.attributes["connection"]`, so no alembic.ini or URL is needed."""

from __future__ import annotations

from alembic import context

from runstore.store import Base

# An arbitrary constant: one migrator at a time per PostgreSQL database.
_PG_MIGRATION_LOCK = 0x46524F47


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through runstore.store.upgrade_database(); "
                           "the command-line alembic needs a connection from there")
    postgres = connection.dialect.name == "postgresql"
    if postgres:
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_MIGRATION_LOCK})")
    try:
        context.configure(connection=connection, target_metadata=Base.metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if postgres:
            connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_PG_MIGRATION_LOCK})")


run_migrations()
