"""Checkpoint kinds in preemption cost (rules *work lost*, *preemption cost*, *snapshot grace*)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.capacity.layout import ClusterLayout
from predictor.policy.intake import Vocabulary, checkpoint_columns, running_jobs
from predictor.policy.preemption import (
    checkpoint_restore_s,
    checkpoint_write_s,
    eviction_grace_s,
    work_lost_s,
)
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.policy.scheduler import decide
from predictor.policy.snapshot import RunningJobs
from tests.builders import SnapshotBuilder, make_job, make_running

NOW = 100_000.0
INV = homogeneous_inventory(16, gpus_per_node=8)


@pytest.mark.parametrize("kind, interval, expected", [
    ("application", 1000.0, 700.0),  # ran 1700 s, saves every 1000 s
    ("application", np.nan, 1700.0),  # never saved this run
    ("system", 1000.0, 0.0),  # snapshot at the eviction
    ("none", 1000.0, 1700.0),  # declares it cannot resume
    (None, 1000.0, 700.0),  # unknown kind: the interval rule
])
def test_work_lost_by_kind(kind, interval, expected):
    r = RunningJobs.from_columns(job_id=["r"], gpus=[[0]], start_ts=[NOW - 1700], checkpoint_interval_s=[interval],
                                 checkpoint_kind=[kind], checkpoint_size_gb=[50.0])
    assert work_lost_s(r, NOW, None)[0] == pytest.approx(expected)


def test_write_and_restore_times_follow_size_over_bandwidth():
    r = RunningJobs.from_columns(job_id=["a", "s", "n", "u"], gpus=[[0], [1], [2], [3]], start_ts=[NOW] * 4,
                                 checkpoint_kind=["application", "system", "none", None],
                                 checkpoint_size_gb=[100.0, 100.0, 100.0, 100.0])
    assert checkpoint_write_s(r, 2.0).tolist() == [0.0, 50.0, 0.0, 0.0]
    assert checkpoint_restore_s(r, 2.0).tolist() == [50.0, 50.0, 0.0, 0.0]
    assert eviction_grace_s(r, np.array([0, 1]), 120.0, 0.5) == 200.0
    assert eviction_grace_s(r, np.array([0]), 120.0, 0.5) == 120.0


def test_intake_reads_kinds_and_estimates_a_snapshot_from_memory():
    jobs = pd.DataFrame({"job_id": ["a", "s", "i", "u"], "num_gpus": [8, 8, 8, 8], "start_ts": [NOW - 10] * 4,
                         "checkpoint_kind": ["application", "system", None, None],
                         "checkpoint_interval_s": [np.nan, np.nan, 600.0, np.nan],
                         "checkpoint_size_gb": [30.0, np.nan, np.nan, np.nan], "mem_mib": [np.nan, 65536, np.nan, np.nan],
                         "model_params": [np.nan, np.nan, 7e9, np.nan]})
    lay = ClusterLayout.of(homogeneous_inventory(32, gpus_per_node=8))
    run = running_jobs(jobs, {}, Vocabulary().extended(jobs), lay, NOW).running
    assert run.checkpoint_kind.tolist() == [0, 1, 0, -1]  # an interval says application
    # system: 8 x 80 GiB of GPU memory + 64 GiB host; application: 16 bytes per parameter
    assert run.checkpoint_size_gb[1] == pytest.approx((8 * 81920 + 65536) / 1024)
    assert run.checkpoint_size_gb[2] == pytest.approx(7e9 * 16 / 1e9)
    assert run.checkpoint_size_gb[0] == 30.0 and np.isnan(run.checkpoint_size_gb[3])
    kind, size = checkpoint_columns(jobs, np.full(4, 1024.0))
    assert size[1] == pytest.approx((1024 + 65536) / 1024)


def _policy(bandwidth: float):
    pol = load_policy(preset="ours")
    return policy_from_mapping({**pol.model_dump(), "preemption": {
        **pol.preemption.model_dump(), "trigger_wait_s": 0, "min_runtime_s": 0, "max_loss_ratio": None,
        "checkpoint_bandwidth_gb_s": bandwidth}})


def _queue(snapshot_gb: float):
    """Both kinds in one queue: an application job that last saved 3000 s ago and a system-snapshot
    job, each on its own 8-GPU node; a production job needs one node."""
    return (SnapshotBuilder(INV)
            .running(make_running("app").gpus(8).on("node-0000").started(NOW - 3600).checkpointed(NOW - 3000)
                     .ends(NOW + 50_000).tier("best_effort").checkpoint("application", 10.0),
                     make_running("criu").gpus(8).on("node-0001").started(NOW - 3600).ends(NOW + 50_000)
                     .tier("best_effort").checkpoint("system", snapshot_gb))
            .pending(make_job("p").gpus(8).predict(600).tier("production"))
            .build(NOW))


def test_victim_choice_minimises_lost_work_plus_write_and_restore():
    # a 200 GB snapshot at 1 GB/s costs 400 s (write + restore): cheaper than 3000 s of lost work
    d = {d.job_id: d for d in decide(_queue(200.0), _policy(1.0)).decisions}["p"]
    assert d.action == "preempt" and [v.job_id for v in d.eviction.victims] == ["criu"]
    assert d.eviction.victims[0].work_lost_s == 0.0
    # rule *snapshot grace*: the eviction waits for the 200 s write, the preemptor starts after it
    assert d.eviction.grace_s == pytest.approx(200.0)
    assert d.placement.nodes == ("node-0001",)
    # a 4 TB snapshot costs 8000 s: the application job (3000 s lost + 10 s restore) is the cheaper victim
    d = {d.job_id: d for d in decide(_queue(4000.0), _policy(1.0)).decisions}["p"]
    assert [v.job_id for v in d.eviction.victims] == ["app"]
    assert d.eviction.victims[0].work_lost_s == pytest.approx(3000.0)
    assert d.eviction.grace_s == pytest.approx(_policy(1.0).preemption.grace_s)


def test_snapshot_grace_is_kept_in_the_plan():
    plan = decide(_queue(600.0), _policy(1.0))  # 600 s write + 600 s restore < 3000 s lost
    d = {d.job_id: d for d in plan.decisions}["p"]
    assert d.eviction.grace_s == pytest.approx(600.0)
    start = [a for a in plan.assignments if a.job_id == "p"][0].start_ts
    assert start == pytest.approx(NOW + 600.0)
