"""The persisted state, as typed SQLAlchemy 2 ORM tables.

Times are epoch seconds UTC (``float``), like the canonical job record. Documents (job records,
predictions, decisions, payloads) are JSON (``JSONB`` on PostgreSQL). The schema itself is owned by
the Alembic migrations in ``predictor/store/migrations``; these classes must match them (a test
compares them).

Tables
------
jobs            the tracked queue: one row per job id, its record, status, prediction and decision
decisions       the decision audit log: every decision ever made for a tracked job
reservations    capacity currently reserved for pending jobs
usage_charges   GPU-hours charged to teams (the fair-share ledger is rebuilt from these)
stream_events   every queue / decision / reservation change, numbered by ``seq`` (the stream)
stream_counter  one row holding the last ``seq`` handed out (gap-free, commit-ordered numbering)
audit_log       who changed what, and when
policies        every policy document ever put in force; the newest is the current one
outbox          decisions waiting to be delivered to a scheduler (at-least-once)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Double, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "JobRow",
    "DecisionRow",
    "ReservationRow",
    "UsageChargeRow",
    "StreamEventRow",
    "StreamCounterRow",
    "AuditRow",
    "PolicyRow",
    "OutboxRow",
    "JOB_STATUSES",
    "OUTBOX_STATUSES",
]

#: Status of a tracked job: waiting, running, ended (any terminal state), or withdrawn by DELETE.
JOB_STATUSES: tuple[str, ...] = ("pending", "running", "ended", "cancelled")
#: Status of an outbox item: waiting for delivery, delivered, or given up on.
OUTBOX_STATUSES: tuple[str, ...] = ("pending", "delivered", "dead")

JsonDoc = JSON().with_variant(JSONB(), "postgresql")
ID = String(255)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JsonDoc, list[Any]: JsonDoc}


class JobRow(Base):
    """A tracked job: what was submitted, where it is in its life, and what was predicted and decided."""

    __tablename__ = "jobs"

    job_id: Mapped[str] = mapped_column(ID, primary_key=True)
    team: Mapped[str | None] = mapped_column(String(255), index=True)
    user: Mapped[str | None] = mapped_column(String(255))
    queue: Mapped[str | None] = mapped_column(String(255))
    tier: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)  # one of JOB_STATUSES
    state: Mapped[str] = mapped_column(String(32))  # canonical STATES
    record: Mapped[dict[str, Any]]  # canonical job fields as submitted (nulls omitted)
    request_digest: Mapped[str] = mapped_column(String(64))  # sha256 of the submitted record
    submit_ts: Mapped[float] = mapped_column(Double)
    start_ts: Mapped[float | None] = mapped_column(Double)
    end_ts: Mapped[float | None] = mapped_column(Double)
    last_checkpoint_ts: Mapped[float | None] = mapped_column(Double)
    allocation: Mapped[list[Any] | None] = mapped_column(JsonDoc)  # [{"node", "gpu_indices"}] while running
    attained_gpu_s: Mapped[float] = mapped_column(Double, default=0.0)  # GPU-seconds of earlier runs
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)  # measured labels reported at the end
    prediction: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    decision: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    priority: Mapped[int | None] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    revision: Mapped[int] = mapped_column(Integer, default=1)


class DecisionRow(Base):
    """One decision made for a tracked job (append-only: the decision audit log)."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ID)
    decided_at: Mapped[float] = mapped_column(Double)
    priority: Mapped[int] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String(16))
    tier: Mapped[str] = mapped_column(String(64))
    model_version: Mapped[str] = mapped_column(String(255))
    fallback: Mapped[bool]
    payload: Mapped[dict[str, Any]]


class ReservationRow(Base):
    """Capacity held for a pending job from ``start_ts`` until ``expires_ts``."""

    __tablename__ = "reservations"

    job_id: Mapped[str] = mapped_column(ID, primary_key=True)
    team: Mapped[str | None] = mapped_column(String(255), index=True)
    start_ts: Mapped[float] = mapped_column(Double)
    expires_ts: Mapped[float] = mapped_column(Double)
    predicted_end_ts: Mapped[float] = mapped_column(Double)
    gpu_type: Mapped[str] = mapped_column(String(64))
    num_gpus: Mapped[int] = mapped_column(Integer)
    placement: Mapped[dict[str, Any]]
    updated_at: Mapped[float] = mapped_column(Double)


class UsageChargeRow(Base):
    """GPU-hours a team used, charged when a job's run ends (or is preempted / fails)."""

    __tablename__ = "usage_charges"
    __table_args__ = (UniqueConstraint("job_id", "start_ts", name="uq_usage_charges_job_run"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(String(255), index=True)
    job_id: Mapped[str] = mapped_column(ID)
    gpus: Mapped[float] = mapped_column(Double)  # GPUs held, shares as fractions
    start_ts: Mapped[float] = mapped_column(Double)
    end_ts: Mapped[float] = mapped_column(Double)
    gpu_hours: Mapped[float] = mapped_column(Double)


class StreamEventRow(Base):
    """One change, as the stream delivers it. ``seq`` is gap-free and increases in commit order."""

    __tablename__ = "stream_events"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ts: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(ID)
    team: Mapped[str | None] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]]


class StreamCounterRow(Base):
    """The single row (``id = 1``) holding the last sequence number handed out."""

    __tablename__ = "stream_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_seq: Mapped[int] = mapped_column(BigInteger)


class AuditRow(Base):
    """Who did what, to what, and when."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Double, index=True)
    actor: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(255))
    detail: Mapped[dict[str, Any]]


class PolicyRow(Base):
    """A policy document put in force; the row with the highest id is the current policy."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Double)
    actor: Mapped[str] = mapped_column(String(255))
    document: Mapped[dict[str, Any]]


class OutboxRow(Base):
    """A decision to deliver to a scheduler, retried until delivered (at-least-once)."""

    __tablename__ = "outbox"
    __table_args__ = (
        UniqueConstraint("target", "idempotency_key", name="uq_outbox_target_key"),
        Index("ix_outbox_due", "target", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    target: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(ID)
    payload: Mapped[dict[str, Any]]
    idempotency_key: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))  # one of OUTBOX_STATUSES
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Double)
    claimed_until: Mapped[float | None] = mapped_column(Double)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Double)
    delivered_at: Mapped[float | None] = mapped_column(Double)
