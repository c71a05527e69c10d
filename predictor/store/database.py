"""Connecting to the state store: SQLite (embedded, the default) or PostgreSQL.

Every change to the tracked queue goes through :meth:`Database.writing`, which makes writers take
turns: on PostgreSQL a transaction-scoped advisory lock, on SQLite ``BEGIN IMMEDIATE`` (SQLite has one
writer at a time anyway; taking the lock up front avoids the deadlock of two readers upgrading). Taking
turns is what keeps several uvicorn workers consistent: each writer sees everything committed before
it, so re-planning the queue, idempotent submission and stream numbering need no further care.
Readers (``Database.session``) never wait for writers (WAL on SQLite, MVCC on PostgreSQL).

The outbox is the one writer that does not take the turn: several delivery workers claim different
rows concurrently with ``SELECT ... FOR UPDATE SKIP LOCKED`` (see ``predictor.store.outbox``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

from features.errors import InputError, Unreachable

__all__ = ["Database", "DataVersionProbe", "default_sqlite_url", "WRITE_LOCK_KEY"]

#: Key of the PostgreSQL advisory lock writers take turns on ("predictor" in ASCII, as an int64).
WRITE_LOCK_KEY = 0x707265646963746F
_SQLITE_BUSY_TIMEOUT_MS = 30_000


def default_sqlite_url(workdir: Path | None = None) -> str:
    """The embedded default: ``predictor.db`` in ``workdir`` (the current directory by default)."""
    return f"sqlite:///{(workdir or Path.cwd()).resolve() / 'predictor.db'}"


def _normalise_url(url: str) -> str:
    """Map plain ``postgresql://`` URLs onto the installed psycopg 3 driver."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise InputError(f"PREDICTOR_DATABASE_URL: not a database URL: {url!r} ({exc})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise InputError(
            f"PREDICTOR_DATABASE_URL: unsupported database {parsed.get_backend_name()!r}; "
            "use sqlite:///path/to/file.db or postgresql://user@host/dbname"
        )
    return parsed.render_as_string(hide_password=False)


def _configure_sqlite(engine: Engine) -> None:
    """WAL, a busy timeout, and explicit BEGIN (IMMEDIATE for writers) instead of pysqlite's own."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001 - DBAPI types
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves below
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
        if engine.url.database not in (None, "", ":memory:"):
            cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # noqa: ANN001
        immediate = conn.get_execution_options().get("predictor_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class DataVersionProbe:
    """SQLite's ``PRAGMA data_version`` on a connection of its own: calling it gives a number that
    changes whenever another connection (the pool's, another process's) committed to the file since
    the last call; microseconds, no transaction. ``close`` closes its connection."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(f"file:{path.resolve()}?mode=rw", uri=True, check_same_thread=False,
                                     isolation_level=None)

    def __call__(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._conn.close()


class Database:
    """An engine plus session factories for the state store.

    Parameters
    ----------
    url : str
        SQLAlchemy URL. ``sqlite:///file.db`` or ``postgresql://user@host:port/db`` (psycopg 3).
    echo : bool, default False
        Log SQL statements.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = _normalise_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database not in (None, "", ":memory:"):
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(self.url, echo=echo, connect_args={"check_same_thread": False})
            _configure_sqlite(self.engine)
        else:
            self.engine = create_engine(self.url, echo=echo, pool_pre_ping=True, pool_size=8, max_overflow=16)
        self._write_engine = self.engine.execution_options(predictor_write=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(self._write_engine, expire_on_commit=False)

    @classmethod
    def existing(cls, url: str) -> Database:
        """The store at ``url`` for a command that only reads it (``predictor explain``, ``teams``).

        Raises InputError, creating nothing, where there is no store there yet (an SQLite file that
        does not exist, a database without this package's tables) or where its schema is not the
        one this package writes (``predictor db upgrade`` migrates an older one), and
        Unreachable where it cannot be reached; a command reading it would otherwise fail
        half-way with the database's own error.
        """
        from sqlalchemy.exc import SQLAlchemyError

        from predictor.store.migrate import current_revision, head_revision

        parsed = make_url(_normalise_url(url))
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
                and not Path(parsed.database).is_file():
            raise InputError(f"PREDICTOR_DATABASE_URL: no state store at {parsed.database}: nothing is tracked there "
                             "yet (`predictor serve` or `predictor sync` creates it), or the variable names another "
                             "store than the service's")
        db = cls(url)
        try:
            rev = current_revision(db)
        except SQLAlchemyError as exc:
            db.dispose()
            raise Unreachable(f"PREDICTOR_DATABASE_URL: cannot read the state store {db!r}: "
                             f"{str(getattr(exc, 'orig', None) or exc).strip().splitlines()[0]}") from None
        head = head_revision()
        if rev != head:
            db.dispose()
            if rev is None:
                raise InputError(f"PREDICTOR_DATABASE_URL: the state store {db!r} has no tables yet "
                                 "(`predictor db upgrade` creates them; `predictor serve` does on start)")
            raise InputError(f"PREDICTOR_DATABASE_URL: the state store {db!r} is at schema revision {rev}, "
                             f"this package's is {head} (`predictor db upgrade` migrates an older store)")
        return db

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def session(self) -> Session:
        """A plain session (reads, and outbox claims). The caller commits or closes it."""
        return self._sessions()

    @contextmanager
    def writing(self) -> Iterator[Session]:
        """A session that holds the store's write turn; commits on success, rolls back on error."""
        with self._write_sessions() as session:
            with session.begin():
                if self.is_postgres:
                    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITE_LOCK_KEY})
                yield session

    def change_probe(self) -> DataVersionProbe | None:
        """A cheap "did anyone commit?" check for a follower that polls the store (SQLite's
        :class:`DataVersionProbe`). None where there is no such check (PostgreSQL, whose followers are
        woken by ``NOTIFY``; an in-memory SQLite database, which a second connection would not see;
        a file that cannot be opened): poll."""
        parsed = make_url(self.url)
        if self.dialect != "sqlite" or parsed.database in (None, "", ":memory:") \
                or (parsed.query or {}).get("mode") == "memory":
            return None
        try:
            return DataVersionProbe(Path(parsed.database))
        except sqlite3.Error:
            return None

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def upgrade(self, revision: str = "head") -> None:
        """Apply the Alembic migrations up to ``revision`` (safe to call from several processes at once)."""
        from predictor.store.migrate import upgrade

        upgrade(self, revision)

    def dispose(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({make_url(self.url).render_as_string(hide_password=True)!r})"
