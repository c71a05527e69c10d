"""Outbox delivery: a real SQLite state store and the real Kueue adapter against the API emulator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from predictor.adapters.delivery import (
    decision_from_payload,
    decision_to_payload,
    deliver_due,
    enqueue_decisions,
    idempotency_key,
    retry_delay,
)
from predictor.adapters.kueue.adapter import KueueAdapter
from predictor.adapters.retry import RetryPolicy
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Reservation, Victim
from predictor.store import Database
from predictor.store.outbox import outbox_counts
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.predictor.adapters.kueue_objects import workload

NOW = 1_795_990_000.0
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


def _decision(job_id: str, priority: int, **kw) -> Decision:
    return Decision(job_id=job_id, priority=Priority(priority), factors=(), action=kw.pop("action", "wait"),
                    tier="research", **kw)


FULL = _decision(
    "team/job-9", 4_242, action="preempt", queue="gpus", flavor="A100-80GB", num_gpus=8, time_limit_s=7_200.0,
    placement=Placement("A100-80GB", (("n1", 8),), "nvlink", 1.0),
    reservation=Reservation("team/job-9", NOW + 60, NOW + 660, Placement("A100-80GB", (("n1", 8),), "nvlink"), NOW + 600),
    eviction=EvictionPlan("team/job-9", (Victim("team/job-1", "team", 3, (("n1", 8),), 120.0, 0.27),), grace_s=45.0))


def test_payload_round_trips():
    assert decision_from_payload(decision_to_payload(FULL)) == FULL


def test_idempotency_key_changes_only_with_what_is_acted_on():
    base = decision_to_payload(FULL)
    assert idempotency_key(base) == idempotency_key({**base, "reason": "other words", "decided_at": NOW + 5})
    assert idempotency_key(base) != idempotency_key({**base, "priority": 4_243})


@given(st.integers(1, 30))
def test_retry_delay_is_bounded(attempts):
    assert 0 <= retry_delay(attempts, base_s=2.0, cap_s=60.0) <= min(60.0, 2.0 * 2 ** (attempts - 1))


@pytest.fixture
def db(tmp_path):
    database = Database(f"sqlite:///{tmp_path / 'state.db'}")
    database.upgrade()
    yield database
    database.dispose()


@pytest.fixture
def kube():
    with kube_emulator() as (_, api):
        custom = client.CustomObjectsApi(api)
        for obj in (workload("team", "job-9", priority=1), workload("team", "job-1", priority=1, admitted=True)):
            custom.create_namespaced_custom_object(GROUP, VERSION, "team", "workloads", obj, _preload_content=False)
        yield api, custom


def test_decisions_are_delivered_once_and_not_requeued(db, kube):
    api, custom = kube
    adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=1), clock=lambda: NOW)
    d = _decision("team/job-9", 900)
    first = enqueue_decisions(db, "kueue", [d], NOW)
    assert enqueue_decisions(db, "kueue", [d], NOW + 1) == first  # same decision, same outbox item
    results = deliver_due(db, adapter, "kueue", NOW)
    assert [r.ok for r in results] == [True]
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "team", "workloads", "job-9")["spec"]["priority"] == 450
    with db.session() as s:
        assert outbox_counts(s, "kueue") == {"delivered": 1}
    assert deliver_due(db, adapter, "kueue", NOW + 10) == []


def test_eviction_is_finished_by_a_later_pass(db, kube):
    api, custom = kube
    clock = [NOW]
    adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=1), clock=lambda: clock[0])
    enqueue_decisions(db, "kueue", [_decision("team/job-9", 2, action="preempt", eviction=FULL.eviction)], NOW)
    first = deliver_due(db, adapter, "kueue", NOW)
    assert [op.kind for op in first[0].deferred] == ["requeue"]
    assert deliver_due(db, adapter, "kueue", NOW + 10) == []  # not due before the grace period ends
    clock[0] = NOW + 46
    second = deliver_due(db, adapter, "kueue", NOW + 46)
    assert [op.kind for op in second[0].done] == ["requeue"]
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "team", "workloads", "job-1")["spec"]["active"] is True
    with db.session() as s:
        assert outbox_counts(s, "kueue") == {"delivered": 1}


def test_unreachable_scheduler_retries_and_refusals_die(db, kube):
    api, _ = kube
    down = KueueAdapter(client.ApiClient(client.Configuration(host="http://127.0.0.1:1")),
                        retry=RetryPolicy(max_attempts=1))
    enqueue_decisions(db, "kueue", [_decision("team/job-9", 900), _decision("team/gone", 5)], NOW)
    results = deliver_due(db, down, "kueue", NOW)
    assert [r.retryable for r in results] == [True, True]
    with db.session() as s:
        assert outbox_counts(s, "kueue") == {"pending": 2}
    up = KueueAdapter(api, retry=RetryPolicy(max_attempts=1))
    later = deliver_due(db, up, "kueue", NOW + 3_600)  # past any backoff
    assert sorted((r.job_id, r.ok) for r in later) == [("team/gone", False), ("team/job-9", True)]
    with db.session() as s:
        assert outbox_counts(s, "kueue") == {"delivered": 1, "dead": 1}
