"""Properties of decide() on random clusters (hypothesis): the guarantees docs/rules-layer.md states."""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.layout import ClusterLayout
from predictor.capacity.placement import find_gang
from predictor.policy.presets import load_policy as _load_policy
from predictor.policy.presets import policy_from_mapping
from predictor.policy.scheduler import decide
from tests.builders import SnapshotBuilder, make_job, make_running

INV = Inventory(nodes=tuple(
    Node(f"n{i}", "A100-80GB", 4, nvlink_islands=((0, 1), (2, 3)), numa_of_gpu=(0, 0, 1, 1), rack=f"r{i // 2}")
    for i in range(4)
))
LAY = ClusterLayout.of(INV)
TIERS = ["production", "debug", "sla", "research", "best_effort"]
TEAMS = ["x", "y", "z"]
NOW = 100_000.0
PRESETS = ["ours", "fifo", "sjf-oracle", "qssf", "las", "kueue"]
load_policy = lru_cache(maxsize=None)(lambda preset=None: _load_policy(preset=preset))
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def running_jobs(draw):
    free = np.full(LAY.n_gpus, 1000)
    specs = []
    for k in range(draw(st.integers(0, 7))):
        share = draw(st.booleans())
        milli = draw(st.integers(100, 900)) if share else 1000
        gpus = 1 if share else draw(st.integers(1, 6))
        choice = find_gang(LAY, free >= milli, gpus, free_milli=free if share else None)
        if choice is None:
            continue
        free[choice.gpus] -= milli
        spec = (make_running(f"r{k}").gpus(gpus, milli).started(NOW - draw(st.floats(0, 5000)))
                .ends(NOW + draw(st.floats(1, 6000))).tier(draw(st.sampled_from(TIERS)))
                .team(draw(st.sampled_from(TEAMS))).priority(draw(st.integers(1, 2**31 - 1))))
        for node, local in LAY.gpu_indices_by_node(choice.gpus):
            spec.on(node, local)
        if draw(st.booleans()):
            spec.checkpoint_every(draw(st.floats(60, 3600)))
        specs.append(spec)
    return specs


@st.composite
def pending_jobs(draw, n_min=0, submitted_after=0.0):
    specs = []
    for k in range(draw(st.integers(n_min, 8))):
        p50 = draw(st.floats(10, 5000))
        steps = draw(st.lists(st.floats(1.0, 1.6), min_size=4, max_size=4))
        spec = (make_job(f"p{k}").predict(p50, p50 * draw(st.floats(1, 3)))
                .submitted(draw(st.floats(submitted_after, NOW))).tier(draw(st.sampled_from(TIERS)))
                .team(draw(st.sampled_from(TEAMS))).slowdown(np.cumprod([1.0, *steps])))
        if draw(st.booleans()):
            spec.share(draw(st.integers(100, 900)))
        else:
            spec.gpus(draw(st.integers(1, 8)))
        if draw(st.booleans()):
            spec.deadline(NOW + draw(st.floats(0, 20_000)))
        specs.append(spec)
    return specs


def snapshot(running, pending, now=NOW, usage=None):
    b = SnapshotBuilder(INV).running(*running).pending(*pending)
    if usage:
        b.usage(usage)
    return b.build(now)


def occupancy_ok(snap, plan, grace):
    """Every GPU holds at most 1000 milli at every instant, if every job ends by its p90 prediction."""
    r = snap.running
    evicted = {v.job_id for e in plan.evictions for v in e.victims}
    intervals = []  # (gpu, start, end, milli)
    for i in range(len(r)):
        end = NOW + grace if r.job_id[i] in evicted else r.predicted_end_ts[i]
        intervals += [(g, NOW, end, r.gpu_milli[i]) for g in r.gpus_of(i)]
    for a in plan.assignments:
        intervals += [(g, a.start_ts, a.predicted_end_ts, a.gpu_milli) for g in a.gpus]
    for res in plan.reservations:
        for node, local in res.placement.gpu_indices:
            intervals += [(LAY.gpu_index(node, x), res.start_ts, res.predicted_end_ts, 1000) for x in local]
    for g in range(LAY.n_gpus):
        mine = [(s, e, m) for gg, s, e, m in intervals if gg == g and e > s]
        for t in {s for s, _, _ in mine}:
            held = sum(m for s, e, m in mine if s <= t < e)
            assert held <= 1000, f"GPU {g} holds {held} milli at t={t}: {mine}"


