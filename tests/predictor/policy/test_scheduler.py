"""Scenario tests of decide(): one small cluster per rule, built with the fluent builders."""

import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.policy.scheduler import decide
from tests.builders import SnapshotBuilder, make_job, make_running

TWO_NODES = homogeneous_inventory(16)  # node-0000, node-0001: 8 GPUs each, one rack
OURS = load_policy()
#: Tier before size, reservations several deep: the mechanics of reservations and backfill show on it
#: (the default orders shortest first, so a big production job rarely blocks the head there).
TIER_FIRST = policy_from_mapping({"weights": {"tier": 3.0, "sla": 3.0, "age": 2.0, "fairshare": 1.5, "shortness": 6.0,
                                              "topology": 0.5}, "reservation": {"depth": 8},
                                 "aging": {"starvation_after_s": 86_400.0, "starvation_run_time_factor": None}})
NOW = 10_000.0


def plan_of(*jobs, running=(), policy=OURS, inv=TWO_NODES, now=NOW, **kw):
    snap = SnapshotBuilder(inv).pending(*jobs).running(*running).build(now)
    return decide(snap, policy, **kw), snap


def by_id(plan):
    return {d.job_id: d for d in plan.queue()}


def test_start_on_best_placement_with_time_limit_from_p90():
    plan, _ = plan_of(make_job("a").gpus(8).predict(3000, 4000).tier("sla"), make_job("b").predict(10, 50))
    d = plan.decision_for("a")
    assert d.action == "start" and d.placement.placement_class == "nvlink" and d.placement.num_gpus == 8
    assert d.flavor == "A100-80GB" and d.num_gpus == 8 and d.tier == "sla"
    assert d.time_limit_s == 5040.0  # 4000 x 1.25 = 5000, rounded up to the minute
    assert plan.decision_for("b").time_limit_s == 600.0  # never below time_limit.min_s
    assert d.reason.startswith("Starts now on 8 x A100-80GB") and "Priority" in d.reason
    assert {f.name for f in d.factors} == set(OURS.weights)
    assert d.score == pytest.approx(sum(f.value * f.weight for f in d.factors))
    a = next(a for a in plan.assignments if a.job_id == "a")
    assert len(a.gpus) == 8 and a.predicted_end_ts == NOW + 4000


def test_reject_what_can_never_run():
    plan, _ = plan_of(make_job("huge").gpus(32), make_job("t4").types("T4"))
    d = by_id(plan)
    assert d["huge"].action == "reject" and "largest pool here has 16" in d["huge"].reason
    assert d["t4"].action == "reject" and "T4" in d["t4"].reason


def reservation_cluster():
    # node-0000: r1 holds 4 GPUs until +1000, 4 free; node-0001: r2 holds all 8 until +5000
    return [make_running("r1").gpus(4).on("node-0000", [0, 1, 2, 3]).started(0).ends(NOW + 1000).tier("production"),
            make_running("r2").gpus(8).on("node-0001").started(0).ends(NOW + 5000).tier("production")]


def test_reservation_and_backfill_by_p90():
    jobs = [make_job("big").gpus(8).predict(3000).tier("production").submitted(0),
            make_job("short").gpus(4).predict(400, 500).tier("research").submitted(100),
            make_job("long").gpus(4).predict(2000, 3000).tier("research").submitted(200)]
    plan, _ = plan_of(*jobs, running=reservation_cluster(), policy=TIER_FIRST)
    d = by_id(plan)
    res = d["big"].reservation
    assert d["big"].action == "reserve" and res.start_ts == NOW + 1000
    assert res.placement.gpus_by_node == (("node-0000", 8),) and res.expires_ts == res.start_ts + 600
    assert res.predicted_end_ts == NOW + 1000 + 3000
    assert d["short"].action == "start" and d["short"].reason.startswith("Backfills")
    assert NOW + 500 <= res.start_ts
    assert d["long"].action == "reserve" and d["long"].reservation.start_ts == NOW + 4000  # after big ends
    assert plan.revisit_at_ts == NOW + 1000


