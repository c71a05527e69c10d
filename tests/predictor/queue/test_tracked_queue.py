from __future__ import annotations

import pytest
from sqlalchemy import func, select

from features.errors import InputError
from predictor.capacity.inventory import homogeneous_inventory
from predictor.engine.engine import Engine
from predictor.policy.presets import load_policy
from predictor.queue.errors import ConflictError, NotFoundError, PermissionDeniedError
from predictor.queue.tracked_queue import TrackedQueue
from predictor.store import Actor, Database, audit_entries, events_since, outbox_counts
from predictor.store.tables import DecisionRow, JobRow, ReservationRow, UsageChargeRow
from tests.serving.doubles import no_model_slot

T0 = 1_800_000_000.0
SCHED = Actor("slurm-webhook", "scheduler")
NLP = Actor("alice", "member", "nlp")
VISION = Actor("bob", "member", "vision")


def make_queue(db: Database, **kw) -> TrackedQueue:
    policy = load_policy()
    engine = Engine(model=no_model_slot(), policy=policy, inventory=homogeneous_inventory(16))
    queue = TrackedQueue(db, engine, clock=lambda: T0 + 10_000, **kw)
    queue.load(policy)
    return queue


@pytest.fixture
def queue(db: Database) -> TrackedQueue:
    return make_queue(db)


def job(job_id: str, gpus: int = 8, team: str = "nlp", limit: float = 7200.0, **extra) -> dict:
    return {"job_id": job_id, "num_gpus": gpus, "team": team, "time_limit_s": limit, "submit_ts": T0, **extra}


def test_submit_predicts_decides_and_is_idempotent(queue: TrackedQueue) -> None:
    doc, created = queue.submit(job("a"), SCHED, now=T0)
    assert created and doc["status"] == "pending" and doc["state"] == "PENDING"
    assert doc["prediction"]["duration"]["p50_s"] == 3600.0
    assert doc["decision"]["action"] == "start" and doc["decision"]["num_gpus"] == 8
    again, created_again = queue.submit(job("a"), SCHED, now=T0 + 5)
    assert not created_again and again["revision"] == doc["revision"]
    with queue.db.session() as s:
        assert s.scalar(select(func.count()).select_from(JobRow)) == 1
    with pytest.raises(ConflictError, match="already exists with different fields"):
        queue.submit(job("a", gpus=4), SCHED, now=T0 + 6)


def test_members_submit_only_for_their_team_and_see_only_it(queue: TrackedQueue) -> None:
    doc, _ = queue.submit({"job_id": "n1", "num_gpus": 1}, NLP, now=T0)
    assert doc["team"] == "nlp"
    with pytest.raises(PermissionDeniedError):
        queue.submit(job("v1", team="vision"), NLP, now=T0)
    with pytest.raises(NotFoundError):
        queue.update("n1", {"time_limit_s": 60.0}, VISION, now=T0)
    with pytest.raises(NotFoundError):
        queue.remove("n1", VISION, now=T0)
    assert queue.remove("n1", NLP, now=T0 + 1)["status"] == "cancelled"


