"""Alembic environment: runs on the connection handed over by ``predictor.store.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from predictor.store.tables import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:  # noqa: ANN001 - a SQLAlchemy Connection
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
