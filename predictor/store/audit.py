"""The audit log: every change to the tracked queue, the policy or the model, with who and when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from predictor.store.tables import AuditRow

__all__ = ["Actor", "AuditEntry", "record_audit", "audit_entries"]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is acting: a token's name and role (and team for team members)."""

    name: str
    role: str
    team: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    ts: float
    actor: str
    role: str
    action: str
    target: str | None
    detail: dict[str, Any]


def record_audit(session: Session, actor: Actor, action: str, target: str | None, detail: dict[str, Any],
                 now: float) -> None:
    """Append one audit entry in the caller's transaction."""
    session.add(AuditRow(ts=now, actor=actor.name, role=actor.role, action=action, target=target, detail=detail))


def audit_entries(session: Session, *, target: str | None = None, limit: int = 100) -> list[AuditEntry]:
    """Newest entries first, optionally only those about ``target``."""
    stmt = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
    if target is not None:
        stmt = stmt.where(AuditRow.target == target)
    return [AuditEntry(r.id, r.ts, r.actor, r.role, r.action, r.target, r.detail) for r in session.scalars(stmt)]
