"""Preemption: victim choice (least work lost, then fewest victims), eligibility rules, eviction plans."""

import numpy as np
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.preemption import work_lost_s
from predictor.policy.presets import policy_from_mapping
from predictor.policy.scheduler import decide
from predictor.policy.snapshot import RunningJobs
from tests.builders import SnapshotBuilder, make_job, make_running

INV = homogeneous_inventory(16)  # two 8-GPU nodes
NOW = 50_000.0
OURS = policy_from_mapping({"preemption": {"trigger_wait_s": 0, "min_runtime_s": 600, "grace_s": 90,
                                           "signal": "SIGUSR1", "requeue": False}})


def be(job_id, node, gpus=8, since_ckpt=1000.0, started=NOW - 5000, local=None, prio=10):
    return (make_running(job_id).gpus(gpus).on(node, local).tier("best_effort").started(started)
            .checkpointed(NOW - since_ckpt).ends(NOW + 20_000).priority(prio))


def urgent(job_id="urgent", gpus=8, tier="production"):
    return make_job(job_id).gpus(gpus).tier(tier).predict(3600).submitted(NOW - 60)


def plan_of(*running, pending=(), policy=OURS):
    snap = SnapshotBuilder(INV).running(*running).pending(*(pending or (urgent(),))).build(NOW)
    return decide(snap, policy), snap


@pytest.mark.parametrize(
    "last_ckpt, interval, assumed, expected",
    [
        (NOW - 300, np.nan, None, 300.0),  # reported checkpoint
        (np.nan, 1000.0, None, 700.0),  # ran 1700 s, checkpoints every 1000 s
        # assumed interval, phase unknown: the expected loss interval / 2 (issue 19; it was 1700 mod 600 = 500)
        (np.nan, np.nan, 600.0, 300.0),
        (np.nan, np.nan, None, 1700.0),  # nothing known: everything since start
        (NOW - 5000, np.nan, None, 1700.0),  # a checkpoint before this run's start does not count
    ],
    ids=["reported", "interval", "assumed", "unknown", "stale"],
)
def test_work_lost(last_ckpt, interval, assumed, expected):
    r = RunningJobs.from_columns(job_id=["r"], gpus=[[0]], start_ts=[NOW - 1700], last_checkpoint_ts=[last_ckpt],
                                 checkpoint_interval_s=[interval])
    assert work_lost_s(r, NOW, assumed)[0] == pytest.approx(expected)


def test_picks_the_victim_that_loses_least_work_and_writes_the_eviction_plan():
    plan, _ = plan_of(be("old-ckpt", "node-0000", since_ckpt=3000), be("fresh-ckpt", "node-0001", since_ckpt=60))
    d = plan.decisions[0]
    assert d.action == "preempt"
    e = d.eviction
    assert [v.job_id for v in e.victims] == ["fresh-ckpt"]
    assert e.signal == "SIGUSR1" and e.grace_s == 90 and e.requeue is False and e.for_job_id == "urgent"
    assert e.victims[0].work_lost_s == pytest.approx(60) and e.gpu_hours_lost == pytest.approx(8 * 60 / 3600)
    assert d.placement.gpus_by_node == (("node-0001", 8),)
    a = plan.assignments[0]
    assert a.start_ts == NOW + 90 and a.victims == ("fresh-ckpt",)
    assert plan.evictions == (e,)


def test_equal_work_lost_prefers_fewer_victims():
    running = [be("whole", "node-0000", since_ckpt=100),
               be("half-a", "node-0001", gpus=4, local=[0, 1, 2, 3], since_ckpt=100),
               be("half-b", "node-0001", gpus=4, local=[4, 5, 6, 7], since_ckpt=100)]
    plan, _ = plan_of(*running)
    assert [v.job_id for v in plan.decisions[0].eviction.victims] == ["whole"]


