"""Table tests per priority factor, on snapshots built with the fluent builders."""

import numpy as np
import pytest

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.config import PolicyConfig
from predictor.policy.factors import FACTORS, PriorityFactor, sla_at_risk
from predictor.policy.presets import policy_from_mapping
from predictor.policy.scheduler import open_cycle
from tests.builders import SnapshotBuilder, make_job, make_running

INV = homogeneous_inventory(32, nodes_per_rack=2)  # 4 nodes x 8 GPUs, 2 racks
POLICY = PolicyConfig()
H = 3600.0


def values(name: str, *jobs, now: float = 0.0, policy: PolicyConfig = POLICY, running=(), usage=None):
    b = SnapshotBuilder(INV).pending(*jobs).running(*running)
    if usage:
        b.usage(usage)
    ctx = open_cycle(b.build(now), policy)
    factor = FACTORS[name](policy)
    v = factor.values(ctx)
    assert v.shape == (len(jobs),) and ((v >= 0) & (v <= 1)).all()
    return v, ctx, factor


def test_every_factor_implements_the_protocol():
    for cls in FACTORS.values():
        assert isinstance(cls(POLICY), PriorityFactor)


@pytest.mark.parametrize(
    "tier, expected",
    [("production", 1.0), ("debug", 0.8), ("sla", 0.6), ("research", 0.3), ("best_effort", 0.0), (None, 0.3),
     ("LS", 1.0), ("weird", 0.3)],
)
def test_tier(tier, expected):
    policy = policy_from_mapping({"tier_aliases": {"LS": "production"}})
    job = make_job("a") if tier is None else make_job("a").tier(tier)
    v, ctx, f = values("tier", job, policy=policy)
    assert v[0] == expected
    assert f.explain(ctx, 0).startswith("tier ")


@pytest.mark.parametrize("waited, expected", [(0, 0.0), (12 * H, 0.5), (24 * H, 1.0), (30 * 24 * H, 1.0),
                                              (-50, 0.0)])
def test_age(waited, expected):
    v, ctx, f = values("age", make_job("a").submitted(100 * H - waited), now=100 * H)
    assert v[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    "p50, gpus, expected",
    [(60, 1, 1.0), (30, 1, 1.0), (1e7, 1, 0.0), (1.25e6, 8, 0.0), (np.sqrt(60 * 1e7), 1, 0.5), (None, 1, 0.5)],
    ids=["floor", "below floor", "ceiling", "gpu-time counts GPUs", "log midpoint", "no prediction"],
)
def test_shortness(p50, gpus, expected):
    job = make_job("a").gpus(gpus)
    if p50 is not None:
        job.predict(p50)
    v, ctx, f = values("shortness", job)
    assert v[0] == pytest.approx(expected, abs=1e-9)


def test_shortness_counts_gpu_shares():
    v, _, _ = values("shortness", make_job("a").share(500).predict(3600), make_job("b").predict(1800))
    assert v[0] == pytest.approx(v[1])


@pytest.mark.parametrize(
    "usage, expected",
    [({}, [1.0, 1.0, 1.0]), ({"x": 10.0, "y": 10.0}, [0.5, 0.5, 1.0]), ({"x": 30.0, "y": 10.0}, [2 ** -1.5, 2 ** -0.5, 1.0])],
    ids=["no usage", "equal use at equal share", "x uses three quarters"],
)
def test_fairshare_classic_formula(usage, expected):
    policy = policy_from_mapping({"teams": {"x": {"share": 1}, "y": {"share": 1}}})
    jobs = [make_job("a").team("x"), make_job("b").team("y"), make_job("c")]
    v, ctx, f = values("fairshare", *jobs, policy=policy, usage=usage)
    assert v == pytest.approx(expected)
    assert "share" in f.explain(ctx, 0) and f.explain(ctx, 2).startswith("no team")


def test_fairshare_counts_configured_teams_without_jobs():
    policy = policy_from_mapping({"teams": {"x": {"share": 1}, "absent": {"share": 3}}})
    v, ctx, _ = values("fairshare", make_job("a").team("x"), policy=policy, usage={"x": 5.0})
    assert v[0] == pytest.approx(2 ** -4)  # x has all the usage but a quarter of the shares


