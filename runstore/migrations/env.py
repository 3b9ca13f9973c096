"""Alembic environment: migrations run on the connection `RunStore` hands over in
`config.attributes["connection"]`, so no alembic.ini or URL is needed."""

from __future__ import annotations

from alembic import context

from runstore.store import PG_MIGRATION_LOCK, Base


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through runstore.store.upgrade_database(); "
                           "the command-line alembic needs a connection from there")
    if connection.dialect.name == "postgresql":
        # A transaction-level lock, released by upgrade_database()'s commit: a session lock
        # unlocked here, before that commit, let the next migrator in while the schema was
        # still invisible to it, and it created alembic_version again (DuplicateTable).
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})")
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
