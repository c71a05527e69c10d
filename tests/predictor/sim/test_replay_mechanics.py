"""The replay's physics against hand-computed timelines (decisions scripted, see sim_builders)."""

import math

import numpy as np
import pytest

from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.sim.cluster import PlanError
from predictor.sim.metrics import policy_metrics
from predictor.sim.predictions import NoPredictions
from predictor.sim.progress import JobStatus
from predictor.sim.replay import SimConfig, replay
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows, ScriptedRules, decision, evict, on, reservation

NODE = "node-0000"


def timeline(script: dict[float, list]):
    """Decisions by instant: {time since origin: [Decision, ...]}; nothing at other instants."""
    return lambda view: script.get(view.now, [])


def run(rows: JobRows, script, inventory=None, **config):
    table, _ = load_workload(rows.frame())
    inv = inventory or homogeneous_inventory(8)
    rules = ScriptedRules(timeline(script) if isinstance(script, dict) else script)
    rec = replay(table, inv, rules, NoPredictions().predict(table, inv), SimConfig(**config))
    return rec, rules


def by_id(rec, values):
    return dict(zip(rec.jobs.job_ids, values, strict=True))


def test_back_to_back_gangs():
    rows = JobRows().add("a", gpus=8, run=100).add("b", gpus=8, run=50)
    rec, rules = run(rows, {0.0: [decision("a", "start", on(NODE, 8))], 100.0: [decision("b", "start", on(NODE, 8))]})
    metrics, extra = policy_metrics(rec)
    assert by_id(rec, rec.end) == {"a": 100.0, "b": 150.0}
    assert metrics["avg_jct_s"] == 125.0 and metrics["avg_wait_s"] == 50.0 and metrics["max_wait_s"] == 100.0
    assert metrics["makespan_s"] == 150.0 and metrics["utilization"] == pytest.approx(1.0)
    assert rules.calls == [0.0, 100.0]  # one decide per instant where something changed
    assert extra["jobs_finished"] == 2


def test_preemption_loses_work_since_checkpoint_and_honours_the_grace_period():
    rows = JobRows().add("a", gpus=8, run=100, checkpoint=30).add("b", gpus=8, run=20, submit=40)
    script = {
        0.0: [decision("a", "start", on(NODE, 8))],
        40.0: [decision("b", "preempt", on(NODE, 8), eviction=evict("b", "a", grace=5.0))],
        65.0: [decision("a", "start", on(NODE, 8))],
    }
    rec, _ = run(rows, script)
    metrics, extra = policy_metrics(rec)
    # a: ran 0-40, checkpoint at 30 keeps 30 s, loses 10; b waits out the 5 s grace, runs 45-65;
    # a restarts at 65 with 70 s of work left and ends at 135.
    assert by_id(rec, rec.end) == {"a": 135.0, "b": 65.0}
    assert by_id(rec, rec.wait_s) == {"a": 25.0, "b": 5.0}
    assert metrics["preemptions"] == 1
    assert metrics["gpu_hours_lost"] == pytest.approx(10 * 8 / 3600)
    assert extra["gpu_hours_lost_preemption"] == pytest.approx(metrics["gpu_hours_lost"])
    assert metrics["utilization"] == pytest.approx((40 + 20 + 70) * 8 / (8 * 135))


def test_out_of_memory_run_crashes_and_is_resubmitted():
    inv = Inventory(nodes=(Node("small", "V100", 1), Node("big", "A100-80GB", 1)))
    rows = JobRows().add("j", gpus=1, run=100, peak_mib=30_000)
    script = {0.0: [decision("j", "start", on("small", 1))], 60.0: [decision("j", "start", on("big", 1))]}
    rec, _ = run(rows, script, inventory=inv, oom_after_s=60.0)
    metrics, extra = policy_metrics(rec)
    assert rec.end[0] == 160.0 and rec.oom_failures[0] == 1
    assert extra["oom_failures"] == 1 and extra["gpu_hours_lost_oom"] == pytest.approx(60 / 3600)


def test_a_job_bigger_than_the_cluster_is_rejected_and_reported():
    rows = JobRows().add("huge", gpus=16).add("ok", gpus=8, run=10)
    rec, rules = run(rows, {0.0: [decision("ok", "start", on(NODE, 8))]})
    assert by_id(rec, rec.status) == {"huge": JobStatus.REJECTED, "ok": JobStatus.DONE}
    assert "needs 16 GPUs, the cluster has 8" in rec.rejected_reasons.values()


def test_a_job_the_rules_never_place_ends_the_replay_instead_of_hanging():
    rows = JobRows().add("stuck", gpus=8).add("ok", gpus=1, run=10, submit=5)
    rec, _ = run(rows, {5.0: [decision("ok", "start", on(NODE, 1))]})
    metrics, extra = policy_metrics(rec)
    assert rec.status[0] == JobStatus.PENDING and extra["jobs_unfinished"] == 1
    assert rec.notes and "never placed" in rec.notes[0]
    assert metrics["max_wait_s"] == 15.0  # waited until the replay ended


