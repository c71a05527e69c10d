"""Persistent state: the tracked queue, decisions, reservations, fair-share usage, the stream's event
log, the audit log, policies and the delivery outbox. SQLite by default, PostgreSQL in production.

Public entry points are re-exported here; see each module for the rules it keeps.
"""

from predictor.store.audit import Actor, AuditEntry, audit_entries, record_audit
from predictor.store.database import Database, default_sqlite_url
from predictor.store.events import NewEvent, StreamEvent, append_events, events_since, last_seq
from predictor.store.outbox import (
    OutboxItem,
    claim_due,
    enqueue_decision,
    mark_delivered,
    mark_failed,
    outbox_counts,
)

__all__ = [
    "Actor",
    "AuditEntry",
    "Database",
    "NewEvent",
    "OutboxItem",
    "StreamEvent",
    "append_events",
    "audit_entries",
    "claim_due",
    "default_sqlite_url",
    "enqueue_decision",
    "events_since",
    "last_seq",
    "mark_delivered",
    "mark_failed",
    "outbox_counts",
    "record_audit",
]
