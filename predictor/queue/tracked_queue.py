"""The tracked queue: submit, change, withdraw jobs and record what happens to them, persistently.

Every operation is one write turn (``Database.writing``), in this order:

1. catch up  apply the changes other workers committed (history, fair-share usage, policy);
2. change    the job row (and the usage charge of a run that ended);
3. re-plan   ``Engine.plan`` on the picture of the queue as it now is; decisions that changed
             materially (see ``predictor.queue.replan.material``) are stored in ``jobs.decision`` and appended to the
             decision log; reservations are created, moved or released;
4. record    stream events (numbered in commit order), the audit entry, outbox items;
5. commit,   then hand the new picture to the engine and wake the stream.

Because writers take turns, several workers (processes) stay consistent: idempotent submission,
decisions and sequence numbers all see everything committed before them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.prediction import Prediction
from predictor.engine.engine import Engine, UsageCharge
from predictor.engine.queue_picture import QueuePicture, canonical_frame
from predictor.policy.config import PolicyConfig
from predictor.queue.errors import ConflictError, NotFoundError, PermissionDeniedError
from predictor.queue.lifecycle import apply_event, charge_of
from predictor.queue.picture import picture_from_rows
from predictor.queue.replan import material, sync_reservations
from predictor.store.audit import Actor, record_audit
from predictor.store.codec import decision_doc, prediction_doc
from predictor.store.events import NewEvent, StreamEvent, append_events, events_since, last_seq
from predictor.store.jobs import (
    canonical_record,
    ended_jobs,
    job_doc,
    live_jobs,
    request_digest,
    usage_charges,
)
from predictor.store.outbox import enqueue_decision
from predictor.store.tables import DecisionRow, JobRow, PolicyRow, UsageChargeRow

__all__ = ["TrackedQueue", "NotFoundError", "ConflictError", "PermissionDeniedError"]

log = logging.getLogger(__name__)

_QUEUE_KINDS = ("job.", "decision", "reservation.")


class TrackedQueue:
    """Operations on the tracked queue (see the module docstring).

    Parameters
    ----------
    db : Database
    engine : Engine
    outbox_targets : sequence of str
        Adapters to queue every material decision for (e.g. ``("slurm",)``).
    on_commit : callable, optional
        Called with the committed events after each commit (the service wakes its stream follower
        and counts decisions).
    clock : callable
        Wall clock (epoch seconds).
    """

    def __init__(self, db, engine: Engine, *, outbox_targets: Sequence[str] = (),  # noqa: ANN001
                 on_commit: Callable[[list[StreamEvent]], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.engine = engine
        self.outbox_targets = tuple(outbox_targets)
        self.on_commit = on_commit
        self.clock = clock
        self._apply_lock = threading.RLock()
        self.applied_seq = 0
        self.policy_id: int | None = None

    # ------------------------------------------------------------------ start-up and catching up
    def load(self, default_policy: PolicyConfig) -> None:
        """Read the store into the engine: policy, finished jobs, usage, the live queue."""
        now = self.clock()
        with self.db.session() as s:
            seq = last_seq(s)
            row = s.scalars(select(PolicyRow).order_by(PolicyRow.id.desc()).limit(1)).first()
            policy = default_policy if row is None else PolicyConfig.model_validate(row.document)
            self.policy_id = None if row is None else row.id
            self.engine.set_policy(policy)
            self.engine.add_finished([canonical_record(r) for r in ended_jobs(s)])
            self.engine.charge(UsageCharge(c.team, c.job_id, c.gpus, c.start_ts, c.end_ts) for c in usage_charges(s))
            self.engine.set_picture(self._picture(s, now, seq))
        with self._apply_lock:
            self.applied_seq = seq
        self.catch_up()

    def _picture(self, s: Session, now: float, seq: int) -> QueuePicture:
        return picture_from_rows(self.engine.layout, live_jobs(s), team_names=list(self.engine.policy.teams),
                                 now=now, seq=seq)

    def catch_up(self, events: Sequence[StreamEvent] | None = None) -> int:
        """Apply committed events after ``applied_seq`` (read from the store unless given)."""
        with self._apply_lock:
            if events is None:
                with self.db.session() as s:
                    events = events_since(s, self.applied_seq, limit=100_000)
            fresh = [e for e in events if e.seq > self.applied_seq]
            if not fresh:
                return 0
            queue_changed = self._apply(fresh)
            self.applied_seq = fresh[-1].seq
            if queue_changed and self.engine.picture.seq < self.applied_seq:
                with self.db.session() as s:
                    self.engine.set_picture(self._picture(s, self.clock(), self.applied_seq))
            return len(fresh)

    def _apply(self, events: Sequence[StreamEvent]) -> bool:
        finished, charges, queue_changed = [], [], False
        for e in events:
            if e.kind.startswith(_QUEUE_KINDS):
                queue_changed = True
            if e.kind == "job.state":
                if e.payload.get("history_record"):
                    finished.append(e.payload["history_record"])
                if e.payload.get("charge"):
                    c = e.payload["charge"]
                    charges.append(UsageCharge(c["team"], c["job_id"], c["gpus"], c["start_ts"], c["end_ts"]))
            elif e.kind == "policy.updated":
                self.engine.set_policy(PolicyConfig.model_validate(e.payload["document"]))
                self.policy_id = e.payload["policy_id"]
                queue_changed = True
        self.engine.add_finished(finished)
        self.engine.charge(charges)
        return queue_changed

    # ------------------------------------------------------------------ the write turn
    def _write(self, actor: Actor | None, action: str, target: str | None, now: float | None,
               change: Callable[[Session, float, list], tuple[Any, dict[str, Any]]]) -> Any:
        """Run ``change`` in a write turn, re-plan, record events and audit; returns its result."""
        now = self.clock() if now is None else float(now)
        with self.db.writing() as s:
            self._catch_up_in(s)
            charges: list[UsageCharge] = []
            result, detail = change(s, now, charges)
            picture = self._picture(s, now, 0)
            policy = detail.pop("_policy", None)
            staged = detail.pop("_events", [])
            decided = self._replan(s, picture, now, charges, policy)
            events = [NewEvent(e.kind, {"job": job_doc(e.row), **e.extra}, e.row.job_id, e.row.team)
                      if isinstance(e, _JobEvent) else e for e in staged]
            appended = append_events(s, events + decided, now)
            if actor is not None and detail.pop("_audit", True):
                record_audit(s, actor, action, target, detail, now)
        seq = appended[-1].seq if appended else None
        with self._apply_lock:
            if seq is not None:
                self._apply(appended)
                self.applied_seq = max(self.applied_seq, seq)
                self.engine.set_picture(QueuePicture(picture.layout, picture.vocab, picture.pending,
                                                     picture.running, seq))
        if appended and self.on_commit is not None:
            self.on_commit(appended)
        return result

    def _catch_up_in(self, s: Session) -> None:
        with self._apply_lock:
            fresh = events_since(s, self.applied_seq, limit=100_000)
            if fresh:
                self._apply(fresh)
                self.applied_seq = fresh[-1].seq

    def _replan(self, s: Session, picture: QueuePicture, now: float, charges: list[UsageCharge],
                policy: PolicyConfig | None = None) -> list[NewEvent]:
        plan = self.engine.plan(picture, now, charges, policy=policy)
        rows = {r.job_id: r for r in s.scalars(select(JobRow).where(JobRow.status == "pending"))}
        events: list[NewEvent] = []
        wanted: dict[str, dict] = {}
        for decision in plan.queue():
            row = rows[decision.job_id]
            doc = decision_doc(decision)
            if doc["reservation"] is not None:
                wanted[row.job_id] = doc["reservation"]
            if not material(row.decision, doc):
                continue
            previous = None if row.decision is None else {k: row.decision[k] for k in ("priority", "action")}
            row.decision, row.priority, row.updated_at = doc, int(decision.priority), now
            entry = DecisionRow(job_id=row.job_id, decided_at=now, priority=int(decision.priority),
                                action=decision.action, tier=decision.tier, model_version=decision.model_version,
                                fallback=decision.fallback, payload=doc)
            s.add(entry)
            s.flush()
            events.append(NewEvent("decision", {"decision": doc, "previous": previous}, row.job_id, row.team))
            for target in self.outbox_targets:
                enqueue_decision(s, target, row.job_id, {"decision": doc, "job": dict(row.record)},
                                 f"{row.job_id}:{entry.id}", now=now)
        events += sync_reservations(s, rows, wanted, now)
        return events

    # ------------------------------------------------------------------ operations
    def submit(self, fields: dict[str, Any], actor: Actor, now: float | None = None) -> tuple[dict, bool]:
        """Add a job (idempotent by ``job_id``). Returns its document and whether it was created.

        A replay (same id, same fields) changes nothing and is not audited. Ids are unique across
        teams; a member is told only that an id is taken, the same whether the job holding it is
        their team's or another's (whose existence they may not learn).

        Raises
        ------
        ConflictError
            The id exists with different fields (or, for a member, belongs to another team).
        PermissionDeniedError
            A member submitting for another team.
        """
        fields = {k: v for k, v in fields.items() if v is not None}
        if actor.role == "member":
            fields.setdefault("team", actor.team)
            if fields["team"] != actor.team:
                raise PermissionDeniedError(f"members of team {actor.team} may only submit jobs for that team")
        digest = request_digest(fields)
        job_id = fields["job_id"]

        def change(s: Session, now: float, charges: list) -> tuple[Any, dict]:
            row = s.get(JobRow, job_id)
            if row is not None:
                if actor.role == "member" and (row.request_digest != digest or not _visible(row, actor)):
                    # one answer whether the id is another team's or the member's own: nothing told
                    raise ConflictError(f"job_id {job_id} is taken; change a job of your team with PATCH, or "
                                        "submit under a new job_id")
                if row.request_digest != digest:
                    raise ConflictError(f"job {job_id} already exists with different fields; PATCH it or use a "
                                        "new job_id")
                return (row, False), {"_events": [], "_audit": False}  # a replay changes nothing
            record = {k: v for k, v in fields.items() if k not in ("job_id", "submit_ts")}
            submit_ts = float(fields.get("submit_ts", now))
            frame = canonical_frame([{**record, "job_id": job_id, "submit_ts": submit_ts, "state": "PENDING"}])
            preds, _ = self.engine.predict(frame, now)
            row = JobRow(job_id=job_id, team=record.get("team"), user=record.get("user"),
                         queue=record.get("queue"), tier=record.get("tier"), status="pending", state="PENDING",
                         record=record, request_digest=digest, submit_ts=submit_ts, attained_gpu_s=0.0,
                         prediction=prediction_doc(Prediction.from_row(preds.iloc[0].to_dict())),
                         created_by=actor.name, created_at=now, updated_at=now, revision=1)
            s.add(row)
            s.flush()
            return (row, True), {"_events": [_JobEvent("job.created", row)], "request": fields}

        row, created = self._write(actor, "job.create", job_id, now, change)
        return job_doc(row), created

    def update(self, job_id: str, changes: dict[str, Any], actor: Actor, now: float | None = None) -> dict:
        """Change fields of a pending job; it is predicted and decided again."""
        changes = {k: v for k, v in changes.items() if v is not None}

        def change(s: Session, now: float, charges: list) -> tuple[Any, dict]:
            row = self._owned(s, job_id, actor)
            if row.status != "pending":
                raise ConflictError(f"job {job_id} is {row.status}; only pending jobs can be changed")
            if not changes:
                return row, {"_events": [], "changes": {}}
            row.record = {**row.record, **changes}
            for key in ("queue", "tier"):
                if key in changes:
                    setattr(row, key, changes[key])
            frame = canonical_frame([canonical_record(row)])
            preds, _ = self.engine.predict(frame, now)
            row.prediction = prediction_doc(Prediction.from_row(preds.iloc[0].to_dict()))
            row.revision += 1
            row.updated_at = now
            return row, {"_events": [_JobEvent("job.updated", row, {"changes": changes})], "changes": changes}

        return job_doc(self._write(actor, "job.update", job_id, now, change))

    def remove(self, job_id: str, actor: Actor, now: float | None = None) -> dict:
        """Withdraw a pending or running job (a running one's run so far is charged)."""

        def change(s: Session, now: float, charges: list) -> tuple[Any, dict]:
            row = self._owned(s, job_id, actor)
            if row.status in ("ended", "cancelled"):
                raise ConflictError(f"job {job_id} is already {row.status}")
            charge = charge_of(row, now) if row.status == "running" else None
            if charge is not None:
                _store_charge(s, charge)
                charges.append(charge)
            row.status, row.state, row.end_ts, row.allocation = "cancelled", "CANCELLED", now, None
            row.revision += 1
            row.updated_at = now
            extra = {"charge": None if charge is None else _charge_doc(charge)}
            return row, {"_events": [_JobEvent("job.deleted", row, extra)]}

        return job_doc(self._write(actor, "job.delete", job_id, now, change))

    def record_event(self, job_id: str, event: dict[str, Any], actor: Actor, now: float | None = None) -> dict:
        """Apply a lifecycle event (``predictor.queue.lifecycle``) to a tracked job."""

        def change(s: Session, now: float, charges: list) -> tuple[Any, dict]:
            row = self._owned(s, job_id, actor)
            ts = float(event.get("ts") or now)
            picture = self._picture(s, now, 0)
            outcome = apply_event(row, event, ts, self.engine, picture)
            if outcome.charge is not None:
                _store_charge(s, outcome.charge)
                charges.append(outcome.charge)
            row.revision += 1
            row.updated_at = now
            extra = {"event": {**event, "ts": ts}, "charge": None if outcome.charge is None
                     else _charge_doc(outcome.charge), "history_record": outcome.history_record}
            return row, {"_events": [_JobEvent("job.state", row, extra)], "event": {**event, "ts": ts}}

        return job_doc(self._write(actor, f"job.event.{event['kind']}", job_id, now, change))

    def put_policy(self, make: Callable[[PolicyConfig], PolicyConfig], actor: Actor, now: float | None = None, *,
                   expected_id: int | None = None, check_expected: bool = False) -> int:
        """Put ``make(policy in force)`` in force for every worker; returns its id.

        ``make`` runs inside the write turn, on the policy every worker's committed changes have
        brought in force, so concurrent changes never lose one another (its exceptions abort the turn).

        Raises
        ------
        ConflictError
            With ``check_expected``: the policy in force is not ``expected_id`` (another was put since).
        """

        def change(s: Session, now: float, charges: list) -> tuple[Any, dict]:
            if check_expected and self.policy_id != expected_id:
                raise ConflictError(f"the policy in force is policy_id {self.policy_id}, not {expected_id}: another "
                                    "was put in force since; GET it again and re-apply the change")
            policy = make(self.engine.policy)
            document = policy.model_dump(mode="json")
            row = PolicyRow(created_at=now, actor=actor.name, document=document)
            s.add(row)
            s.flush()
            event = NewEvent("policy.updated", {"policy_id": row.id, "document": document, "actor": actor.name})
            return row.id, {"_events": [event], "_policy": policy, "policy_id": row.id, "name": policy.name}

        return self._write(actor, "policy.update", "policy", now, change)

    def tick(self, now: float | None = None) -> None:
        """Re-plan without a job event (reservations start, priorities age); records only what changed."""
        self._write(None, "replan", None, now, lambda s, now, charges: (None, {"_events": []}))

    def _owned(self, s: Session, job_id: str, actor: Actor) -> JobRow:
        row = s.get(JobRow, job_id)
        if row is None or not _visible(row, actor):
            raise NotFoundError(f"no tracked job {job_id!r}")
        return row


class _JobEvent:
    """A ``job.*`` event whose payload (the job document) is taken after re-planning."""

    def __init__(self, kind: str, row: JobRow, extra: dict[str, Any] | None = None) -> None:
        self.kind, self.row, self.extra = kind, row, extra or {}


def _visible(row: JobRow, actor: Actor) -> bool:
    return actor.role != "member" or row.team == actor.team


def _charge_doc(c: UsageCharge) -> dict[str, Any]:
    return {"team": c.team, "job_id": c.job_id, "gpus": c.gpus, "start_ts": c.start_ts, "end_ts": c.end_ts,
            "gpu_hours": c.gpu_hours}


def _store_charge(s: Session, c: UsageCharge) -> None:
    s.add(UsageChargeRow(team=c.team, job_id=c.job_id, gpus=c.gpus, start_ts=c.start_ts, end_ts=c.end_ts,
                         gpu_hours=c.gpu_hours))