@pytest.mark.parametrize(
    ("events", "status", "state", "error"),
    [
        (["started"], "running", "RUNNING", None),
        (["started", "checkpointed", "finished"], "ended", "COMPLETED", None),
        (["started", "failed"], "ended", "FAILED", None),
        (["failed"], "ended", "FAILED", None),
        (["started", "preempted"], "pending", "PENDING", None),
        (["started", "preempted", "started", "finished"], "ended", "COMPLETED", None),
        (["finished"], None, None, ConflictError),
        (["checkpointed"], None, None, ConflictError),
        (["started", "started"], None, None, ConflictError),
        (["started", "finished", "failed"], None, None, ConflictError),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else None,
)
def test_lifecycle(queue: TrackedQueue, events, status, state, error) -> None:
    queue.submit(job("a"), SCHED, now=T0)
    ts = T0
    try:
        for kind in events:
            ts += 600
            doc = queue.record_event("a", {"kind": kind, "ts": ts}, SCHED, now=ts)
    except Exception as exc:  # the expected error type is checked below
        assert error is not None and isinstance(exc, error), exc
        return
    assert error is None
    assert (doc["status"], doc["state"]) == (status, state)


def test_event_times_must_not_go_backwards(queue: TrackedQueue) -> None:
    queue.submit(job("a"), SCHED, now=T0)
    with pytest.raises(InputError, match="^ts: started .* before the job was submitted"):
        queue.record_event("a", {"kind": "started", "ts": T0 - 1}, SCHED, now=T0)
    queue.record_event("a", {"kind": "started", "ts": T0 + 10}, SCHED, now=T0 + 10)
    with pytest.raises(InputError, match="^ts: finished .* before the job started"):
        queue.record_event("a", {"kind": "finished", "ts": T0 + 5}, SCHED, now=T0 + 20)


def test_full_cluster_reserves_then_releases_when_capacity_frees(queue: TrackedQueue) -> None:
    first, _ = queue.submit(job("big1", gpus=16), SCHED, now=T0)
    started = queue.record_event("big1", {"kind": "started", "ts": T0 + 1}, SCHED, now=T0 + 1)
    assert sum(len(p["gpu_indices"]) for p in _allocation(queue, "big1")) == 16
    assert first["decision"]["action"] == "start" and started["status"] == "running"
    waiting, _ = queue.submit(job("big2", gpus=16), SCHED, now=T0 + 2)
    assert waiting["decision"]["action"] == "reserve"
    res = waiting["decision"]["reservation"]
    # big1's predicted end: p90 (= the limit here) x the slowdown of its two-node placement (1.3)
    assert res["start_ts"] == pytest.approx(T0 + 1 + 7200.0 * 1.3)
    with queue.db.session() as s:
        [row] = s.scalars(select(ReservationRow)).all()
        assert (row.job_id, row.num_gpus) == ("big2", 16)
    queue.record_event("big1", {"kind": "finished", "ts": T0 + 3600}, SCHED, now=T0 + 3600)
    with queue.db.session() as s:
        assert s.scalars(select(ReservationRow)).all() == []
        assert s.get(JobRow, "big2").decision["action"] == "start"
        kinds = [e.kind for e in events_since(s, 0)]
    assert "reservation.created" in kinds and kinds[-1] == "reservation.released"


def _allocation(queue: TrackedQueue, job_id: str) -> list[dict]:
    with queue.db.session() as s:
        return s.get(JobRow, job_id).allocation


def test_usage_is_charged_per_run_and_drives_fair_share(queue: TrackedQueue) -> None:
    queue.submit(job("a", gpus=8), SCHED, now=T0)
    queue.record_event("a", {"kind": "started", "ts": T0}, SCHED, now=T0)
    queue.record_event("a", {"kind": "preempted", "ts": T0 + 1800}, SCHED, now=T0 + 1800)
    queue.record_event("a", {"kind": "started", "ts": T0 + 2000}, SCHED, now=T0 + 2000)
    queue.record_event("a", {"kind": "finished", "ts": T0 + 5600}, SCHED, now=T0 + 5600)
    with queue.db.session() as s:
        charges = s.scalars(select(UsageChargeRow).order_by(UsageChargeRow.start_ts)).all()
        assert [c.gpu_hours for c in charges] == pytest.approx([4.0, 8.0])
        assert s.get(JobRow, "a").attained_gpu_s == pytest.approx(8 * 1800)
    usage = queue.engine.team_usage(T0 + 5600)
    assert usage["nlp"] == pytest.approx(12 * 3600, rel=0.01)  # a week's half-life: barely decayed


def test_a_restart_loses_nothing(db: Database) -> None:
    queue = make_queue(db)
    queue.submit(job("done", gpus=8), SCHED, now=T0)
    queue.record_event("done", {"kind": "started", "ts": T0}, SCHED, now=T0)
    queue.record_event("done", {"kind": "finished", "ts": T0 + 3600, "peak_vram_mib": 30_000.0}, SCHED,
                       now=T0 + 3600)
    queue.submit(job("run", gpus=16), SCHED, now=T0 + 3601)
    queue.record_event("run", {"kind": "started", "ts": T0 + 3602}, SCHED, now=T0 + 3602)
    queue.submit(job("wait", gpus=8, team="vision"), SCHED, now=T0 + 3603)
    before = queue.engine.picture

    restarted = make_queue(db)
    after = restarted.engine.picture
    assert list(after.pending.job_id) == list(before.pending.job_id) == ["wait"]
    assert list(after.running.job_id) == ["run"]
    assert list(after.running.alloc_gpus) == list(before.running.alloc_gpus)
    assert restarted.engine.team_usage(T0 + 4000) == pytest.approx(queue.engine.team_usage(T0 + 4000))
    assert restarted.applied_seq == queue.applied_seq
    history = restarted.engine._current_history()[1]  # noqa: SLF001 - the features' view of finished jobs
    assert "done" in set(history.events["job_id"])
    with db.session() as s:
        assert s.get(JobRow, "wait").decision["action"] == "reserve"
        assert s.scalar(select(func.count()).select_from(DecisionRow)) >= 3


def test_every_change_is_audited_with_who_and_when(queue: TrackedQueue) -> None:
    queue.submit(job("a"), NLP, now=T0)
    queue.update("a", {"time_limit_s": 600.0}, NLP, now=T0 + 1)
    queue.record_event("a", {"kind": "started", "ts": T0 + 2}, SCHED, now=T0 + 2)
    queue.remove("a", SCHED, now=T0 + 3)
    with queue.db.session() as s:
        entries = audit_entries(s, target="a")
    assert [(e.action, e.actor, e.ts) for e in reversed(entries)] == [
        ("job.create", "alice", T0), ("job.update", "alice", T0 + 1), ("job.event.started", "slurm-webhook", T0 + 2),
        ("job.delete", "slurm-webhook", T0 + 3)]
    assert entries[-1].detail["request"]["num_gpus"] == 8


def test_updates_re_predict_and_only_pending_jobs_change(queue: TrackedQueue) -> None:
    queue.submit(job("a", limit=7200.0), SCHED, now=T0)
    doc = queue.update("a", {"time_limit_s": 600.0}, SCHED, now=T0 + 1)
    assert doc["prediction"]["duration"]["p50_s"] == 300.0 and doc["revision"] == 2
    queue.record_event("a", {"kind": "started", "ts": T0 + 2}, SCHED, now=T0 + 2)
    with pytest.raises(ConflictError, match="only pending jobs"):
        queue.update("a", {"time_limit_s": 60.0}, SCHED, now=T0 + 3)


def test_material_decisions_go_to_the_outbox_once(db: Database) -> None:
    queue = make_queue(db, outbox_targets=("slurm",))
    queue.submit(job("a"), SCHED, now=T0)
    queue.tick(now=T0 + 1)  # nothing material changed: nothing new queued
    with db.session() as s:
        assert outbox_counts(s, "slurm") == {"pending": 1}
        assert s.scalar(select(func.count()).select_from(DecisionRow)) == 1
