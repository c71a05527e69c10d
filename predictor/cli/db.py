"""``predictor db``: the state store's schema (Alembic migrations shipped with the package)."""

from __future__ import annotations

from typing import Annotated

import typer

from predictor.engine.wiring import get_engine_settings as get_settings

ORDER = 61

db_app = typer.Typer(help="Manage the state store (PREDICTOR_DATABASE_URL).", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade_cmd(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the migrations up to REVISION (safe to run while the service runs).

    Example: PREDICTOR_DATABASE_URL=postgresql://postgres@db/predictor predictor db upgrade
    """
    from predictor.store import Database
    from predictor.store.migrate import current_revision

    db = Database(get_settings().database_url)
    try:
        before = current_revision(db)
        db.upgrade(revision)
        typer.echo(f"{db!r}: {before or 'empty'} -> {current_revision(db)}")
    finally:
        db.dispose()


@db_app.command("current")
def current_cmd() -> None:
    """Print the revision the database is at, and the newest one shipped.

    Example: PREDICTOR_DATABASE_URL=postgresql://postgres@db/predictor predictor db current
    """
    from predictor.store import Database
    from predictor.store.migrate import current_revision, head_revision

    db = Database(get_settings().database_url)
    try:
        typer.echo(f"{db!r}: at {current_revision(db) or 'empty'}, newest {head_revision()}")
    finally:
        db.dispose()


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
