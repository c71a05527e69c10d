"""Emptying the test session's PostgreSQL database between tests."""

from __future__ import annotations

from sqlalchemy import text

from predictor.store import Database


def reset_postgres(url: str) -> None:
    """Drop everything in the database's public schema."""
    db = Database(url)
    try:
        with db.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        db.dispose()
