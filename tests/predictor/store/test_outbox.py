from __future__ import annotations

import threading

import pytest

from predictor.store import (
    Database,
    claim_due,
    enqueue_decision,
    mark_delivered,
    mark_failed,
    outbox_counts,
)

T0 = 1_800_000_000.0


def _enqueue(db: Database, n: int, target: str = "slurm", now: float = T0) -> list[int]:
    with db.session() as s:
        ids = [enqueue_decision(s, target, f"job-{i}", {"priority": i}, f"job-{i}:v1", now=now) for i in range(n)]
        s.commit()
    return ids


def _claim(db: Database, target: str, limit: int, now: float, lease_s: float = 60.0):
    with db.session() as s:
        items = claim_due(s, target, limit, now, lease_s=lease_s)
        s.commit()
    return items


def test_enqueue_is_idempotent_per_target_and_key(db: Database) -> None:
    with db.session() as s:
        a = enqueue_decision(s, "slurm", "j1", {"p": 1}, "j1:abc", now=T0)
        b = enqueue_decision(s, "slurm", "j1", {"p": 1}, "j1:abc", now=T0 + 5)
        c = enqueue_decision(s, "kueue", "j1", {"p": 1}, "j1:abc", now=T0)
        s.commit()
    assert a == b != c
    with db.session() as s:
        assert outbox_counts(s) == {"pending": 2}


def test_claim_returns_due_items_oldest_first_and_leases_them(db: Database) -> None:
    ids = _enqueue(db, 5)
    _enqueue(db, 2, target="kueue")
    first = _claim(db, "slurm", 3, T0)
    assert [i.id for i in first] == ids[:3]
    assert all(i.attempts == 1 and i.target == "slurm" for i in first)
    assert first[0].payload == {"priority": 0}
    # leased items are not handed out again while the lease runs ...
    assert [i.id for i in _claim(db, "slurm", 10, T0 + 1)] == ids[3:]
    assert _claim(db, "slurm", 10, T0 + 2) == []
    # ... and come back when it runs out (the worker is presumed dead): at-least-once
    again = _claim(db, "slurm", 10, T0 + 60.5)
    assert [i.id for i in again] == ids[:3] and all(i.attempts == 2 for i in again)


def test_not_due_before_its_time(db: Database) -> None:
    _enqueue(db, 1, now=T0 + 100)
    assert _claim(db, "slurm", 10, T0) == []
    assert len(_claim(db, "slurm", 10, T0 + 100)) == 1


@pytest.mark.parametrize(
    ("retry_at", "due_at", "status"),
    [(T0 + 30, T0 + 30, "pending"), (None, None, "dead")],
    ids=["retry-later", "give-up"],
)
def test_failed_delivery_is_retried_or_given_up(db: Database, retry_at, due_at, status) -> None:
    [item_id] = _enqueue(db, 1)
    [item] = _claim(db, "slurm", 1, T0)
    with db.session() as s:
        mark_failed(s, item.id, "slurmctld unreachable", retry_at=retry_at)
        s.commit()
        assert outbox_counts(s, "slurm") == {status: 1}
    assert _claim(db, "slurm", 1, T0 + 29) == []
    retried = _claim(db, "slurm", 1, T0 + 31)
    if due_at is None:
        assert retried == []
    else:
        assert retried[0].id == item_id and retried[0].last_error == "slurmctld unreachable"
        assert retried[0].attempts == 2


def test_delivered_items_are_never_claimed_again(db: Database) -> None:
    _enqueue(db, 2)
    items = _claim(db, "slurm", 2, T0)
    with db.session() as s:
        for item in items:
            mark_delivered(s, item.id, now=T0 + 1)
        s.commit()
        assert outbox_counts(s) == {"delivered": 2}
    assert _claim(db, "slurm", 10, T0 + 1000) == []


def test_marking_an_unknown_item_is_an_error(db: Database) -> None:
    with db.session() as s, pytest.raises(KeyError, match="no outbox item with id 999"):
        mark_delivered(s, 999)


def test_concurrent_workers_claim_disjoint_items(db: Database) -> None:
    """Four workers claiming at once never get the same item, and together get every item."""
    ids = _enqueue(db, 60)
    claimed: list[list[int]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def worker(k: int) -> None:
        barrier.wait()
        while True:
            batch = _claim(db, "slurm", 4, T0)
            if not batch:
                return
            claimed[k].extend(i.id for i in batch)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    flat = [i for c in claimed for i in c]
    assert sorted(flat) == ids  # every item exactly once
