"""Replays through the real rules layer (``predictor.policy.decide``): hand-computable cases and
conservation properties that must hold whatever the policy decides."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.metrics import policy_metrics
from predictor.sim.predictions import NoPredictions, OraclePredictions
from predictor.sim.progress import JobStatus
from predictor.sim.record import SegmentEnd
from predictor.sim.replay import SimConfig, replay
from predictor.sim.rules import PolicyRules, load_policy
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows

#: report name -> (preset, prediction source)
POLICIES = {
    "fifo": ("fifo", NoPredictions()),
    "sjf-oracle": ("sjf-oracle", OraclePredictions()),
    "qssf-oracle": ("qssf", OraclePredictions()),
    "las": ("las", NoPredictions()),
    "kueue": ("kueue", NoPredictions()),
    "ours-oracle": ("ours", OraclePredictions()),
}


def run(rows: JobRows, policy: str, gpus: int = 8, **config):
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(gpus)
    preset, source = POLICIES[policy]
    preds = source.predict(table, inv)
    return replay(table, inv, PolicyRules(policy, load_policy(preset), table, inv, preds), preds, SimConfig(**config))


def three_jobs() -> JobRows:
    return JobRows().add("a", gpus=8, run=100, submit=0).add("b", gpus=8, run=50, submit=1).add("c", gpus=8, run=10,
                                                                                               submit=2)


@pytest.mark.parametrize(
    ("policy", "ends"),
    [
        ("fifo", {"a": 100.0, "b": 150.0, "c": 160.0}),  # submit order
        ("sjf-oracle", {"a": 100.0, "c": 110.0, "b": 160.0}),  # c (10 s) jumps b (50 s) at t=100
    ],
)
def test_three_jobs_on_eight_gpus(policy, ends):
    rec = run(three_jobs(), policy)
    assert dict(zip(rec.jobs.job_ids, rec.end, strict=True)) == ends
    metrics, _ = policy_metrics(rec)
    submit = {"a": 0.0, "b": 1.0, "c": 2.0}
    assert metrics["avg_jct_s"] == pytest.approx(np.mean([ends[j] - submit[j] for j in ends]))


@pytest.mark.parametrize("policy", ["fifo", "ours-oracle"])
def test_a_job_past_its_time_limit_ends_timeout_at_the_limit(policy):
    """Slurm ends a job at its limit (TIMEOUT), Kueue at maximumExecutionTimeSeconds: so does the replay."""
    rows = (JobRows().add("long", gpus=8, run=500, submit=0, time_limit_s=120)
            .add("next", gpus=8, run=50, submit=1, time_limit_s=3600))
    rec = run(rows, policy)
    ends = dict(zip(rec.jobs.job_ids, rec.end, strict=True))
    status = dict(zip(rec.jobs.job_ids, rec.status, strict=True))
    assert ends == {"long": 120.0, "next": 170.0} and status["long"] == JobStatus.TIMEOUT
    assert status["next"] == JobStatus.DONE
    long_segments = rec.seg_job == 0
    assert rec.seg_kind[long_segments].tolist() == [SegmentEnd.TIMEOUT]
    _, extra = policy_metrics(rec)
    assert extra["jobs_timed_out"] == 1 and extra["jobs_finished"] == 1
    assert extra["gpu_hours_timed_out"] == pytest.approx(8 * 120 / 3600)  # GPU time counted to the limit
    table = rec.jobs_frame().set_index("job_id")
    assert table.loc["long", "state"] == "TIMEOUT" and table.loc["next", "state"] == "COMPLETED"
    assert table.loc["long", "end_ts"] - table.loc["long", "start_ts"] == 120.0
    assert table.loc["long", "time_limit_s"] == 120.0 and table.loc["long", "policy"] == policy


def test_a_job_bigger_than_the_cluster_is_reported_not_waited_for():
    rows = three_jobs().add("huge", gpus=64, submit=5)
    rec = run(rows, "ours-oracle")
    _, extra = policy_metrics(rec)
    assert extra["jobs_rejected"] == 1 and extra["jobs_finished"] == 3
    assert any("64 GPUs" in r for r in rec.rejected_reasons.values())


def _workload(draw_jobs):
    rows = JobRows()
    for i, (gpus, run_s, submit, team, ckpt) in enumerate(draw_jobs):
        rows.add(f"j{i}", gpus=gpus, run=run_s, submit=submit, team=team, checkpoint=ckpt,
                 tier=["research", "production", "best_effort"][i % 3])
    return rows


jobs_strategy = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 4, 8, 16]), st.floats(10, 5000), st.floats(0, 3000),
              st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.floats(50, 2000))),
    min_size=1, max_size=12,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, policy=st.sampled_from(sorted(POLICIES)))
def test_conservation_whatever_the_policy(draw, policy):
    rec = run(_workload(draw), policy, gpus=16, default_checkpoint_s=600.0)
    jobs = rec.jobs
    # every job finishes exactly once (none is bigger than the 16-GPU cluster)
    assert (rec.status == JobStatus.DONE).all()
    done_segments = np.bincount(rec.seg_job[rec.seg_kind == SegmentEnd.COMPLETED], minlength=len(jobs))
    assert (done_segments == 1).all()
    # no GPU over-allocated at any time: sweep the run segments
    t = np.concatenate([rec.seg_start, rec.seg_end])
    d = np.concatenate([jobs.milli_demand[rec.seg_job], -jobs.milli_demand[rec.seg_job]])
    order = np.lexsort((d, t))  # releases before allocations at the same instant
    assert np.cumsum(d[order]).max() <= 16 * 1000
    # work conservation: run time / slowdown of each run, minus what evictions threw away, is the work
    slow = jobs.slowdown[rec.seg_job, rec.seg_class]
    kept = (rec.seg_end - rec.seg_start - rec.seg_lost_s) / slow
    assert np.bincount(rec.seg_job, weights=kept, minlength=len(jobs)) == pytest.approx(jobs.work_s, rel=1e-6)
    # a job never completes faster than its true duration, nor starts before it was submitted
    assert (rec.end - jobs.submit_s >= jobs.work_s - 1e-6).all()
    assert (rec.first_start >= jobs.submit_s).all()
    # the preemption count matches the preempted runs
    assert rec.preemptions.sum() == (rec.seg_kind == SegmentEnd.PREEMPTED).sum()