def test_only_the_victims_the_gang_needs():
    running = [be("a", "node-0000", gpus=4, local=[0, 1, 2, 3], since_ckpt=50),
               be("b", "node-0001", gpus=8, since_ckpt=10)]
    plan, _ = plan_of(*running, pending=(urgent(gpus=4),))
    d = plan.decisions[0]
    assert d.action == "start"  # four GPUs are free on node-0000: no eviction at all
    plan, _ = plan_of(*running, pending=(urgent(gpus=12),))
    victims = {v.job_id for v in plan.decisions[0].eviction.victims}
    assert victims == {"b"}  # 4 free + b's 8 hold 12; a stays


def test_minimum_runtime_protects_young_jobs_and_sets_a_revisit_time():
    young = be("young", "node-0000", started=NOW - 100)
    plan, _ = plan_of(young, be("young2", "node-0001", started=NOW - 200))
    assert plan.decisions[0].action == "reserve"
    assert plan.revisit_at_ts == NOW - 200 + 600  # when the older one may first be preempted


@pytest.mark.parametrize(
    "preemptor, victim_tier, preempts",
    [("production", "best_effort", True), ("production", "research", True), ("sla", "research", False),
     ("research", "best_effort", False), ("debug", "best_effort", False)],  # debug preempts nobody by default
)
def test_tier_rules(preemptor, victim_tier, preempts):
    running = [be(f"v{i}", f"node-000{i}").tier(victim_tier) for i in range(2)]
    plan, _ = plan_of(*running, pending=(urgent(tier=preemptor),))
    assert (plan.decisions[0].action == "preempt") is preempts


def test_victims_never_outrank_the_preemptor():
    high = be("high", "node-0000", prio=2**31 - 2)
    plan, _ = plan_of(high, be("low", "node-0001", prio=1))
    d = plan.decisions[0]
    assert [v.job_id for v in d.eviction.victims] == ["low"] and d.eviction.victims[0].priority < d.priority


def test_no_preemption_when_the_wait_is_short():
    policy = policy_from_mapping({"preemption": {"trigger_wait_s": 900, "min_runtime_s": 0}})
    soon = [make_running(f"r{i}").gpus(8).on(f"node-000{i}").tier("best_effort").started(0).ends(NOW + 300)
            for i in range(2)]
    plan, _ = plan_of(*soon, policy=policy)
    assert plan.decisions[0].action == "reserve" and plan.decisions[0].reservation.start_ts == NOW + 300


def test_deadline_triggers_preemption_but_not_for_a_job_already_at_risk():
    sla_preempts = {**{k: v.model_dump() for k, v in policy_from_mapping({}).tiers.items()}}
    sla_preempts["sla"]["can_preempt"] = ["best_effort"]  # the default gives SLA jobs no victims: this test does
    policy = policy_from_mapping({"preemption": {"trigger_wait_s": 10_000, "min_runtime_s": 0}, "tiers": sla_preempts})
    running = [make_running(f"r{i}").gpus(8).on(f"node-000{i}").tier("best_effort").started(0).ends(NOW + 3000)
               for i in range(2)]
    savable = urgent("savable", tier="sla").deadline(NOW + 5000)  # 3000 wait + 3600 run > 5000 left
    hopeless = urgent("hopeless", tier="sla").deadline(NOW + 1800)  # even starting now misses
    plan, _ = plan_of(*running, pending=(savable,), policy=policy)
    assert plan.decisions[0].action == "preempt"
    plan, _ = plan_of(*running, pending=(hopeless,), policy=policy)
    d = plan.decisions[0]
    assert d.action == "reserve" and d.sla_at_risk and any("SLA at risk" in w for w in d.warnings)


def test_preemption_disabled_and_per_cycle_cap():
    running = [be(f"v{i}", f"node-000{i}") for i in range(2)]
    jobs = (urgent("u1"), urgent("u2"))
    off = policy_from_mapping({"preemption": {"enabled": False}})
    plan, _ = plan_of(*running, pending=jobs, policy=off)
    assert all(d.action != "preempt" for d in plan.decisions)
    capped = policy_from_mapping({"preemption": {"trigger_wait_s": 0, "max_preemptors_per_cycle": 1}})
    plan, _ = plan_of(*running, pending=jobs, policy=capped)
    assert [d.action for d in plan.decisions].count("preempt") == 1