@pytest.mark.parametrize(
    "deadline_in, p90, expected, at_risk",
    [
        (None, H, 0.0, False),
        (20 * H, H, 0.0, False),  # slack 19 h, far above the 8 h horizon
        (5 * H, H, 0.5, False),  # slack 4 h, half the horizon
        (H, H, 1.0, False),  # no slack left
        (0.5 * H, H, 1.0, True),  # cannot make it: flagged, urgency stays 1
    ],
    ids=["no deadline", "lots of slack", "half the horizon", "no slack", "at risk"],
)
def test_sla_urgency(deadline_in, p90, expected, at_risk):
    job = make_job("a").tier("sla").predict(p90)  # tier sla -> class standard, 8 h horizon
    if deadline_in is not None:
        job.deadline(1000 + deadline_in)
    v, ctx, f = values("sla", job, now=1000)
    assert v[0] == pytest.approx(expected)
    assert bool(sla_at_risk(ctx)[0]) is at_risk
    if at_risk:
        assert "cannot meet its deadline" in f.explain(ctx, 0)


def test_sla_demote_at_risk_and_implied_deadline_from_class():
    policy = policy_from_mapping({"factors": {"sla": {"demote_at_risk": True}}})
    v, _, _ = values("sla", make_job("a").tier("sla").predict(H).deadline(1000 + 0.5 * H), now=1000, policy=policy)
    assert v[0] == 0.0
    # debug tier: interactive class, turnaround 1 h, horizon 1 h: submitted 40 min ago, 10 min run
    v, ctx, _ = values("sla", make_job("b").tier("debug").predict(600).submitted(0), now=2400)
    assert ctx.deadline[0] == 3600 and v[0] == pytest.approx(1 - (3600 - 2400 - 600) / 3600)


def test_sla_counts_expected_wait_for_gpus():
    running = [make_running(f"r{i}").gpus(8).on(f"node-000{i}").started(0).ends(4 * H) for i in range(4)]
    job = make_job("a").tier("sla").predict(H).deadline(9 * H)
    v, ctx, _ = values("sla", job, now=0, running=running)
    assert ctx.expected_start[0] == 4 * H
    assert v[0] == pytest.approx(1 - (9 - 1 - 4) / 8)


def test_topology_factor_uses_best_free_class_and_slowdown():
    slow = {"nvlink": 1.0, "pcie_same_numa": 1.1, "cross_numa": 1.2, "cross_node_same_rack": 1.5, "cross_rack": 2.0}
    # each node keeps 4 free GPUs: an 8-GPU gang only fits across nodes (same rack)
    running = [make_running(f"r{i}").gpus(4).on(f"node-000{i}").started(0).ends(H) for i in range(4)]
    jobs = [make_job("a").gpus(4).slowdown(slow), make_job("b").gpus(8).slowdown(slow),
            make_job("c").gpus(32).slowdown(slow)]
    v, ctx, f = values("topology", *jobs, running=running)
    assert v.tolist() == pytest.approx([1.0, 1 / 1.5, 0.0])
    assert f.explain(ctx, 2) == "no placement free now"


@pytest.mark.parametrize("name", sorted(FACTORS))
def test_phrases_of_many_rows_equal_each_row_alone(name):
    """``explain_rows`` over rows in any order, or a slice of them (as ``DecisionWriter`` passes
    consecutive rows), gives each row's own ``explain``: with and without deadlines, teams, shares."""
    jobs = []
    for k in range(9):
        job = make_job(f"j{k}").predict(600.0 * (k + 1), 2400.0 * (k + 1)).submitted(-H * k)
        job = job.team("a" if k % 3 else "b") if k % 4 else job
        job = job.tier(("production", "research", "sla")[k % 3])
        job = job.share(250) if k % 5 == 0 else job.gpus(1 + k % 4)
        jobs.append(job.deadline(6 * H) if k % 2 else job)
    _, ctx, f = values(name, *jobs, usage={"a": 5 * H, "b": H}, running=[make_running("r").gpus(8).started(-H)])
    alone = [f.explain(ctx, i) for i in range(len(jobs))]
    assert f.explain_rows(ctx, slice(0, len(jobs))) == alone
    shuffled = np.array([4, 0, 8, 2, 7, 1])
    assert f.explain_rows(ctx, shuffled) == [alone[i] for i in shuffled]
    no_deadline = np.array([6, 0, 2])  # the even rows have none: the SLA factor's shortcut
    assert f.explain_rows(ctx, no_deadline) == [alone[i] for i in no_deadline]
    assert all(isinstance(t, str) and t for t in alone)
