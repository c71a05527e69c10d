"""Alembic migrations, run from the installed package (no ``alembic.ini`` needed).

The migration scripts live in ``predictor/store/migrations``. :func:`upgrade` runs them inside the
store's write turn, so several workers starting at once apply each migration exactly once.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.orm import Session


class Database(Protocol):
    """What migrating needs of ``predictor.store.database.Database`` (which imports this module)."""

    @property
    def engine(self) -> Engine: ...

    def writing(self) -> AbstractContextManager[Session]: ...

__all__ = ["MIGRATIONS_DIR", "alembic_config", "upgrade", "current_revision", "head_revision"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migration scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate ``db`` to ``revision``, holding the write turn for the whole upgrade."""
    cfg = alembic_config()
    with db.writing() as session:
        cfg.attributes["connection"] = session.connection()
        command.upgrade(cfg, revision)


def current_revision(db: Database) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    """The newest revision shipped with this package."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations packaged"
    return head
