import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.sim.events import EventKind, EventQueue


def test_batch_coalesces_simultaneous_events_releases_before_arrivals():
    q = EventQueue()
    q.push(5.0, EventKind.ARRIVAL, job=0)
    q.push(5.0, EventKind.COMPLETION, job=1)
    q.push(7.0, EventKind.ARRIVAL, job=2)
    epochs = np.zeros(3, dtype=int)
    batch = q.pop_batch(epochs)
    assert q.now == 5.0
    assert [(e.kind, e.job) for e in batch] == [(EventKind.COMPLETION, 1), (EventKind.ARRIVAL, 0)]
    assert [e.job for e in q.pop_batch(epochs)] == [2]
    assert q.pop_batch(epochs) == []


def test_stale_events_are_dropped_and_skipped_instants_do_not_move_the_clock():
    q = EventQueue()
    q.push(3.0, EventKind.COMPLETION, job=0, epoch=1)  # job 0 was re-placed since: stale
    q.push(9.0, EventKind.COMPLETION, job=0, epoch=2)
    epochs = np.array([2])
    batch = q.pop_batch(epochs)
    assert q.now == 9.0 and len(batch) == 1 and batch[0].epoch == 2
    assert q.popped == 1


def test_time_never_goes_back():
    q = EventQueue()
    q.push(10.0, EventKind.WAKEUP)
    q.pop_batch(np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="before the clock"):
        q.push(9.0, EventKind.WAKEUP)


@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.sampled_from(list(EventKind))), max_size=60))
def test_batches_come_out_in_time_order_and_nothing_is_lost(items):
    q = EventQueue()
    q.push_many([t for t, k in items if k is EventKind.ARRIVAL], EventKind.ARRIVAL,
                list(range(sum(k is EventKind.ARRIVAL for _, k in items))))
    for t, k in items:
        if k is not EventKind.ARRIVAL:
            q.push(t, k)
    epochs = np.zeros(len(items), dtype=int)
    seen, last = 0, -1.0
    while batch := q.pop_batch(epochs):
        assert all(e.time == q.now for e in batch) and q.now > last
        assert [e.kind for e in batch] == sorted(e.kind for e in batch)
        last = q.now
        seen += len(batch)
    assert seen == len(items)
