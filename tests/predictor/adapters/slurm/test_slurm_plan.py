"""Planning against a given Slurm state (no cluster needed): which commands a decision turns into."""

import dataclasses

import pytest

from predictor.adapters.base import SchedulerRejected
from predictor.adapters.slurm.adapter import SlurmAdapter, SlurmOptions, SlurmState
from predictor.adapters.slurm.state import SlurmJob, SlurmReservation, slurm_time
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Reservation, Victim

NOW = 1_800_000_000.0


def _job(job_id="7", state="PENDING", **kw) -> SlurmJob:
    base = dict(job_id=job_id, state=state, priority=100, nice=0, qos="normal", partition="gpu", account="nlp",
                user="ana", time_limit_min=60, reservation="", admin_comment="", restarts=0, required_nodes="")
    base.update(kw)
    return SlurmJob(**base)


def _decision(**kw) -> Decision:
    base = dict(job_id="7", priority=Priority(100), factors=(), action="wait", tier="research")
    base.update(kw)
    return Decision(**base)


def _plan(decision, *jobs, reservations=(), options=None):
    state = SlurmState(jobs={j.job_id: j for j in jobs} or {"7": _job()},
                       reservations={r.name: r for r in reservations})
    adapter = SlurmAdapter(options=options or SlurmOptions(), clock=lambda: NOW)
    return adapter.plan(decision, now=NOW, state=state)


def _calls(ops):
    return [" ".join(op.command) for op in ops]


@pytest.mark.parametrize(
    ("decision", "job", "calls"),
    [
        (_decision(), _job(), []),
        (_decision(priority=Priority(5000)), _job(), ["scontrol update jobid=7 priority=5000"]),
        (_decision(priority=Priority(0)), _job(priority=1), []),  # 0 would hold the job: clamped to 1
        (_decision(priority=Priority(5000)), _job(state="RUNNING"), []),  # running jobs are left alone
        (_decision(time_limit_s=3601.0), _job(), ["scontrol update jobid=7 timelimit=61"]),
        (_decision(time_limit_s=3600.0), _job(), []),
        (_decision(queue="gpu-long"), _job(), []),  # moving partitions is opt-in
        (_decision(action="start", placement=Placement("A100-80GB", (("gpu02", 4), ("gpu01", 4)), "cross_node_same_rack")),
         _job(), ["scontrol update jobid=7 reqnodelist=gpu01,gpu02"]),
        (_decision(action="start", placement=Placement("A100-80GB", (("gpu02", 4), ("gpu01", 4)), "cross_node_same_rack")),
         _job(required_nodes="gpu[01-02]"), []),
    ],
    ids=["same", "priority", "never-zero", "running", "time-limit-up", "time-limit-same", "partition", "nodes",
         "nodes-same"],
)
def test_job_updates(decision, job, calls):
    assert _calls(_plan(decision, job)) == calls


@pytest.mark.parametrize(("priority", "nice", "calls"), [
    (700_000_000, 0, ["scontrol update jobid=7 nice=-70000"]),
    (700_000_000, -70_000, []),
    (5, 10, ["scontrol update jobid=7 nice=0"]),
])
def test_nice_mode_adds_to_the_multifactor_priority(priority, nice, calls):
    options = SlurmOptions(priority_mode="nice")
    assert _calls(_plan(_decision(priority=Priority(priority)), _job(nice=nice), options=options)) == calls


def test_partition_moves_when_enabled():
    options = SlurmOptions(set_partition=True)
    assert _calls(_plan(_decision(queue="gpu-long"), _job(), options=options)) == ["scontrol update jobid=7 partition=gpu-long"]


def test_tier_to_qos_only_where_mapped():
    options = SlurmOptions(tier_qos={"production": "prod"})
    assert _calls(_plan(_decision(tier="production"), _job(), options=options)) == ["scontrol update jobid=7 qos=prod"]
    assert _calls(_plan(_decision(tier="research"), _job(), options=options)) == []


def test_unknown_job_is_rejected():
    with pytest.raises(SchedulerRejected, match="job 99 is not in squeue"):
        _plan(_decision(job_id="99"), _job())


def _reservation(start, end, nodes=(("gpu01", 8),)):
    return Reservation("7", start, end, Placement("A100-80GB", nodes, "nvlink"), end)


def test_reservation_created_then_attached():
    d = _decision(action="reserve", reservation=_reservation(NOW + 600, NOW + 4200))
    assert _calls(_plan(d)) == [
        f"scontrol create reservation reservationname=pred-7 starttime={slurm_time(NOW + 600)} "
        f"endtime={slurm_time(NOW + 4200)} nodes=gpu01 users=ana flags=ignore_jobs,overlap",
        "scontrol update jobid=7 reservationname=pred-7",
    ]