def test_no_backfill_when_reservations_are_not_lent():
    policy = TIER_FIRST.model_copy(update={"reservation": TIER_FIRST.reservation.model_copy(update={"backfill": "none"})})
    jobs = [make_job("big").gpus(8).predict(3000).tier("production").submitted(0),
            make_job("short").gpus(4).predict(400, 500).tier("research").submitted(100)]
    plan, _ = plan_of(*jobs, running=reservation_cluster(), policy=policy)
    assert by_id(plan)["short"].action != "start"


@pytest.mark.parametrize("slowdown, action", [(2.0, "reserve"), (1.05, "start")])
def test_wait_for_a_better_placement_when_it_finishes_earlier(slowdown, action):
    running = [make_running("r1").gpus(4).on("node-0000", [0, 1, 2, 3]).started(0).ends(NOW + 100),
               make_running("r2").gpus(4).on("node-0001", [0, 1, 2, 3]).started(0).ends(NOW + 100)]
    slow = {"nvlink": 1.0, "pcie_same_numa": 1.0, "cross_numa": 1.0, "cross_node_same_rack": slowdown,
            "cross_rack": slowdown}
    plan, _ = plan_of(make_job("j").gpus(8).predict(1000).slowdown(slow), running=running)
    d = plan.decisions[0]
    assert d.action == action
    if action == "reserve":
        assert d.reservation.placement.placement_class == "nvlink" and d.reservation.start_ts == NOW + 100
        assert "Waits for nvlink" in d.reason
    else:
        assert d.placement.placement_class == "cross_node_same_rack"
        assert d.placement.slowdown == 1.05


def test_strict_fifo_head_blocks_and_best_effort_skips():
    running = [make_running("r").gpus(8).on("node-0000").started(0).ends(NOW + 1000)]
    jobs = [make_job("head").gpus(16).submitted(0), make_job("small").gpus(1).submitted(5)]
    fifo, _ = plan_of(*jobs, running=running, policy=load_policy(preset="fifo"))
    assert [d.action for d in fifo.queue()] == ["wait", "wait"]
    assert "strict FIFO" in by_id(fifo)["small"].reason and "strict FIFO" in by_id(fifo)["head"].reason
    sjf, _ = plan_of(*jobs, running=running, policy=load_policy(preset="qssf"))
    assert by_id(sjf)["small"].action == "start"


