"""Start estimates (``predictor.queue.start_estimate``) on small snapshots whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.presets import load_policy
from predictor.policy.scheduler import decide
from predictor.queue import start_estimate
from predictor.queue.start_estimate import FreeProfile, estimate_starts, running_quantile_ends
from tests.builders import SnapshotBuilder, make_job, make_running

NOW = 10_000.0


def _plan(pending, running=(), gpus=16, preset=None):
    snap = SnapshotBuilder(homogeneous_inventory(gpus)).pending(*pending).running(*running).build(now=NOW)
    policy = load_policy(None, preset=preset) if preset else load_policy(None)
    return decide(snap, policy), snap


def _row(snap, job_id: str) -> int:
    return int(np.flatnonzero(snap.pending.job_id == job_id)[0])


def test_profile_books_the_earliest_window_and_backfills_holes() -> None:
    prof = FreeProfile(0.0, 8, np.array([100.0] * 8))  # all 8 busy until 100
    assert prof.earliest(4, 50.0) == 100.0
    prof.book(100.0, 8, 100.0)  # then all 8 from 100 to 200
    assert prof.earliest(1, 10.0) == 200.0
    prof = FreeProfile(0.0, 8, np.array([0.0] * 4 + [500.0] * 4))  # 4 free now, 4 at 500
    prof.book(500.0, 8, 100.0)  # a big job reserved from 500
    assert prof.earliest(4, 400.0) == 0.0  # a short small job fits in the hole before it
    assert prof.earliest(4, 600.0) == 600.0  # a long one does not
    assert prof.earliest(9, 1.0) == np.inf


def test_a_job_waits_for_the_running_jobs_it_needs_to_end_at_each_quantile() -> None:
    running = [make_running(f"r{i}").gpus(8).on(f"node-000{i}").started(NOW - 100).ends(NOW + 3600) for i in (0, 1)]
    plan, snap = _plan([make_job("w").gpus(16).predict(1000, 2000, 500).submitted(NOW)], running)
    dur = [np.array([1000.0, 4000.0]), np.array([2000.0, 5000.0]), np.array([3700.0, 6000.0])]
    est = estimate_starts(plan, dur)
    i = _row(snap, "w")
    # a gang of 16 needs both nodes: it starts when the later of the two ends, per quantile
    ends = running_quantile_ends(snap.running.start_ts, dur, NOW, 900.0)
    for q, arr in enumerate((est.p10_ts, est.p50_ts, est.p90_ts)):
        assert arr[i] == pytest.approx(ends[q].max())
    assert est.p10_ts[i] <= est.p50_ts[i] <= est.p90_ts[i]
    assert est.basis[i] == "planned"


def test_jobs_the_plan_starts_start_now_and_the_next_one_queues_behind_them() -> None:
    jobs = [make_job("a").gpus(16).predict(1000, 1000, 1000).submitted(NOW - 10).tier("production"),
            make_job("b").gpus(16).predict(500, 500, 500).submitted(NOW - 5).tier("research")]
    plan, snap = _plan(jobs)
    est = estimate_starts(plan)
    a, b = _row(snap, "a"), _row(snap, "b")
    started = a if plan.action[a] == "start" else b
    other = b if started == a else a
    assert est.basis[started] == "starts now" and est.p50_ts[started] == NOW
    dur = {a: 1000.0, b: 500.0}
    assert est.p50_ts[other] == pytest.approx(NOW + dur[started])


def test_a_remaining_time_is_conditional_on_the_time_already_run() -> None:
    start = np.array([NOW - 3000.0, NOW - 10.0])
    d = [np.array([1000.0, 1000.0]), np.array([2000.0, 2000.0]), np.array([4000.0, 4000.0])]
    p10, p50, p90 = running_quantile_ends(start, d, NOW, 900.0)
    # the old run is past its p50 already: its ends are later than start + quantile, and still ordered
    assert p10[0] > NOW and p50[0] > start[0] + 2000 and p10[0] <= p50[0] <= p90[0]
    # a fresh run ends about at its quantiles
    assert p50[1] == pytest.approx(start[1] + 2000, rel=0.01)


def test_time_limit_plan_uses_limits_not_predictions() -> None:
    running = [make_running("r").gpus(16).started(NOW - 100).ends(NOW + 600)]
    plan, snap = _plan([make_job("w").gpus(16).predict(1000).time_limit(7200).submitted(NOW)], running)
    est = estimate_starts(plan, [np.array([700.0])] * 3, running_time_limits=np.array([36_000.0]))
    i = _row(snap, "w")
    assert est.time_limit_ts[i] == pytest.approx(NOW - 100 + 36_000)
    assert est.p50_ts[i] < est.time_limit_ts[i]


def test_what_if_a_smaller_gang_or_a_later_position() -> None:
    running = [make_running("r0").gpus(8).on("node-0000").started(NOW).ends(NOW + 1000),
               make_running("r1").gpus(8).on("node-0001").started(NOW).ends(NOW + 5000)]
    plan, snap = _plan([make_job("w").gpus(16).predict(1000, 1000, 1000).submitted(NOW)], running)
    est = estimate_starts(plan, [np.array([1000.0, 5000.0])] * 3, what_if=True)
    i = _row(snap, "w")
    assert est.p50_ts[i] == pytest.approx(NOW + 5000)
    assert est.start_with(i, num_gpus=8) == pytest.approx(NOW + 1000)
    allowed = np.ones(snap.layout.n_types, dtype=bool)
    # a job not in the plan, behind "w": it waits for "w" to end on the 16 GPUs
    assert est.start_with(-1, allowed=allowed, position=1, num_gpus=16, duration=100.0) == pytest.approx(NOW + 6000)
    assert est.start_with(-1, allowed=allowed, position=0, num_gpus=16, duration=100.0) == pytest.approx(NOW + 5000)


def test_strict_fifo_never_lets_a_job_start_before_the_one_ahead() -> None:
    running = [make_running("r").gpus(8).on("node-0000").started(NOW).ends(NOW + 5000)]
    jobs = [make_job("head").gpus(16).predict(1000, 1000, 1000).submitted(NOW - 10),
            make_job("small").gpus(1).predict(100, 100, 100).submitted(NOW - 5)]
    plan, snap = _plan(jobs, running, preset="fifo")
    est = estimate_starts(plan, [np.array([5000.0])] * 3)
    head, small = _row(snap, "head"), _row(snap, "small")
    assert est.p50_ts[head] == pytest.approx(NOW + 5000)
    assert est.p50_ts[small] >= est.p50_ts[head]
    plan, snap = _plan(jobs, running)  # best effort: the small one backfills now
    est = estimate_starts(plan, [np.array([5000.0])] * 3)
    assert est.p50_ts[_row(snap, "small")] == NOW


def test_a_gang_waits_for_a_node_with_its_gpus_free_not_for_scattered_ones() -> None:
    # two 8-GPU nodes; when "a" ends 8 GPUs are free (4 + 2 on node 0, 2 on node 1), but no node has
    # 8 free until "b" ends and node 0 is whole
    running = [make_running("a").gpus(4).on("node-0000", range(4)).started(NOW - 100).ends(NOW + 1000),
               make_running("b").gpus(2).on("node-0000", (4, 5)).started(NOW - 100).ends(NOW + 3000),
               make_running("c").gpus(6).on("node-0001", range(6)).started(NOW - 100).ends(NOW + 5000)]
    # spread over two nodes it would run 3x slower: the plan holds it for one node (wait_for_better)
    slow = {c: 3.0 for c in PLACEMENT_CLASSES[1:]}
    plan, snap = _plan([make_job("g").gpus(8).predict(1000, 1000, 1000).slowdown(slow).submitted(NOW)], running)
    i = _row(snap, "g")
    assert plan.action[i] in ("wait", "reserve")
    dur = [np.array([1000.0, 3000.0, 5000.0])] * 3  # they end at NOW + 900, + 2900, + 4900
    est = estimate_starts(plan, dur)
    # rule *gang on nodes*: when node 0 is whole, not when 8 scattered GPUs are free (NOW + 900)
    for arr in (est.p10_ts, est.p50_ts):
        assert arr[i] == pytest.approx(NOW + 2900)
    assert est.p90_ts[i] >= NOW + 2900


def test_p10_lets_a_job_past_the_reservation_depth_be_backfilled_ahead_of_earlier_held_jobs() -> None:
    # rule *backfill window*: only the reserved job (depth 1) is protected; c may start right after
    # it, ahead of b, so its p10 comes from that window, while p50/p90 keep the walk's order
    running = [make_running("r0").gpus(8).on("node-0000").started(NOW - 100).ends(NOW + 3600)]
    jobs = [make_job("a").gpus(16).predict(1000, 1000, 1000).submitted(NOW - 30).tier("production"),
            make_job("b").gpus(16).predict(1000, 1000, 1000).submitted(NOW - 20).tier("research"),
            make_job("c").gpus(8).predict(5000, 5000, 5000).submitted(NOW - 10).tier("research")]
    plan, snap = _plan(jobs, running)
    a, b, c = (_row(snap, j) for j in "abc")
    assert [plan.action[i] for i in (a, b, c)] == ["reserve", "wait", "wait"]
    assert list(plan.order) == [a, b, c]
    est = estimate_starts(plan)
    assert est.p10_ts[a] == est.p50_ts[a] == NOW + 3600  # the reserved job itself is not moved
    assert est.p10_ts[b] == est.p50_ts[b] == NOW + 4600
    assert est.backfill_ts[c] == NOW + 4600  # after a, where b is walked
    assert est.p50_ts[c] == est.p90_ts[c] == NOW + 5600
    assert est.p10_ts[c] == pytest.approx(NOW + 5600 - start_estimate.BACKFILL_WEIGHT * 1000)
    assert est.p10_ts[c] < est.p50_ts[c]
