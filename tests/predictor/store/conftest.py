"""Store fixtures: a migrated database on SQLite (a file under tmp_path) and on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from predictor.store import Database
from tests.predictor.store.postgres import reset_postgres


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty database (no tables), one per test, on each backend."""
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'state.db'}")
    else:
        url = request.getfixturevalue("postgres_url")
        reset_postgres(url)
        db = Database(url)
    yield db
    db.dispose()


@pytest.fixture
def db(empty_db: Database) -> Database:
    """A database migrated to the newest schema, on each backend."""
    empty_db.upgrade()
    return empty_db
