"""``predictor teams``: fair-share explained per team, from the service's state store."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from features.errors import InputError

ORDER = 47


def _hours(s: float | None) -> str:
    if s is None:
        return "never at current rates"
    return "now" if s == 0 else f"{s / 3600:.1f} h"


def register(app: typer.Typer) -> None:
    @app.command("teams")
    def teams_cmd(
        team: Annotated[str | None, typer.Argument(help="One team (default: all).", show_default=False)] = None,
        as_json: Annotated[bool, typer.Option("--json", help="JSON (with the usage history).")] = False,
    ) -> None:
        """Per team: decayed usage, share, fair-share factor, and how long until the factor recovers
        (back to 0.5) if every team keeps the GPUs it holds now. Reads the service's state store
        (PREDICTOR_DATABASE_URL, as `predictor serve`).

        Example: predictor teams nlp --json
        """
        from predictor.cli.explain import open_tracked_queue
        from predictor.queue.teams_view import team_fairshare, teams_fairshare

        db, engine = open_tracked_queue()
        now = time.time()
        try:
            if team is not None:
                try:
                    docs = [team_fairshare(db, engine, team, now)]
                except KeyError as exc:
                    raise InputError(str(exc.args[0])) from None
                half_life = docs[0]["half_life_s"]
            else:
                doc = teams_fairshare(db, engine, now)
                docs, half_life = doc["teams"], doc["half_life_s"]
        finally:
            db.dispose()
        if as_json:
            typer.echo(json.dumps(docs if team is None else docs[0], indent=2))
            return
        typer.echo(f"half-life {half_life / 3600:.1f} h; factor 2^(-usage fraction / share fraction), 0.5 = at its share")
        typer.echo(f"{'team':<16} {'share':>7} {'usage GPU-h':>12} {'of usage':>9} {'factor':>7} {'GPUs now':>9}  recovers")
        for t in docs:
            typer.echo(f"{t['team']:<16} {t['share_fraction']:>7.1%} {t['usage_gpu_hours']:>12,.1f} "
                       f"{t['usage_fraction']:>9.1%} {t['factor']:>7.3f} {t['running_gpus']:>9,.1f}  "
                       f"{_hours(t['recovers_in_s'])}")
