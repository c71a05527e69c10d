"""``predictor explain JOB_ID``: why a tracked pending job is not running, from the service's state store."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from features.errors import InputError

ORDER = 46


def open_tracked_queue():  # noqa: ANN201 - (Database, Engine) with the tracked queue loaded
    """The state store of ``PREDICTOR_DATABASE_URL`` read into an engine (policy, usage, the live queue),
    as the service loads it. Predictions are the stored ones: no model is loaded."""
    from models.fixed import NULL_VERSION, NullPredictor
    from predictor.engine.model_slot import ModelSlot
    from predictor.engine.wiring import build_engine, get_engine_settings
    from predictor.queue.tracked_queue import TrackedQueue
    from predictor.store import Database

    settings = get_engine_settings()
    db = Database.existing(settings.database_url)  # a store to read, or one line saying why there is none
    slot = ModelSlot.fixed(NullPredictor(), NULL_VERSION, fallback_reason="explain reads stored predictions")
    engine, policy = build_engine(settings, model=slot)
    TrackedQueue(db, engine).load(policy)
    return db, engine


def _text(doc: dict) -> str:
    lines = [f"{doc['job_id']}: why it is not running (as of {time.strftime('%H:%M:%S', time.localtime(doc['as_of']))})"]
    lines += [f"  - {s}" for s in doc["summary"]]
    ch = doc["chain"]
    ahead = ch["ahead"]
    lines.append(f"\nits priority {ahead['priority']:,}: " + "; ".join(
        f"{f['name']} {f['value']:.2f} x {f['weight']:g}" for f in ahead["factors"]))
    for j in ahead["just_ahead"]:
        lines.append(f"  ahead: #{j['rank']} {j['job_id']} ({j['team'] or 'no team'}) priority {j['priority']:,}: "
                     + "; ".join(f"{f['name']} {f['value']:.2f}" for f in j["factors"]))
    for h in ch["held_by"]["next_to_free"][:5]:
        lines.append(f"  holds its GPUs: {h['job_id']} ({h['gpus']} GPUs) until ~{h['frees_in_s'] / 3600:.1f} h from now")
    e = ch["start_estimate"]
    if e["p50_ts"] is not None:
        lines.append(f"start estimate: p10 {(e['p10_ts'] - doc['as_of']) / 3600:.1f} h, p50 "
                     f"{(e['p50_ts'] - doc['as_of']) / 3600:.1f} h, p90 {(e['p90_ts'] - doc['as_of']) / 3600:.1f} h")
    for o in ch["what_if"]["options"]:
        gain = "no gain" if not o["gain_s"] else f"{o['gain_s'] / 3600:.1f} h sooner"
        lines.append(f"  what if: {o['change']}: {gain}")
    lines.append(f"decision: {ch['decision']['reason']}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain_cmd(
        job_id: Annotated[str, typer.Argument(help="A pending job of the tracked queue.", show_default=False)],
        as_json: Annotated[bool, typer.Option("--json", help="The whole chain as JSON.")] = False,
    ) -> None:
        """Why a pending job is not running: what it asks, what could hold it, who is ahead and why,
        reservations, limits, its start estimate, and the change that starts it soonest.

        Reads the service's state store (PREDICTOR_DATABASE_URL, PREDICTOR_POLICY_FILE,
        PREDICTOR_INVENTORY_FILE, as `predictor serve`).

        Example: predictor explain train-42 --json
        """
        from predictor.queue.queue_estimates import QueueEstimates

        db, engine = open_tracked_queue()
        try:
            doc = QueueEstimates(engine, db).explain(job_id)
        except KeyError:
            raise InputError(f"no pending job {job_id!r} in the tracked queue (running, ended and unknown jobs "
                             "have nothing to explain)") from None
        finally:
            db.dispose()
        typer.echo(json.dumps(doc, indent=2, default=str) if as_json else _text(doc))
