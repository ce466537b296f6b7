"""Alembic environment, driven by cftools itself: the engine comes from the caller.

Several processes may open an old (or new) store at once (many workers on one store): each upgrade holds the store's
write lock from its start, so the others wait and then find the schema current, instead of failing on tables the first
one made (PostgreSQL: a transaction-scoped advisory lock; SQLite: BEGIN IMMEDIATE, cftools.store's "begin" hook).
"""

from alembic import context
from sqlalchemy import text
from sqlmodel import SQLModel

import cftools.models  # noqa: F401  (registers the tables)

target_metadata = SQLModel.metadata
MIGRATION_LOCK = 0x6366746F6F6C73  # "cftools": the advisory lock key of a PostgreSQL store's upgrade


def run_migrations() -> None:
    engine = context.config.attributes["engine"]
    with engine.connect() as connection:
        connection = connection.execution_options(cftools_write=True)  # SQLite: BEGIN IMMEDIATE
        # SQLite cannot ALTER most things in place: batch mode copies the table instead.
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # held until this transaction ends; alembic reads the store's revision after it is granted
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            context.run_migrations()
        connection.commit()


run_migrations()