@cache
def shallow_ours(depth):
    """ours with a small scheduling depth (so the depth cut-off and the fits-only walk are exercised)."""
    base = _load_policy()
    return policy_from_mapping({**base.model_dump(), "queueing": {**base.queueing.model_dump(),
                                                                  "scheduling_depth": depth}})


@FAST
@given(running=running_jobs(), pending=pending_jobs(), preset=st.sampled_from([*PRESETS, 1, 2]))
def test_no_gpu_double_booked_and_backfill_never_delays_a_reservation(running, pending, preset):
    policy = shallow_ours(preset) if isinstance(preset, int) else load_policy(preset)
    snap = snapshot(running, pending)
    plan = decide(snap, policy, explain=False)
    occupancy_ok(snap, plan, policy.preemption.grace_s)
    starts = [a.job_id for a in plan.assignments]
    assert len(starts) == len(set(starts))
    for res in plan.reservations:
        assert res.start_ts >= NOW and res.predicted_end_ts > res.start_ts


@FAST
@given(running=running_jobs(), pending=pending_jobs(n_min=1), preset=st.sampled_from(["ours", "las", "kueue"]),
       trigger=st.sampled_from([0.0, 900.0]))
def test_a_victim_never_outranks_the_job_it_makes_room_for(running, pending, preset, trigger):
    policy = load_policy(preset)
    policy = policy_from_mapping({**policy.model_dump(), "preemption": {
        **policy.preemption.model_dump(), "trigger_wait_s": trigger, "min_runtime_s": 0}})
    snap = snapshot(running, pending)
    plan = decide(snap, policy, explain=False)
    for d in plan.decisions:
        if d.action == "preempt":
            assert d.eviction.victims
            assert all(v.priority < d.priority for v in d.eviction.victims), d.reason
            assert all(v.work_lost_s >= 0 for v in d.eviction.victims)


@FAST
@given(running=running_jobs(), pending=pending_jobs(n_min=1), preset=st.sampled_from(PRESETS),
       longer=st.floats(0, 200_000), later=st.floats(0, 200_000), pick=st.integers(0, 7))
def test_waiting_longer_never_lowers_priority(running, pending, preset, longer, later, pick):
    policy = load_policy(preset)
    i = pick % len(pending)
    base = decide(snapshot(running, pending), policy, explain=False).priority[i]
    pending[i].submitted(pending[i].submit_ts - longer)  # the same job, submitted earlier
    earlier = decide(snapshot(running, pending), policy, explain=False).priority[i]
    assert earlier >= base
    # the same queue seen later: closed fair-share usage decays alike for all teams
    usage = {"x": 5e5, "y": 1e5}
    decay = 2 ** (-later / policy.factors.fairshare.half_life_s)
    now_p = decide(snapshot(running, pending, usage=usage), policy, explain=False).priority[i]
    later_p = decide(snapshot(running, pending, now=NOW + later, usage={k: v * decay for k, v in usage.items()}),
                     policy, explain=False).priority[i]
    assert later_p >= now_p


@FAST
@given(running=running_jobs(), later_jobs=pending_jobs(), waited=st.floats(0, 3 * 86_400),
       tier=st.sampled_from(TIERS), size=st.integers(1, 8), p50=st.floats(10, 1e6))
def test_no_starvation_bound(running, later_jobs, waited, tier, size, p50):
    """With the default policy and one threshold for every job (T = aging.starvation_after_s; the
    run-time-relative thresholds are covered by the guard-band test below), a job that has waited T,
    with no job that started starving before it still pending, is ordered ahead of every job submitted
    after it, whatever those are, and holds a start or a reservation."""
    base = load_policy()
    policy = policy_from_mapping({**base.model_dump(), "aging": {**base.aging.model_dump(),
                                                                 "starvation_run_time_factor": None}})
    bound = policy.aging.starvation_after_s
    submit = NOW - bound - waited
    job = make_job("J").gpus(size).predict(p50).tier(tier).submitted(submit)
    for k in later_jobs:
        if k.submit_ts <= submit:
            k.submitted(submit + 1.0)
    plan = decide(snapshot(running, [job, *later_jobs], usage={"x": 1e9}), policy, explain=False)
    assert plan.order[0] == 0, "the starving job is not at the head of the queue"
    # integer priorities resolve submit times to the second: a job submitted in the same second ties
    assert all(plan.priority[0] >= plan.priority[k] for k in range(1, len(later_jobs) + 1))
    assert plan.action[0] in ("start", "reserve", "preempt")


