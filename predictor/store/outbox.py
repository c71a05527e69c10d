"""The outbox: decisions waiting to be delivered to a scheduler, delivered at least once.

A producer enqueues a decision in the same transaction that makes it (so a decision is never made
without being queued for delivery, nor queued without being made). Delivery workers claim due items,
deliver them, and mark each delivered or failed (with a retry time). A claim is a lease: an item
whose worker dies mid-delivery becomes due again when the lease runs out, so delivery is
at-least-once and the receiving adapter must apply idempotently (the idempotency key says which
deliveries are the same).

Several workers may claim at once: on PostgreSQL the claim is one ``UPDATE ... WHERE id IN (SELECT
... FOR UPDATE SKIP LOCKED) RETURNING``, so concurrent workers get disjoint items without waiting on
each other; on SQLite the same single statement takes the database's write lock, which serialises it.

Usage::

    with db.session() as s:
        enqueue_decision(s, "slurm", "job-1", payload, idempotency_key="job-1:3f2a")
        s.commit()
    with db.session() as s:
        items = claim_due(s, "slurm", limit=50, now=time.time())
        s.commit()                      # make the lease visible before delivering
    for item in items:
        try:
            deliver(item.payload)
        except Exception as exc:
            with db.session() as s:
                mark_failed(s, item.id, str(exc), retry_at=time.time() + backoff(item.attempts))
                s.commit()
        else:
            with db.session() as s:
                mark_delivered(s, item.id)
                s.commit()
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from predictor.store.tables import OutboxRow

__all__ = ["OutboxItem", "enqueue_decision", "claim_due", "mark_delivered", "mark_failed", "outbox_counts",
           "outbox_backlog"]

DEFAULT_LEASE_S = 60.0


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A claimed outbox item. ``attempts`` counts this claim."""

    id: int
    target: str
    job_id: str
    payload: dict[str, Any]
    idempotency_key: str
    attempts: int
    last_error: str | None
    created_at: float


def enqueue_decision(session: Session, target: str, job_id: str, payload: dict[str, Any],
                     idempotency_key: str, *, now: float | None = None) -> int:
    """Queue ``payload`` for delivery to ``target`` unless the same key is already queued.

    Parameters
    ----------
    session : Session
        The caller's session; the caller commits (ideally with the change that made the decision).
    target : str
        Where to deliver, e.g. ``"slurm"`` or ``"kueue"``.
    job_id : str
        The job the decision is for.
    payload : dict
        JSON-serialisable decision document the adapter applies.
    idempotency_key : str
        Same key, same delivery: enqueuing it again for the same target returns the existing item.
    now : float, optional
        Epoch seconds; the item is due from then. Defaults to the wall clock.

    Returns
    -------
    int
        The outbox item's id (the existing one when the key was already queued).
    """
    if not target or not idempotency_key:
        raise ValueError("target and idempotency_key must be non-empty")
    existing = session.execute(
        select(OutboxRow.id).where(OutboxRow.target == target, OutboxRow.idempotency_key == idempotency_key)
    ).scalar_one_or_none()
    if existing is not None:
        return int(existing)
    ts = time.time() if now is None else float(now)
    values = {
        "target": target, "job_id": job_id, "payload": payload, "idempotency_key": idempotency_key,
        "status": "pending", "attempts": 0, "next_attempt_at": ts, "created_at": ts,
    }
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    stmt = insert(OutboxRow).values(**values).on_conflict_do_nothing(
        index_elements=["target", "idempotency_key"]).returning(OutboxRow.id)
    new_id = session.execute(stmt).scalar_one_or_none()
    if new_id is None:  # a concurrent producer inserted the same key first
        new_id = session.execute(
            select(OutboxRow.id).where(OutboxRow.target == target, OutboxRow.idempotency_key == idempotency_key)
        ).scalar_one()
    return int(new_id)


def claim_due(session: Session, target: str, limit: int, now: float, *,
              lease_s: float = DEFAULT_LEASE_S) -> list[OutboxItem]:
    """Claim up to ``limit`` due items for ``target``, oldest first, for ``lease_s`` seconds.

    Due means pending, ``next_attempt_at <= now`` and not leased by another worker. Commit right after
    claiming so other workers see the lease. Items concurrently locked by another worker are skipped,
    never waited for.
    """
    if limit <= 0:
        return []
    due_ids = (
        select(OutboxRow.id)
        .where(
            OutboxRow.target == target,
            OutboxRow.status == "pending",
            OutboxRow.next_attempt_at <= now,
            or_(OutboxRow.claimed_until.is_(None), OutboxRow.claimed_until <= now),
        )
        .order_by(OutboxRow.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    stmt = (
        update(OutboxRow)
        .where(OutboxRow.id.in_(due_ids.scalar_subquery()))
        .values(claimed_until=now + lease_s, attempts=OutboxRow.attempts + 1)
        .returning(OutboxRow.id, OutboxRow.target, OutboxRow.job_id, OutboxRow.payload,
                   OutboxRow.idempotency_key, OutboxRow.attempts, OutboxRow.last_error, OutboxRow.created_at)
        .execution_options(synchronize_session=False)
    )
    items = [OutboxItem(*row) for row in session.execute(stmt).all()]
    return sorted(items, key=lambda item: item.id)


def mark_delivered(session: Session, id: int, *, now: float | None = None) -> None:  # noqa: A002
    """Record that item ``id`` was delivered; it is never claimed again."""
    ts = time.time() if now is None else float(now)
    _update_one(session, id, status="delivered", delivered_at=ts, claimed_until=None, last_error=None)


def mark_failed(session: Session, id: int, error: str, retry_at: float | None) -> None:  # noqa: A002
    """Record a failed delivery of item ``id``: due again at ``retry_at``, or given up (``dead``) if None."""
    if retry_at is None:
        _update_one(session, id, status="dead", claimed_until=None, last_error=error)
    else:
        _update_one(session, id, next_attempt_at=float(retry_at), claimed_until=None, last_error=error)


def outbox_counts(session: Session, target: str | None = None) -> dict[str, int]:
    """Number of items per status (optionally for one target)."""
    stmt = select(OutboxRow.status, func.count()).group_by(OutboxRow.status)
    if target is not None:
        stmt = stmt.where(OutboxRow.target == target)
    return {status: int(n) for status, n in session.execute(stmt).all()}


def outbox_backlog(session: Session) -> dict[str, tuple[dict[str, int], float | None]]:
    """Per target: items per status, and when the oldest pending item was queued (None: none pending)."""
    out: dict[str, tuple[dict[str, int], float | None]] = {}
    rows = session.execute(select(OutboxRow.target, OutboxRow.status, func.count(), func.min(OutboxRow.created_at))
                           .group_by(OutboxRow.target, OutboxRow.status)).all()
    for target, status, n, oldest in rows:
        counts, pending_since = out.get(target, ({}, None))
        counts[status] = int(n)
        out[target] = (counts, float(oldest) if status == "pending" else pending_since)
    return out


def _update_one(session: Session, id: int, **values: Any) -> None:  # noqa: A002
    result = session.execute(
        update(OutboxRow).where(OutboxRow.id == id).values(**values).execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        raise KeyError(f"no outbox item with id {id}")
