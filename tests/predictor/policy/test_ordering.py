import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.decision import KUEUE_PRIORITY_MAX, SLURM_PRIORITY_MAX, Decision
from predictor.policy.ordering import GUARD_BASE, NORMAL_MAX, ORDERINGS, order_pending
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.policy.scheduler import open_cycle
from tests.builders import SnapshotBuilder, make_job, make_running

INV = homogeneous_inventory(16)


def ranked(policy, *jobs, now=1000.0, running=()):
    snap = SnapshotBuilder(INV).pending(*jobs).running(*running).build(now)
    ctx = open_cycle(snap, policy)
    ordering = ORDERINGS[policy.ordering](policy)
    keys = ordering.keys(ctx)
    order, prio, guarded = order_pending(ctx, keys, policy.aging)
    ids = [str(snap.pending.job_id[i]) for i in order]
    return ids, prio[order], ctx, ordering


JOBS = [
    make_job("old-long").submitted(0).predict(10_000).gpus(1).tier("research"),
    make_job("mid-wide").submitted(100).predict(1_000).gpus(16).tier("production"),
    make_job("new-short").submitted(200).predict(100).gpus(2).tier("best_effort").attained(50_000),
]


@pytest.mark.parametrize(
    "preset, expected",
    [
        ("fifo", ["old-long", "mid-wide", "new-short"]),
        ("sjf-oracle", ["new-short", "mid-wide", "old-long"]),
        ("qssf", ["new-short", "old-long", "mid-wide"]),  # 200 < 10,000 < 16,000 GPU-s
        ("las", ["old-long", "mid-wide", "new-short"]),  # new-short attained 50,000 GPU-s: queue 3
        ("kueue", ["mid-wide", "old-long", "new-short"]),  # production > research > best effort
    ],
)
def test_comparison_orderings(preset, expected):
    ids, prio, _, _ = ranked(load_policy(preset=preset), *JOBS)
    assert ids == expected
    assert (np.diff(prio) <= 0).all(), "integer priority must not rise along the order"


def test_kueue_priority_is_the_priority_class_value():
    ids, prio, _, _ = ranked(load_policy(preset="kueue"), *JOBS)
    d = Decision(job_id="x", priority=int(prio[0]), factors=(), action="wait", tier="production")
    assert d.kueue_priority == 100_000


def test_multifactor_prefers_short_and_older_and_ties_keep_row_order():
    jobs = [make_job("b").submitted(20).predict(600).tier("research"),
            make_job("a").submitted(10).predict(600).tier("research"),
            make_job("twin").submitted(10).predict(600).tier("research"),
            make_job("long").submitted(0).predict(1e6).tier("research")]
    ids, prio, _, _ = ranked(load_policy(), *jobs)
    assert ids == ["a", "twin", "b", "long"]
    assert prio[0] == prio[1] > prio[2] > prio[3]  # equal scores share a priority; age breaks a-vs-b


def test_starvation_guard_puts_long_waiters_first_in_submit_order():
    # every starving job in the band (guard_depth: null)
    policy = policy_from_mapping({"aging": {"starvation_after_s": 5000, "guard_depth": None}})
    jobs = [make_job("starving-late").submitted(300).predict(1e6).tier("best_effort"),
            make_job("starving-early").submitted(200).predict(1e6).tier("best_effort"),
            make_job("vip").submitted(9000).predict(60).tier("production")]
    ids, prio, _, _ = ranked(policy, *jobs, now=10_000)
    assert ids == ["starving-early", "starving-late", "vip"]
    assert prio[0] > prio[1] >= GUARD_BASE > NORMAL_MAX >= prio[2]
    # the default band depth 1: only the job that started starving first goes above everyone
    ids, prio, _, _ = ranked(policy_from_mapping({"aging": {"starvation_after_s": 5000}}), *jobs, now=10_000)
    assert ids == ["starving-early", "vip", "starving-late"]
    assert prio[0] >= GUARD_BASE > NORMAL_MAX >= prio[1] > prio[2]


def test_las_reranks_running_jobs_by_attained_service():
    policy = load_policy(preset="las")
    running = [make_running("fresh").gpus(1).started(990), make_running("veteran").gpus(8).started(0).attained(1e6)]
    _, _, ctx, ordering = ranked(policy, make_job("p").submitted(500), running=running)
    rp = ordering.running_priority(ctx)
    pending_prio = ordering.keys(ctx).priority[0]
    assert rp[0] > rp[1] and pending_prio > rp[1]


@settings(max_examples=40, deadline=None)
@given(preset=st.sampled_from(["fifo", "sjf-oracle", "qssf", "las", "kueue", "ours"]),
       submits=st.lists(st.floats(0, 4e9, allow_nan=False), min_size=1, max_size=8),
       p50=st.floats(1, 1e9), now_after=st.floats(0, 1e7))
def test_priorities_fit_slurm_and_kueue_ranges(preset, submits, p50, now_after):
    jobs = [make_job(f"j{i}").submitted(s).predict(p50).tier("sla") for i, s in enumerate(submits)]
    _, prio, _, _ = ranked(load_policy(preset=preset), *jobs, now=max(submits) + now_after)
    assert (prio >= 1).all() and (prio <= SLURM_PRIORITY_MAX).all()
    assert (prio // 2 <= KUEUE_PRIORITY_MAX).all()
    assert (np.diff(prio) <= 0).all()


def test_backlog_term_delays_starvation_while_the_queue_is_long():
    # 16 GPUs; one job waiting 3 h (threshold floor 2 h) behind a queue holding 16 x 10 h of GPU-time
    waiter = make_job("waiter").submitted(0).predict(600).gpus(1).tier("research")
    queue = [make_job(f"q{i}").submitted(10_000).predict(36_000).gpus(1).tier("research") for i in range(16)]
    base = {"starvation_run_time_factor": 4.0, "starvation_min_s": 7200.0, "guard_depth": None}
    now = 10_800.0
    _, _, ctx, _ = ranked(policy_from_mapping({"aging": base}), waiter, *queue, now=now)
    from predictor.policy.ordering import backlog_drain_s, starvation_threshold_s
    drain = backlog_drain_s(ctx)
    assert drain == pytest.approx((600 + 16 * 36_000) / 16)  # ~10 h
    plain = policy_from_mapping({"aging": base})
    assert starvation_threshold_s(ctx, plain.aging)[0] == 7200.0  # 4 x p90 (600) under the 2 h floor
    ids, prio, _, _ = ranked(plain, waiter, *queue, now=now)
    assert prio[ids.index("waiter")] >= GUARD_BASE  # starving after 3 h
    relative = policy_from_mapping({"aging": {**base, "starvation_backlog_factor": 0.5}})
    t = starvation_threshold_s(ctx, relative.aging)
    assert t[0] == pytest.approx(0.5 * drain)  # ~5 h: not starving yet
    ids, prio, _, _ = ranked(relative, waiter, *queue, now=now)
    assert prio.max() <= NORMAL_MAX
    # still capped by T_max: the bound of docs/rules-layer.md holds whatever the backlog
    capped = policy_from_mapping({"aging": {**base, "starvation_backlog_factor": 100.0, "starvation_after_s": 9000.0}})
    assert starvation_threshold_s(ctx, capped.aging).max() == 9000.0
    ids, prio, _, _ = ranked(capped, waiter, *queue, now=now)
    assert ids[0] == "waiter" and prio[0] >= GUARD_BASE