@FAST
@given(running=running_jobs(), others=pending_jobs(), waited=st.floats(0, 3 * 86_400),
       earlier=st.lists(st.floats(1, 86_400), max_size=4), depth=st.sampled_from([None, 1, 2, 3]),
       factor=st.sampled_from([None, 0.5, 4.0]), tier=st.sampled_from(TIERS), p50=st.floats(10, 1e6))
def test_guard_band_admits_the_earliest_starving_jobs(running, others, waited, earlier, depth, factor, tier, p50):
    """Rule *starvation guard* with any band depth and threshold: the band holds the first
    ``guard_depth`` starving jobs by the time they started starving; a band member precedes every
    job that started starving after it (and every job not starving), band members in that order."""
    base = load_policy()
    policy = policy_from_mapping({**base.model_dump(), "aging": {
        "starvation_after_s": 86_400.0, "guard_depth": depth, "starvation_run_time_factor": factor,
        "starvation_min_s": 600.0}})
    submit = NOW - 86_400.0 - waited
    jobs = [make_job("J").gpus(2).predict(p50).tier(tier).submitted(submit)]
    jobs += [make_job(f"e{k}").gpus(1).predict(p50).tier("best_effort").submitted(submit - w)
             for k, w in enumerate(earlier)]
    jobs += others
    plan = decide(snapshot(running, jobs, usage={"x": 1e9}), policy, explain=False)
    p = SnapshotBuilder(INV).pending(*jobs).build(NOW).pending
    p90 = np.where(np.isfinite(p.p90_s), p.p90_s, policy.reservation.unknown_duration_s)
    thr = np.full(len(p), 86_400.0) if factor is None else np.clip(factor * p90, 600.0, 86_400.0)
    since = p.submit_ts + thr
    starving = np.flatnonzero(NOW - p.submit_ts >= thr)
    ranked = starving[np.lexsort((starving, p.submit_ts[starving], since[starving]))]
    band = ranked if depth is None else ranked[:depth]
    assert plan.order[:len(band)].tolist() == band.tolist()
    assert (plan.priority[band] >= 2**31).all()
    rest = np.setdiff1d(np.arange(len(p)), band)
    assert (plan.priority[rest] < 2**31).all()
    if 0 in band.tolist():  # J (submitted first among its equals) precedes everyone that starves later
        assert all(plan.priority[0] >= plan.priority[k] for k in rest)
        assert plan.action[plan.order[0]] in ("start", "reserve", "preempt")


@FAST
@given(running=running_jobs(), pending=pending_jobs(n_min=1), depth=st.integers(1, 3))
def test_scheduling_depth_keeps_priorities_and_the_head(running, pending, depth):
    """Rule *scheduling depth*: priorities are computed for every job and the head of the queue (the
    guard band's first job when there is one) is decided exactly as without a depth limit."""
    snap = snapshot(running, pending)
    shallow = decide(snap, shallow_ours(depth), explain=False)
    full = decide(snap, shallow_ours(None), explain=False)
    assert shallow.order.tolist() == full.order.tolist()
    assert (shallow.priority == full.priority).all()
    head = int(full.order[0])
    assert shallow.action[head] == full.action[head]
    skipped = [d for d in shallow.queue() if "scheduling depth" in d.reason]
    assert all(d.action == "wait" for d in skipped)
    assert len(skipped) <= max(len(pending) - depth, 0)


@given(running=running_jobs(), pending=pending_jobs(n_min=1), preset=st.sampled_from(PRESETS),
       explain=st.booleans(), data=st.data())
@FAST
def test_decisions_written_together_equal_those_written_one_by_one(running, pending, preset, explain, data):
    """``DecisionWriter.write_rows`` (column by column, what a batch and ``queue()`` use) writes, for any
    rows in any order, the Decisions that writing each row alone gives."""
    from predictor.policy.plan import Outcome
    from predictor.store.codec import decision_doc

    plan = decide(snapshot(running, pending), load_policy(preset), explain=explain)
    writer, wait = plan._writer, Outcome("wait")
    n = len(plan.priority)
    rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    outcomes = [plan._outcomes.get(i, wait) for i in rows]
    together = [decision_doc(d) for d in writer.write_rows(rows, outcomes, None)]
    alone = [decision_doc(writer.write(i, o)) for i, o in zip(rows, outcomes, strict=True)]
    assert together == alone
    queue = {d.extra["pending_row"]: decision_doc(d) for d in plan.queue()}
    written = {d.extra["pending_row"]: decision_doc(d) for d in plan.decisions}
    for i, doc in zip(rows, together, strict=True):
        if i not in written:  # the plan's own Decisions of preemptions carry their eviction plan
            assert queue[i] == doc