def test_kueue_quotas_with_cohort_borrowing(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("teams:\n  a: {nominal_gpus: 8, borrowing_limit_gpus: 4}\n  b: {nominal_gpus: 8}\n")
    policy = load_policy(site, preset="kueue")
    running = [make_running("ra").gpus(8).team("a").started(0)]
    jobs = [make_job("a-borrow").gpus(4).team("a").submitted(0), make_job("a-more").gpus(4).team("a").submitted(1)]
    plan, _ = plan_of(*jobs, running=running, policy=policy)
    d = by_id(plan)
    assert d["a-borrow"].action == "start"  # borrows 4 of b's unused 8
    assert d["a-more"].action == "wait" and "over quota" in d["a-more"].reason  # borrowing limit 4


def test_kueue_reclaims_borrowed_capacity_by_preemption(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("teams:\n  a: {nominal_gpus: 8}\n  b: {nominal_gpus: 8}\n")
    policy = load_policy(site, preset="kueue")
    # a borrows: it runs 16 GPUs on a nominal 8; b comes back for its share
    running = [make_running("a1").gpus(8).on("node-0000").team("a").tier("research").started(0).priority(2 * 10_000 + 1),
               make_running("a2").gpus(8).on("node-0001").team("a").tier("research").started(0).priority(2 * 10_000 + 1)]
    plan, _ = plan_of(make_job("b1").gpus(8).team("b").tier("sla"), running=running, policy=policy)
    d = plan.decisions[0]
    assert d.action == "preempt" and len(d.eviction.victims) == 1 and d.eviction.victims[0].team == "a"


def test_sizing_moves_a_job_off_a_too_small_gpu():
    inv = Inventory(nodes=(Node("small", "A10", 8), Node("big", "A100-80GB", 8)))
    plan, _ = plan_of(make_job("j").types("A10").memory(60_000).predict(600), inv=inv)
    d = plan.decisions[0]
    assert d.action == "start" and d.flavor == "A100-80GB" and d.placement.gpus_by_node == (("big", 1),)
    assert any("OOM risk; moved to A100-80GB" in w for w in d.warnings)


@pytest.mark.parametrize(("preset", "flavor"), [("qssf", "A10"), ("qssf-sized", "A100-80GB")])
def test_qssf_sized_moves_the_job_qssf_leaves_on_a_too_small_gpu(preset, flavor):
    """The baseline with our sizing: the same QSSF order, the flavor from predicted memory."""
    inv = Inventory(nodes=(Node("small", "A10", 8), Node("big", "A100-80GB", 8)))
    plan, _ = plan_of(make_job("j").types("A10").memory(60_000).predict(600), inv=inv, policy=load_policy(preset=preset))
    d = plan.decisions[0]
    assert d.action == "start" and d.flavor == flavor


def test_gpu_shares_pack_onto_one_gpu():
    jobs = [make_job(f"s{i}").share(300).predict(600).submitted(i) for i in range(3)]
    plan, _ = plan_of(*jobs)
    gpus = {tuple(a.gpus.tolist()) for a in plan.assignments}
    assert len(plan.assignments) == 3 and len(gpus) == 1  # 3 x 0.3 of one GPU


def test_decide_is_pure_and_deterministic():
    jobs = [make_job(f"j{i}").gpus(1 + i % 8).predict(100 * (i + 1)).submitted(i).tier("research") for i in range(20)]
    snap = SnapshotBuilder(TWO_NODES).pending(*jobs).running(*reservation_cluster()).build(NOW)
    before = {k: v.copy() for k, v in vars(snap.pending).items() if isinstance(v, np.ndarray)}
    free_before = snap.free_milli.copy()
    a, b = decide(snap, OURS), decide(snap, OURS)
    assert [(d.job_id, d.action, d.priority) for d in a.queue()] == [(d.job_id, d.action, d.priority) for d in b.queue()]
    assert all(np.array_equal(before[k], getattr(snap.pending, k), equal_nan=before[k].dtype.kind == "f")
               for k in before)
    assert (snap.free_milli == free_before).all()
    terse = decide(snap, OURS, explain=False)
    assert [(d.job_id, d.action) for d in terse.decisions] == [(d.job_id, d.action) for d in a.decisions]
    assert all(f.detail == "" for d in terse.decisions for f in d.factors)


def test_queue_covers_every_pending_job_in_priority_order():
    jobs = [make_job(f"j{i}").gpus(8).predict(1000 * (i + 1)).submitted(i) for i in range(5)]
    plan, snap = plan_of(*jobs, policy=policy_from_mapping({"reservation": {"depth": 1}}))
    assert [d.action for d in plan.queue()] == ["start", "start", "reserve", "wait", "wait"]
    q = plan.queue()
    assert sorted(d.job_id for d in q) == sorted(snap.pending.job_id.tolist())
    assert [d.priority for d in q] == sorted((d.priority for d in q), reverse=True)
    assert plan.decision_for("j4").job_id == "j4"
    with pytest.raises(KeyError):
        plan.decision_for("nope")
    waiting = [d for d in q if d.action == "wait"]
    assert waiting and all(d.reason.startswith("Waits:") for d in waiting)


def test_fallback_predictions_are_planned_with_the_time_limit():
    plan, _ = plan_of(make_job("j").gpus(8).time_limit(7200).fallback())
    d = plan.decisions[0]
    assert d.fallback and d.model_version == "fallback"
    assert plan.assignments[0].predicted_end_ts == NOW + 7200
    assert d.time_limit_s is None  # no prediction: no suggested limit
    assert any("no duration prediction" in w for w in d.warnings)


def test_reserve_only_the_starving():
    """``reservation.only_starving``: a blocked job outside the starvation guard band gets no
    reservation (it waits, as under QSSF, and a shorter job may take the GPUs first); a starving
    one still does, so the no-starvation bound keeps its reservation."""
    only = {"reservation": {"depth": 8, "only_starving": True},
            "aging": {"starvation_after_s": 5_000.0, "starvation_run_time_factor": None}}
    policy = policy_from_mapping(only)
    fresh = make_job("big").gpus(8).predict(3000).tier("production").submitted(NOW - 100)
    plan, _ = plan_of(fresh, running=reservation_cluster(), policy=policy)
    assert by_id(plan)["big"].action == "wait" and by_id(plan)["big"].reservation is None
    plan, _ = plan_of(fresh, running=reservation_cluster(), policy=policy_from_mapping(
        {**only, "reservation": {"depth": 8}}))
    assert by_id(plan)["big"].action == "reserve"  # the same job, reservations for all
    starving = make_job("big").gpus(8).predict(3000).tier("production").submitted(NOW - 6_000)
    later = make_job("next").gpus(8).predict(3000).tier("production").submitted(NOW - 200)
    plan, _ = plan_of(starving, later, running=reservation_cluster(), policy=policy)
    d = by_id(plan)
    assert d["big"].action == "reserve" and d["big"].reservation.start_ts == NOW + 1000
    assert d["next"].action == "wait" and d["next"].reservation is None  # outside the band: none


def test_start_below_the_bound_on_a_free_type_that_holds_the_point_estimate():
    # the A100s are busy; the job's bound (60 GB) needs one, its point estimate (15 GB) fits an A10
    inv = Inventory(nodes=(Node("small", "A10", 8), Node("big", "A100-80GB", 8)))
    busy = make_running("r").gpus(8).on("big").started(0).ends(NOW + 7200)
    plan, _ = plan_of(make_job("j").memory(60_000, 15_000).predict(600), running=[busy], inv=inv)
    d = by_id(plan)["j"]
    assert d.action == "start" and d.flavor == "A10" and d.placement.gpus_by_node == (("small", 1),)
    assert "Below its predicted peak-memory bound" in d.reason and "OOM risk" in d.reason
    # where a type that holds the bound is free, it comes first
    plan, _ = plan_of(make_job("j").memory(60_000, 15_000).predict(600), inv=inv)
    assert by_id(plan)["j"].flavor == "A100-80GB"
    # a point estimate that no free type holds, no point estimate, or the rule off: it waits for an A100
    for job, policy in ((make_job("j").memory(60_000, 30_000).predict(600), OURS),
                        (make_job("j").memory(60_000).predict(600), OURS),
                        (make_job("j").memory(60_000, 15_000).predict(600),
                         policy_from_mapping({"sizing": {"start_below_bound": False}}))):
        plan, _ = plan_of(job, running=[busy], inv=inv, policy=policy)
        d = by_id(plan)["j"]
        assert d.action == "reserve" and d.flavor == "A100-80GB", (d.action, d.flavor)
        assert d.reservation.placement.gpus_by_node == (("big", 1),)  # reservations hold the bound


def test_reservations_stay_on_types_that_hold_the_bound():
    inv = Inventory(nodes=(Node("small", "A10", 8), Node("big", "A100-80GB", 8)))
    running = [make_running("r").gpus(8).on("big").started(0).ends(NOW + 7200),
               make_running("s").gpus(8).on("small").started(0).ends(NOW + 3600)]
    # nothing free at all: the below-bound type is not a reservation target
    plan, _ = plan_of(make_job("j").memory(60_000, 15_000).predict(600), running=running, inv=inv)
    d = by_id(plan)["j"]
    assert d.action == "reserve" and d.reservation.placement.gpus_by_node == (("big", 1),)