def test_the_rules_layer_is_asked_again_when_its_plan_says_so():
    rows = JobRows().add("a", gpus=4, run=100).add("b", gpus=8, run=10, submit=1)
    origin = 1_700_000_000.0
    script = {
        0.0: [decision("a", "start", on(NODE, 4))],
        1.0: [decision("b", "reserve", reservation=reservation("b", origin + 50, origin + 200, on(NODE, 8)))],
        100.0: [decision("b", "start", on(NODE, 8))],
    }
    revisit = {1.0: origin + 50}  # the plan at t=1 says: look again at t=50
    rules = ScriptedRules(timeline(script), revisit=revisit)
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(8)
    rec = replay(table, inv, rules, NoPredictions().predict(table, inv))
    assert rules.calls == [0.0, 1.0, 50.0, 100.0]
    assert rec.reservations_made == 1 and rec.reservation_starts == 1


def test_fractional_jobs_share_a_gpu_and_count_by_their_share():
    rows = JobRows().add("x", milli=500, run=100).add("y", milli=500, run=100)
    idx = on(NODE, 1, indices=(0,))
    rec, _ = run(rows, {0.0: [decision("x", "start", idx), decision("y", "start", idx)]})
    metrics, _ = policy_metrics(rec)
    assert rec.end.tolist() == [100.0, 100.0]
    assert metrics["utilization"] == pytest.approx(1.0 / 8)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({0.0: [decision("a", "start", on(NODE, 8)), decision("a", "start", on(NODE, 8))]}, "not queued"),
        ({0.0: [decision("a", "start", on(NODE, 8)), decision("b", "start", on(NODE, 8))]}, "0 have it"),
        ({0.0: [decision("zz", "start", on(NODE, 8))]}, "unknown job"),
        ({0.0: [decision("a", "start", on(NODE, 4))]}, "needs 8 GPUs"),
        ({0.0: [decision("a", "preempt", on(NODE, 8), eviction=evict("a", "b"))]}, "not running"),
        ({0.0: [decision("a", "launch", on(NODE, 8))]}, "unknown action"),
    ],
    ids=["twice", "over-allocate", "unknown-job", "wrong-size", "evict-idle", "bad-action"],
)
def test_plans_that_cannot_be_carried_out_stop_the_replay(script, message):
    rows = JobRows().add("a", gpus=8).add("b", gpus=8)
    with pytest.raises(PlanError, match=message):
        run(rows, script)


def test_placement_class_slows_the_job_by_its_true_slowdown():
    rows = JobRows().add("g", gpus=2, run=100, true_duration_s=100.0, true_slowdown_nvlink=1.0,
                         true_slowdown_pcie_same_numa=1.1, true_slowdown_cross_numa=1.5,
                         true_slowdown_cross_node_same_rack=2.0, true_slowdown_cross_rack=2.5)
    rec, _ = run(rows, {0.0: [decision("g", "start", on(NODE, 2, cls="cross_numa"))]})
    assert rec.end[0] == pytest.approx(150.0)
    assert not math.isnan(rec.first_start[0]) and np.all(rec.placement_class == 2)


def test_a_scheduler_cycle_asks_again_while_jobs_queue():
    rows = JobRows().add("a", gpus=8, run=100).add("b", gpus=8, run=10, submit=1)
    script = {0.0: [decision("a", "start", on(NODE, 8))], 100.0: [decision("b", "start", on(NODE, 8))]}
    rules = ScriptedRules(timeline(script))
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(8)
    replay(table, inv, rules, NoPredictions().predict(table, inv), SimConfig(cycle_s=30.0))
    # b queued at 1: asked at 1, then every 30 s of nothing happening, then at a's completion
    assert rules.calls == [0.0, 1.0, 31.0, 61.0, 91.0, 100.0]
    with pytest.raises(ValueError, match="cycle_s"):
        SimConfig(cycle_s=0.0)


def test_preemption_losses_are_counted_per_checkpoint_kind():
    """Both kinds in one queue: the application job loses the work since its last save; the system
    snapshot keeps all of it and loses its write and its restore (3 GB at 1 GB/s each)."""
    rows = (JobRows().add("app", gpus=8, run=100, checkpoint=30, checkpoint_kind="application")
            .add("criu", gpus=8, run=100, checkpoint_kind="system", checkpoint_size_gb=3.0)
            .add("b", gpus=8, run=20, submit=40).add("d", gpus=8, run=20, submit=40))
    script = {
        0.0: [decision("app", "start", on("node-0000", 8)), decision("criu", "start", on("node-0001", 8))],
        40.0: [decision("b", "preempt", on("node-0000", 8), eviction=evict("b", "app")),
               decision("d", "preempt", on("node-0001", 8), eviction=evict("d", "criu"))],
        60.0: [decision("app", "start", on("node-0000", 8)), decision("criu", "start", on("node-0001", 8))],
    }
    rec, _ = run(rows, script, inventory=homogeneous_inventory(16))
    metrics, extra = policy_metrics(rec)
    # app keeps 30 s, 70 s left: ends at 130; criu keeps all 40 s, 60 s left plus a 3 s restore: ends at 123
    assert by_id(rec, rec.end)["app"] == pytest.approx(130.0)
    assert by_id(rec, rec.end)["criu"] == pytest.approx(123.0)
    lost = extra["preemption_lost_gpu_hours_by_checkpoint_kind"]
    assert lost == pytest.approx({"application": 10 * 8 / 3600, "system": 6 * 8 / 3600, "none": 0.0, "unknown": 0.0})
    assert sum(lost.values()) == pytest.approx(extra["gpu_hours_lost_preemption"])
