"""Initial schema: tracked queue, decision log, reservations, usage, stream, audit, policies, outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _serial() -> sa.types.TypeEngine:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id() -> sa.types.TypeEngine:
    return sa.String(length=255)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", _id(), primary_key=True),
        sa.Column("team", sa.String(255)),
        sa.Column("user", sa.String(255)),
        sa.Column("queue", sa.String(255)),
        sa.Column("tier", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.Column("request_digest", sa.String(64), nullable=False),
        sa.Column("submit_ts", sa.Double(), nullable=False),
        sa.Column("start_ts", sa.Double()),
        sa.Column("end_ts", sa.Double()),
        sa.Column("last_checkpoint_ts", sa.Double()),
        sa.Column("allocation", _json()),
        sa.Column("attained_gpu_s", sa.Double(), nullable=False),
        sa.Column("outcome", _json()),
        sa.Column("prediction", _json()),
        sa.Column("decision", _json()),
        sa.Column("priority", sa.BigInteger()),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
    )
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_index("ix_jobs_team", "jobs", ["team"])

    op.create_table(
        "decisions",
        sa.Column("id", _serial(), primary_key=True, autoincrement=True),
        sa.Column("job_id", _id(), nullable=False),
        sa.Column("decided_at", sa.Double(), nullable=False),
        sa.Column("priority", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("tier", sa.String(64), nullable=False),
        sa.Column("model_version", sa.String(255), nullable=False),
        sa.Column("fallback", sa.Boolean(), nullable=False),
        sa.Column("payload", _json(), nullable=False),
    )
    op.create_index("ix_decisions_job_id_id", "decisions", ["job_id", "id"])

    op.create_table(
        "reservations",
        sa.Column("job_id", _id(), primary_key=True),
        sa.Column("team", sa.String(255)),
        sa.Column("start_ts", sa.Double(), nullable=False),
        sa.Column("expires_ts", sa.Double(), nullable=False),
        sa.Column("predicted_end_ts", sa.Double(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("placement", _json(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )
    op.create_index("ix_reservations_team", "reservations", ["team"])

    op.create_table(
        "usage_charges",
        sa.Column("id", _serial(), primary_key=True, autoincrement=True),
        sa.Column("team", sa.String(255), nullable=False),
        sa.Column("job_id", _id(), nullable=False),
        sa.Column("gpus", sa.Double(), nullable=False),
        sa.Column("start_ts", sa.Double(), nullable=False),
        sa.Column("end_ts", sa.Double(), nullable=False),
        sa.Column("gpu_hours", sa.Double(), nullable=False),
        sa.UniqueConstraint("job_id", "start_ts", name="uq_usage_charges_job_run"),
    )
    op.create_index("ix_usage_charges_team", "usage_charges", ["team"])

    op.create_table(
        "stream_events",
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("job_id", _id()),
        sa.Column("team", sa.String(255)),
        sa.Column("payload", _json(), nullable=False),
    )
    counter = op.create_table(
        "stream_counter",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(counter, [{"id": 1, "last_seq": 0}])

    op.create_table(
        "audit_log",
        sa.Column("id", _serial(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(255)),
        sa.Column("detail", _json(), nullable=False),
    )
    op.create_index("ix_audit_log_ts", "audit_log", ["ts"])

    op.create_table(
        "policies",
        sa.Column("id", _serial(), primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("document", _json(), nullable=False),
    )

    op.create_table(
        "outbox",
        sa.Column("id", _serial(), primary_key=True, autoincrement=True),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("job_id", _id(), nullable=False),
        sa.Column("payload", _json(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Double(), nullable=False),
        sa.Column("claimed_until", sa.Double()),
        sa.Column("last_error", sa.Text()),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("delivered_at", sa.Double()),
        sa.UniqueConstraint("target", "idempotency_key", name="uq_outbox_target_key"),
    )
    op.create_index("ix_outbox_due", "outbox", ["target", "status", "next_attempt_at"])


def downgrade() -> None:
    for table in ("outbox", "policies", "audit_log", "stream_counter", "stream_events", "usage_charges",
                  "reservations", "decisions", "jobs"):
        op.drop_table(table)
