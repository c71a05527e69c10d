import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.sim.progress import JobProgress, JobStatus
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows


def _progress(run=100.0, checkpoint=None, default=math.inf, gpus=2):
    table, _ = load_workload(JobRows().add("j", gpus=gpus, run=run, checkpoint=checkpoint).frame())
    return JobProgress(table, default)


def test_slowdown_stretches_the_run():
    p = _progress(run=100.0)
    p.submit(0, 0.0)
    assert p.start(0, 10.0, 1.5, 2) == 150.0
    p.complete(0, 160.0)
    assert p.status[0] == JobStatus.DONE and p.wait_s[0] == 10.0 and p.run_s[0] == 150.0


@pytest.mark.parametrize(
    ("checkpoint", "evict_at", "lost", "remaining"),
    [
        (30.0, 70.0, 10.0, 40.0),  # checkpoints at 30 and 60 s: keeps 60 s of work, loses 10
        (None, 70.0, 70.0, 100.0),  # never checkpoints: the whole run is lost
        (100.0, 50.0, 50.0, 100.0),  # first checkpoint not reached yet
    ],
    ids=["since-last-checkpoint", "no-checkpoint", "before-first"],
)
def test_eviction_loses_the_work_since_the_last_checkpoint(checkpoint, evict_at, lost, remaining):
    p = _progress(run=100.0, checkpoint=checkpoint)
    p.submit(0, 0.0)
    p.start(0, 0.0, 1.0, 0)
    assert p.evict(0, evict_at) == pytest.approx(lost)
    assert p.remaining[0] == pytest.approx(remaining)
    assert p.status[0] == JobStatus.PENDING and p.preemptions[0] == 1


def test_eviction_under_slowdown_keeps_work_not_wall_time():
    p = _progress(run=100.0, checkpoint=30.0)
    p.submit(0, 0.0)
    p.start(0, 0.0, 2.0, 4)
    p.evict(0, 70.0)  # kept 60 s of wall at slowdown 2 = 30 s of work
    assert p.remaining[0] == pytest.approx(70.0)
    assert p.lost_s[0] == pytest.approx(10.0)


def test_oom_crash_loses_the_run_and_gives_up_after_the_retries():
    p = _progress(run=100.0)
    p.submit(0, 0.0)
    for attempt in range(3):
        p.start(0, 100.0 * attempt, 1.0, 0)
        lost, again = p.crash_oom(0, 100.0 * attempt + 60.0, max_retries=2)
        assert lost == 60.0 and again == (attempt < 2)
    assert p.status[0] == JobStatus.FAILED and p.oom_failures[0] == 3 and p.memory_known[0]


@given(
    run=st.floats(1.0, 1e5),
    checkpoint=st.floats(1.0, 1e4),
    slowdown=st.floats(1.0, 3.0),
    cuts=st.lists(st.floats(0.0, 1.0), max_size=6),
)
def test_work_is_conserved_under_any_sequence_of_evictions(run, checkpoint, slowdown, cuts):
    """Wall time held = work done x slowdown + time lost, whatever the evictions."""
    p = _progress(run=run, checkpoint=checkpoint, gpus=1)
    now = 0.0
    p.submit(0, now)
    for cut in cuts:
        wall = p.start(0, now, slowdown, 0)
        now += cut * wall
        p.evict(0, now)
    wall = p.start(0, now, slowdown, 0)
    p.complete(0, now + wall)
    assert p.run_s[0] == pytest.approx(run * slowdown + p.lost_s[0], rel=1e-9, abs=1e-6)
    assert p.lost_s[0] <= checkpoint * len(cuts) + 1e-9
