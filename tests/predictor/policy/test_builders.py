"""snapshot_from_jobs: a canonical job table becomes a snapshot; the queue name is carried through."""

import pandas as pd

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.presets import policy_from_mapping
from predictor.policy.scheduler import decide
from tests.builders import snapshot_from_jobs


def _table():
    return pd.DataFrame([
        {"job_id": "r", "state": "RUNNING", "num_gpus": 8, "submit_ts": 0.0, "start_ts": 0.0,
         "queue": "gpu-a", "team": "x"},
        {"job_id": "head-a", "state": "PENDING", "num_gpus": 16, "submit_ts": 10.0, "queue": "gpu-a", "team": "x"},
        {"job_id": "small-a", "state": "PENDING", "num_gpus": 1, "submit_ts": 20.0, "queue": "gpu-a", "team": "x"},
        {"job_id": "small-b", "state": "PENDING", "num_gpus": 1, "submit_ts": 30.0, "queue": "gpu-b", "team": "x"},
        {"job_id": "no-queue", "state": "PENDING", "num_gpus": 1, "submit_ts": 40.0, "queue": None, "team": "x"},
    ])


def test_snapshot_from_jobs_keeps_the_queue_of_pending_and_running_jobs():
    snap = snapshot_from_jobs(_table(), homogeneous_inventory(16), now=100.0)
    names = [snap.queues[q] if q >= 0 else None for q in snap.pending.queue.tolist()]
    assert dict(zip(snap.pending.job_id.tolist(), names, strict=True)) == {
        "head-a": "gpu-a", "small-a": "gpu-a", "small-b": "gpu-b", "no-queue": None}
    assert [snap.queues[q] for q in snap.running.queue.tolist()] == ["gpu-a"]


def test_strict_queue_head_blocks_only_its_own_queue_from_a_job_table():
    policy = policy_from_mapping({"ordering": "fifo", "queueing": {"strategy": "strict", "scope": "queue"},
                                  "reservation": {"depth": 0}, "preemption": {"enabled": False}})
    plan = decide(snapshot_from_jobs(_table(), homogeneous_inventory(16), now=100.0), policy)
    actions = {d.job_id: d.action for d in plan.queue()}
    # head-a (16 GPUs) cannot start while r holds 8: it blocks gpu-a only; gpu-b and queue-less jobs start
    assert actions == {"head-a": "wait", "small-a": "wait", "small-b": "start", "no-queue": "start"}
