"""Alembic environment, driven by cftools itself: the engine comes from the caller."""

from alembic import context
from sqlmodel import SQLModel

import cftools.models  # noqa: F401  (registers the tables)

target_metadata = SQLModel.metadata


def run_migrations() -> None:
    engine = context.config.attributes["engine"]
    with engine.connect() as connection:
        # SQLite cannot ALTER most things in place: batch mode copies the table instead.
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations()
