"""Read models of the tracked queue: the ordered queue decided now, reservations, teams' fair-share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from predictor.engine.engine import Engine
from predictor.policy.context import CycleContext
from predictor.queue.picture import picture_from_rows
from predictor.store.codec import decision_doc
from predictor.store.database import Database
from predictor.store.events import last_seq
from predictor.store.jobs import job_doc, live_jobs, reservation_row_doc, reservations

__all__ = ["queue_view", "reservations_view", "teams_view"]


def queue_view(db: Database, engine: Engine, now: float, team: str | None = None,
               start_estimate: Callable[[str], dict | None] | None = None) -> dict[str, Any]:
    """Pending jobs in priority order, each with the decision made for it now (factor breakdown
    included), then running jobs. ``team`` limits the list (ranks stay those of the whole queue).
    ``start_estimate``: job id -> its start estimate (``QueueEstimates.estimate_of``), added to each
    pending job."""
    with db.session() as s:
        seq = last_seq(s)
        rows = live_jobs(s)
    picture = picture_from_rows(engine.layout, rows, team_names=list(engine.policy.teams), now=now, seq=seq)
    plan = engine.plan(picture, now)
    by_id = {r.job_id: r for r in rows}
    out: list[dict[str, Any]] = []
    for rank, decision in enumerate(plan.queue(), start=1):
        row = by_id[decision.job_id]
        if team is None or row.team == team:
            entry = {**job_doc(row), "decision": decision_doc(decision), "rank": rank}
            if start_estimate is not None:
                entry["start_estimate"] = start_estimate(decision.job_id)
            out.append(entry)
    for row in rows:
        if row.status == "running" and (team is None or row.team == team):
            out.append({**job_doc(row), "rank": None})
    return {"jobs": out, "as_of": now, "last_seq": seq}


def reservations_view(db: Database, now: float, team: str | None = None) -> dict[str, Any]:
    """Capacity reserved for pending jobs, earliest first (as of the last re-plan)."""
    with db.session() as s:
        rows = reservations(s, team)
    return {"reservations": [reservation_row_doc(r) for r in rows], "as_of": now}


def teams_view(db: Database, engine: Engine, now: float) -> dict[str, Any]:
    """Per team: share, decayed usage, the fair-share factor, running GPUs and pending jobs."""
    with db.session() as s:
        rows = live_jobs(s)
    picture = picture_from_rows(engine.layout, rows, team_names=list(engine.policy.teams), now=now)
    usage = engine.team_usage(now, picture)
    snapshot = picture.snapshot(now, usage)
    policy = engine.policy
    factor = CycleContext(snapshot, policy, None, None).team_fairshare  # type: ignore[arg-type]
    running_gpus: dict[str, float] = {}
    pending: dict[str, int] = {}
    for r in rows:
        if r.team is None:
            continue
        if r.status == "running":
            running_gpus[r.team] = running_gpus.get(r.team, 0.0) + float(r.record.get("num_gpus") or 1)
        else:
            pending[r.team] = pending.get(r.team, 0) + 1
    usage_arr = np.asarray(snapshot.team_usage_gpu_s, dtype=np.float64)
    teams = [
        {"team": name, "share": policy.share_of(name), "usage_gpu_hours": float(usage_arr[i]) / 3600.0,
         "factor": float(factor[i]), "running_gpus": running_gpus.get(name, 0.0), "pending_jobs": pending.get(name, 0)}
        for i, name in enumerate(snapshot.teams)
    ]
    teams.sort(key=lambda t: t["team"])
    return {"teams": teams, "half_life_s": policy.factors.fairshare.half_life_s, "as_of": now}
