"""The stream's event log: every queue, decision and reservation change, numbered by ``seq``.

Numbers come from a single counter row, incremented inside the writing transaction. The row lock is
held until commit, so numbers are gap-free and committed in increasing order: a reader that has seen
``seq = n`` and asks for ``seq > n`` later never misses an event committed in between. That is what
lets a client resume with ``?since=<seq>`` and lets every worker follow the same log by polling it.
On PostgreSQL each append also sends ``NOTIFY predictor_stream`` (delivered at commit) so followers
can wake at once instead of at their next poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.orm import Session

from predictor.store.tables import StreamCounterRow, StreamEventRow

__all__ = ["NewEvent", "StreamEvent", "append_events", "events_since", "last_seq", "NOTIFY_CHANNEL"]

NOTIFY_CHANNEL = "predictor_stream"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``team`` scopes who may see it (None: everyone)."""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None
    team: str | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """An appended event, as the stream sends it."""

    seq: int
    ts: float
    kind: str
    job_id: str | None
    team: str | None
    payload: dict[str, Any]

    def to_message(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": self.ts, "kind": self.kind, "job_id": self.job_id, "team": self.team,
                "data": self.payload}


def append_events(session: Session, events: Sequence[NewEvent], now: float) -> list[StreamEvent]:
    """Number and insert ``events`` in the caller's transaction; returns them with their ``seq``."""
    if not events:
        return []
    last = session.execute(
        update(StreamCounterRow)
        .where(StreamCounterRow.id == 1)
        .values(last_seq=StreamCounterRow.last_seq + len(events))
        .returning(StreamCounterRow.last_seq)
    ).scalar_one()
    first = int(last) - len(events) + 1
    out = [StreamEvent(first + i, now, e.kind, e.job_id, e.team, e.payload) for i, e in enumerate(events)]
    session.add_all(
        StreamEventRow(seq=e.seq, ts=e.ts, kind=e.kind, job_id=e.job_id, team=e.team, payload=e.payload) for e in out
    )
    session.flush()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :seq)"), {"channel": NOTIFY_CHANNEL, "seq": str(last)})
    return out


def events_since(session: Session, since: int, *, limit: int = 1000, team: str | None = None,
                 only_team: bool = False) -> list[StreamEvent]:
    """Events with ``seq > since`` in order, at most ``limit``.

    With ``only_team=True`` only events of ``team`` and events visible to everyone (no team) are returned.
    """
    stmt = select(StreamEventRow).where(StreamEventRow.seq > since).order_by(StreamEventRow.seq).limit(limit)
    if only_team:
        stmt = stmt.where(or_(StreamEventRow.team.is_(None), StreamEventRow.team == team))
    return [StreamEvent(r.seq, r.ts, r.kind, r.job_id, r.team, r.payload) for r in session.scalars(stmt)]


def last_seq(session: Session) -> int:
    """The newest committed sequence number (0 before the first event)."""
    value = session.execute(select(func.max(StreamEventRow.seq))).scalar_one_or_none()
    return int(value or 0)
