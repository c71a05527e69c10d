"""The store's fixtures (a migrated database on SQLite and PostgreSQL) for the tracked-queue tests."""

from tests.predictor.store.conftest import db, empty_db  # noqa: F401 - fixtures