def test_reservation_in_place_is_left_alone_or_moved():
    existing = SlurmReservation("pred-7", NOW + 600, NOW + 4200, "gpu01", "ana", "", "IGNORE_JOBS")
    d = _decision(action="reserve", reservation=_reservation(NOW + 630, NOW + 4200))
    assert _calls(_plan(d, _job(reservation="pred-7"), reservations=[existing])) == []  # within tolerance
    moved = dataclasses.replace(d, reservation=_reservation(NOW + 1800, NOW + 4200, (("gpu01", 8), ("gpu02", 8))))
    assert _calls(_plan(moved, _job(reservation="pred-7"), reservations=[existing])) == [
        f"scontrol update reservationname=pred-7 starttime={slurm_time(NOW + 1800)} nodes=gpu01,gpu02"]


def test_reservation_in_the_past_starts_now():
    d = _decision(action="reserve", reservation=_reservation(NOW - 600, NOW + 600))
    assert f"starttime={slurm_time(NOW + 1)}" in _calls(_plan(d))[0]


def _eviction(grace=120.0, requeue=True):
    return EvictionPlan("7", (Victim("3", "vision", 10, (("gpu01", 8),), 300.0, 0.7),), grace_s=grace, requeue=requeue)


def test_eviction_marks_signals_and_defers_the_requeue():
    d = _decision(action="preempt", eviction=_eviction())
    ops = _plan(d, _job(), _job("3", "RUNNING", admin_comment="owner note"))
    assert [op.kind for op in ops] == ["mark_eviction", "signal", "requeue"]
    assert ops[0].command[-1] == f"admincomment=owner note predictor-evict:for=7:at={int(NOW)}:restarts=0"
    assert ops[1].command == ("scancel", "--signal=SIGTERM", "--full", "3")
    assert ops[2].command == ("scontrol", "requeue", "3") and ops[2].not_before_ts == NOW + 120
    assert [op.due(NOW) for op in ops] == [True, True, False]


@pytest.mark.parametrize(
    ("victim", "kinds"),
    [
        (_job("3", "RUNNING", admin_comment=f"predictor-evict:for=7:at={int(NOW) - 60}:restarts=0"), ["requeue"]),
        (_job("3", "COMPLETED", admin_comment=f"predictor-evict:for=7:at={int(NOW) - 60}:restarts=0"), ["requeue"]),
        (_job("3", "PENDING", restarts=1, admin_comment=f"predictor-evict:for=7:at={int(NOW) - 600}:restarts=0"), []),
        (_job("3", "PENDING"), []),
    ],
    ids=["signalled-in-grace", "exited-on-signal", "already-requeued", "not-running"],
)
def test_eviction_progress_is_read_from_the_marker(victim, kinds):
    ops = _plan(_decision(action="preempt", eviction=_eviction()), _job(), victim)
    assert [op.kind for op in ops] == kinds
    if kinds:
        assert ops[0].not_before_ts == NOW - 60 + 120


def test_eviction_without_requeue_cancels():
    ops = _plan(_decision(action="preempt", eviction=_eviction(requeue=False)), _job(), _job("3", "RUNNING"))
    assert ops[-1].command == ("scancel", "3")


def test_victim_already_gone_needs_nothing():
    assert _plan(_decision(action="preempt", eviction=_eviction()), _job()) == []


@pytest.mark.parametrize(("constraint", "features", "partition", "calls"), [
    ("label=sensitive;region=eu-west", None, "gpu", ["scontrol update jobid=7 features=eu-west&sensitive"]),
    ("label=ib|roce;region=eu-west", "eu-west", "gpu", ["scontrol update jobid=7 features=eu-west&[ib|roce]"]),
    ("label=sensitive", "sensitive&a100", "gpu", []),  # the job's own --constraint already says it
    ("label=sensitive", "a100", "gpu", ["scontrol update jobid=7 features=a100&sensitive"]),
    ("partition=secure|gpu", None, "gpu", []),
    ("partition=secure", None, "gpu", ["scontrol update jobid=7 partition=secure"]),
    ("example.com/tier=gold", None, "gpu", []),  # a Kubernetes label: no Slurm form
], ids=["and", "or", "kept", "added", "partition-ok", "partition-moved", "k8s-only"])
def test_a_constraint_becomes_job_features_and_partitions(constraint, features, partition, calls):
    """Residency (docs/residency.md): rule *constraint to Slurm features*."""
    job = _job(partition=partition, raw={"features": features} if features else {})
    assert _calls(_plan(_decision(constraint=constraint), job)) == calls
    assert _calls(_plan(_decision(constraint=constraint), job, options=SlurmOptions(set_constraints=False))) == []
