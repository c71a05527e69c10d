from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select

from predictor.store import Database
from predictor.store.migrate import MIGRATIONS_DIR, current_revision, head_revision
from predictor.store.tables import Base, StreamCounterRow


def test_upgrade_builds_the_schema_the_tables_describe(empty_db: Database) -> None:
    assert current_revision(empty_db) is None
    empty_db.upgrade()
    assert current_revision(empty_db) == head_revision()
    with empty_db.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diffs == []


def test_upgrade_twice_changes_nothing_and_seeds_the_counter_once(db: Database) -> None:
    db.upgrade()
    with db.session() as s:
        assert s.scalars(select(StreamCounterRow)).all()[0].last_seq == 0
        assert len(s.scalars(select(StreamCounterRow)).all()) == 1
    assert set(inspect(db.engine).get_table_names()) >= {"jobs", "outbox", "stream_events", "audit_log"}


def test_migrations_are_packaged_beside_the_code() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert any(MIGRATIONS_DIR.joinpath("versions").glob("0001_*.py"))


def test_upgrade_runs_from_any_working_directory(tmp_path: Path) -> None:
    """No alembic.ini in the working directory is needed: the package finds its own scripts."""
    code = (
        "from predictor.store import Database, default_sqlite_url; from predictor.store.migrate import current_revision;"
        "db = Database(default_sqlite_url()); db.upgrade(); print(current_revision(db))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == head_revision()
    assert (tmp_path / "predictor.db").is_file()
