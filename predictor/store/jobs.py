"""Tracked jobs and reservations: queries and their JSON documents.

``job_doc`` is the one shape a tracked job has outside the store (API responses, stream payloads);
``canonical_record`` turns a row back into a canonical job record (``features.schema``) for the
feature history and the models.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from predictor.store.tables import JobRow, ReservationRow, UsageChargeRow

__all__ = ["request_digest", "job_doc", "reservation_row_doc", "canonical_record", "live_jobs", "ended_jobs",
           "status_counts", "usage_charges", "reservations"]

#: Fields a canonical record takes from the measured outcome of an ended job.
OUTCOME_FIELDS = ("peak_vram_mib", "placement_class", "gpu_type")


def request_digest(fields: dict[str, Any]) -> str:
    """sha256 of the submitted fields (key order and nulls do not matter): same digest, same request."""
    clean = {k: v for k, v in fields.items() if v is not None}
    return hashlib.sha256(json.dumps(clean, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def job_doc(row: JobRow) -> dict[str, Any]:
    """The public document of a tracked job (``serving.schemas.jobs.JobPublic``)."""
    return {
        "job_id": row.job_id, "team": row.team, "user": row.user, "queue": row.queue, "tier": row.tier,
        "status": row.status, "state": row.state, "submit_ts": row.submit_ts, "start_ts": row.start_ts,
        "end_ts": row.end_ts, "last_checkpoint_ts": row.last_checkpoint_ts,
        "allocation": row.allocation if row.status == "running" else None, "request": dict(row.record),
        "prediction": row.prediction, "decision": row.decision, "created_by": row.created_by,
        "created_at": row.created_at, "updated_at": row.updated_at, "revision": row.revision,
    }


def reservation_row_doc(row: ReservationRow) -> dict[str, Any]:
    return {"job_id": row.job_id, "team": row.team, "start_ts": row.start_ts, "expires_ts": row.expires_ts,
            "predicted_end_ts": row.predicted_end_ts, "gpu_type": row.gpu_type, "num_gpus": row.num_gpus,
            "placement": row.placement, "updated_at": row.updated_at}


def canonical_record(row: JobRow) -> dict[str, Any]:
    """The canonical job record of a tracked job (request, times, state, measured outcome)."""
    rec: dict[str, Any] = dict(row.record)
    rec.update(job_id=row.job_id, submit_ts=row.submit_ts, start_ts=row.start_ts, end_ts=row.end_ts,
               state=row.state, source="service")
    if row.start_ts is not None and row.end_ts is not None:
        rec["duration_s"] = row.end_ts - row.start_ts
    for key in OUTCOME_FIELDS:
        if row.outcome and row.outcome.get(key) is not None:
            rec[key] = row.outcome[key]
    return rec


def live_jobs(session: Session, team: str | None = None) -> list[JobRow]:
    """Pending and running jobs (optionally of one team), oldest submission first."""
    stmt = select(JobRow).where(JobRow.status.in_(("pending", "running"))).order_by(JobRow.submit_ts, JobRow.job_id)
    if team is not None:
        stmt = stmt.where(JobRow.team == team)
    return list(session.scalars(stmt))


def ended_jobs(session: Session) -> list[JobRow]:
    """Jobs that ended (the history the features read), by end time."""
    stmt = select(JobRow).where(JobRow.status == "ended", JobRow.end_ts.is_not(None)).order_by(JobRow.end_ts)
    return list(session.scalars(stmt))


def status_counts(session: Session) -> dict[str, int]:
    rows = session.execute(select(JobRow.status, func.count()).group_by(JobRow.status)).all()
    return {status: int(n) for status, n in rows}


def usage_charges(session: Session) -> list[UsageChargeRow]:
    return list(session.scalars(select(UsageChargeRow).order_by(UsageChargeRow.end_ts, UsageChargeRow.id)))


def reservations(session: Session, team: str | None = None) -> list[ReservationRow]:
    stmt = select(ReservationRow).order_by(ReservationRow.start_ts, ReservationRow.job_id)
    if team is not None:
        stmt = stmt.where(ReservationRow.team == team)
    return list(session.scalars(stmt))
