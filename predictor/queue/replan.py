"""Re-planning rules of the tracked queue: which decisions are news, and keeping reservations in step.

A re-plan decides the whole queue again; only *material* changes are stored, logged and streamed
(:func:`material`), so priorities creeping up with age do not flood the decision log, and
reservations are created, moved or released to match the plan (:func:`sync_reservations`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from predictor.store.events import NewEvent
from predictor.store.jobs import reservation_row_doc
from predictor.store.tables import JobRow, ReservationRow

__all__ = ["material", "sync_reservations", "PRIORITY_CHANGE", "RESERVATION_SHIFT_S"]

#: Relative priority change that counts as a new decision (aging moves priorities a little all the time).
PRIORITY_CHANGE = 0.01
#: Reservation start shift (seconds) that counts as moving it.
RESERVATION_SHIFT_S = 60.0


def material(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether decision ``new`` differs from ``old`` in a way a scheduler must hear about.

    Action, tier, queue, flavor, placement, victims or SLA flag changed; the reservation appeared,
    vanished or moved by at least ``RESERVATION_SHIFT_S``; or the priority moved by at least
    ``PRIORITY_CHANGE`` of its value.
    """
    if old is None:
        return True
    for key in ("action", "tier", "queue", "flavor", "placement", "sla_at_risk", "num_gpus"):
        if old.get(key) != new.get(key):
            return True
    victims = [v["job_id"] for v in (old.get("eviction") or {}).get("victims", [])]
    if victims != [v["job_id"] for v in (new.get("eviction") or {}).get("victims", [])]:
        return True
    a, b = old.get("reservation"), new.get("reservation")
    if (a is None) != (b is None):
        return True
    if a and b and (abs(a["start_ts"] - b["start_ts"]) >= RESERVATION_SHIFT_S or a["placement"] != b["placement"]):
        return True
    return abs(new["priority"] - old["priority"]) >= PRIORITY_CHANGE * max(abs(old["priority"]), 1)


def sync_reservations(s: Session, rows: dict[str, JobRow], wanted: dict[str, dict],
                      now: float) -> list[NewEvent]:
    """Make the reservations table hold ``wanted`` (job id -> the plan's reservation document):
    create new ones, move those that shifted by ``RESERVATION_SHIFT_S`` or changed GPUs, release the
    rest. ``rows`` are the pending jobs. Returns the stream events saying so."""
    events: list[NewEvent] = []
    existing = {r.job_id: r for r in s.scalars(select(ReservationRow))}
    for job_id, res in existing.items():
        if job_id not in wanted:
            reason = "job is no longer pending" if job_id not in rows else "re-planned without a reservation"
            events.append(NewEvent("reservation.released", {"reservation": reservation_row_doc(res), "reason": reason},
                                   job_id, res.team))
            s.delete(res)
    for job_id, doc in wanted.items():
        placement = doc["placement"] or {}
        values = dict(start_ts=doc["start_ts"], expires_ts=doc["expires_ts"],
                      predicted_end_ts=doc["predicted_end_ts"], gpu_type=placement.get("gpu_type", "?"),
                      num_gpus=int(placement.get("num_gpus", 0)), placement=placement)
        old = existing.get(job_id)
        if old is None:
            res = ReservationRow(job_id=job_id, team=rows[job_id].team, updated_at=now, **values)
            s.add(res)
            events.append(NewEvent("reservation.created", {"reservation": reservation_row_doc(res)}, job_id, res.team))
        elif abs(old.start_ts - values["start_ts"]) >= RESERVATION_SHIFT_S or old.placement != placement:
            for k, v in values.items():
                setattr(old, k, v)
            old.updated_at = now
            events.append(NewEvent("reservation.updated", {"reservation": reservation_row_doc(old)}, job_id, old.team))
    return events
