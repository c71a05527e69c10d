"""``predictor db``: the state store's schema (Alembic migrations shipped with the package)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from features.errors import InputError, Unreachable
from predictor.engine.wiring import get_engine_settings as get_settings

ORDER = 61

@contextmanager
def _store() -> Iterator:
    """The store of ``PREDICTOR_DATABASE_URL``; its errors as one line (an unknown revision: exit 2;
    a database that cannot be reached: exit 1), disposed after."""
    from alembic.util import CommandError
    from sqlalchemy.exc import OperationalError

    from predictor.store import Database

    db = Database(get_settings().database_url)
    try:
        yield db
    except CommandError as exc:
        raise InputError(f"{db!r}: {exc}") from None
    except OperationalError as exc:
        raise Unreachable(f"PREDICTOR_DATABASE_URL: cannot reach the state store {db!r}: "
                          f"{str(exc.orig or exc).strip().splitlines()[0]}") from None
    finally:
        db.dispose()


db_app = typer.Typer(help="Manage the state store (PREDICTOR_DATABASE_URL).", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade_cmd(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the migrations up to REVISION (safe to run while the service runs).

    Example: PREDICTOR_DATABASE_URL=postgresql://postgres@db/predictor predictor db upgrade
    """
    from predictor.store.migrate import current_revision

    with _store() as db:
        before = current_revision(db)
        db.upgrade(revision)
        typer.echo(f"{db!r}: {before or 'empty'} -> {current_revision(db)}")


@db_app.command("current")
def current_cmd() -> None:
    """Print the revision the database is at, and the newest one shipped.

    Example: PREDICTOR_DATABASE_URL=postgresql://postgres@db/predictor predictor db current
    """
    from predictor.store.migrate import current_revision, head_revision

    with _store() as db:
        typer.echo(f"{db!r}: at {current_revision(db) or 'empty'}, newest {head_revision()}")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
