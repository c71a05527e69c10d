"""Residency (docs/residency.md): constrained jobs start, backfill, reserve and preempt only on the
nodes their constraint allows; a job that can run nowhere is rejected with the constraint named."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.errors import InputError
from predictor.capacity.eligibility import NodeEligibility, node_mask, why_nowhere
from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.layout import ClusterLayout
from predictor.capacity.placement import find_gang
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.policy.scheduler import decide
from tests.builders import SnapshotBuilder, make_job, make_running

NOW = 100_000.0


def _node(name: str, region: str, *, features=(), labels=(), pool=None, rack="r0") -> Node:
    return Node(name, "A100-80GB", 4, nvlink_islands=((0, 1, 2, 3),), numa_of_gpu=(0, 0, 1, 1), rack=rack,
                region=region, site=f"{region}-1", pool=pool, features=tuple(features), labels=tuple(labels))


INV = Inventory(nodes=(
    _node("eu0", "eu-west", features=("sensitive",), labels=(("data_class", "pii"),), pool="secure"),
    _node("eu1", "eu-west", rack="r0"),
    _node("us0", "us-east", rack="r1"),
    _node("us1", "us-east", rack="r1", labels=(("example.com/tier", "gold"),)),
))
LAY = ClusterLayout.of(INV)
REGION = {n.name: n.region for n in INV.nodes}


@cache
def policy(preset: str = "ours", **residency) -> object:
    base = load_policy(preset=preset)
    data = base.model_dump()
    data["residency"] = {**data["residency"], **{k: dict(v) if isinstance(v, tuple) else v
                                                  for k, v in residency.items()}}
    return policy_from_mapping(data)


def nodes_of(d) -> set[str]:
    p = d.placement if d.placement is not None else d.reservation.placement
    return set(p.nodes)


# ---------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("text, expected", [
    ("region=eu-west", {"eu0", "eu1"}),
    ("region=eu-west|us-east", {"eu0", "eu1", "us0", "us1"}),
    ("label=sensitive", {"eu0"}),
    ("pool=secure;region=eu-west", {"eu0"}),
    ("example.com/tier=gold", {"us1"}),
    ("data_class=pii", {"eu0"}),
    ("site=us-east-1", {"us0", "us1"}),
    ("region=eu-west;region=us-east", set()),  # both must hold: nowhere
    ("region=ap-south", set()),
], ids=lambda v: v if isinstance(v, str) else None)
def test_node_mask_matches_node_attributes(text, expected):
    mask = node_mask(LAY, text)
    assert {LAY.node_names[i] for i in np.flatnonzero(mask)} == expected


def test_why_nowhere_names_the_term_no_node_satisfies():
    text = why_nowhere(LAY, "label=sensitive;region=ap-south", 2)
    assert "region=ap-south" in text and "eu-west" in text and "us-east" in text
    text = why_nowhere(LAY, "label=sensitive", 8)
    assert "1 node(s)" in text and "4 x A100-80GB" in text and "needs 8" in text


def test_eligibility_counts_gpus_per_type():
    e = NodeEligibility.of(LAY, np.array([None, "label=sensitive", "region=eu-west"], dtype=object))
    assert e.codes.tolist() == [-1, 0, 1]
    assert e.type_allows(np.array([8, 4, 8])).ravel().tolist() == [True, True, True]
    assert e.type_allows(np.array([1, 5, 9])).ravel().tolist() == [True, False, False]
    assert NodeEligibility.of(LAY, np.array([None, None], dtype=object)) is None


# ---------------------------------------------------------------------------------------- decide
def test_a_constrained_job_starts_only_where_it_may_even_when_other_nodes_are_free():
    snap = (SnapshotBuilder(INV)
            .running(make_running("r").gpus(4).on("eu0").started(NOW - 100).ends(NOW + 3600))
            .pending(make_job("a").gpus(4).predict(600).constraint("region=eu-west").submitted(1),
                     make_job("b").gpus(4).predict(600).constraint("label=sensitive").submitted(2))
            .build(NOW))
    plan = decide(snap, policy())
    by_id = {d.job_id: d for d in plan.queue()}
    assert by_id["a"].action == "start" and nodes_of(by_id["a"]) == {"eu1"}
    assert by_id["a"].constraint == "region=eu-west"
    # b may only use eu0, held by r until its p90 end: it reserves eu0 although us0/us1 are idle
    assert by_id["b"].action == "reserve" and nodes_of(by_id["b"]) == {"eu0"}
    assert by_id["b"].reservation.start_ts >= NOW + 3600


def test_a_job_that_can_run_nowhere_is_rejected_with_the_constraint_named():
    snap = (SnapshotBuilder(INV)
            .pending(make_job("x").gpus(2).predict(60).constraint("region=ap-south"),
                     make_job("y").gpus(8).predict(60).constraint("label=sensitive"),
                     make_job("z").gpus(8).predict(60).constraint("region=eu-west"))
            .build(NOW))
    plan = decide(snap, policy())
    by_id = {d.job_id: d for d in plan.queue()}
    assert by_id["x"].action == "reject" and "region=ap-south" in by_id["x"].reason
    assert by_id["y"].action == "reject" and "label=sensitive" in by_id["y"].reason and "needs 8" in by_id["y"].reason
    assert by_id["z"].action == "start" and {REGION[n] for n in nodes_of(by_id["z"])} == {"eu-west"}


def test_team_and_data_class_rules_of_the_policy_apply():
    pol = policy(teams=(("genomics", "region=us-east"),), data_classes=(("sensitive", "label=sensitive"),))
    snap = (SnapshotBuilder(INV)
            .pending(make_job("g").gpus(4).predict(60).team("genomics").submitted(1),
                     make_job("s").gpus(2).predict(60).constraint("data_class=sensitive").submitted(2),
                     make_job("u").gpus(2).predict(60).constraint("data_class=pii").submitted(3),
                     make_job("q").gpus(2).predict(60).constraint("data_class=unlisted").submitted(4))
            .build(NOW))
    by_id = {d.job_id: d for d in decide(snap, pol).queue()}
    assert {REGION[n] for n in nodes_of(by_id["g"])} == {"us-east"} and by_id["g"].constraint == "region=us-east"
    assert nodes_of(by_id["s"]) == {"eu0"} and by_id["s"].constraint == "label=sensitive"
    assert nodes_of(by_id["u"]) == {"eu0"}  # not listed: the nodes labelled data_class=pii (fails closed)
    assert by_id["q"].action == "reject" and "data_class=unlisted" in by_id["q"].reason
    ignoring = policy(data_classes=(("sensitive", "label=sensitive"),), unknown_data_class="ignore")
    q = {d.job_id: d for d in decide(snap, ignoring).queue()}["q"]
    assert q.action == "start" and q.constraint is None


def test_preemption_frees_only_nodes_the_preemptor_may_use():
    pol = load_policy(preset="ours")
    pol = policy_from_mapping({**pol.model_dump(), "preemption": {**pol.preemption.model_dump(),
                                                                  "trigger_wait_s": 0, "min_runtime_s": 0,
                                                                  "max_loss_ratio": None}})
    running = [make_running(f"r-{n}").gpus(4).on(n).started(NOW - 500).ends(NOW + 50_000).tier("best_effort")
               .checkpoint_every(400)
               for n in ("eu0", "eu1", "us0", "us1")]
    # the cheapest victims are on us0/us1 (they checkpointed just now), but the job may only run in eu-west
    running[2].checkpoint_every(250)
    running[3].checkpoint_every(250)
    snap = (SnapshotBuilder(INV).running(*running)
            .pending(make_job("p").gpus(4).predict(600).tier("production").constraint("region=eu-west"))
            .build(NOW))
    d = {d.job_id: d for d in decide(snap, pol).decisions}["p"]
    assert d.action == "preempt"
    assert {REGION[n] for n in nodes_of(d)} == {"eu-west"}
    assert {v.job_id for v in d.eviction.victims} <= {"r-eu0", "r-eu1"}


def test_policy_rejects_a_malformed_residency_rule_naming_the_field():
    with pytest.raises(InputError, match=r"^policy: residency\.data_classes: sensitive: constraint term 'eu' is not key=value"):
        policy_from_mapping({"residency": {"data_classes": {"sensitive": "eu"}}})
    with pytest.raises(InputError, match="residency.unknown_data_class"):
        policy_from_mapping({"residency": {"unknown_data_class": "maybe"}})


# ---------------------------------------------------------------------------------------- property
CONSTRAINTS = [None, "region=eu-west", "region=us-east", "label=sensitive", "pool=secure;region=eu-west",
               "example.com/tier=gold", "region=eu-west|us-east", "region=ap-south", "data_class=pii"]
TIERS = ["production", "research", "best_effort"]


@st.composite
def queue(draw):
    free = np.full(LAY.n_gpus, 1000)
    running = []
    for k in range(draw(st.integers(0, 5))):
        gpus = draw(st.integers(1, 4))
        choice = find_gang(LAY, free >= 1000, gpus)
        if choice is None:
            continue
        free[choice.gpus] -= 1000
        spec = (make_running(f"r{k}").gpus(gpus).started(NOW - draw(st.floats(0, 5000)))
                .ends(NOW + draw(st.floats(1, 8000))).tier(draw(st.sampled_from(TIERS)))
                .priority(draw(st.integers(1, 10_000))))
        for node, local in LAY.gpu_indices_by_node(choice.gpus):
            spec.on(node, local)
        kind = draw(st.sampled_from([None, "application", "system", "none"]))
        if kind is not None:
            spec.checkpoint(kind, draw(st.floats(1, 500)))
        running.append(spec)
    pending = []
    for k in range(draw(st.integers(1, 8))):
        p50 = draw(st.floats(10, 5000))
        pending.append(make_job(f"p{k}").gpus(draw(st.integers(1, 8))).predict(p50, p50 * 1.5)
                       .submitted(draw(st.floats(0, NOW))).tier(draw(st.sampled_from(TIERS)))
                       .constraint(draw(st.sampled_from(CONSTRAINTS))))
    return running, pending


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=queue(), preset=st.sampled_from(["ours", "fifo", "las", "kueue"]), trigger=st.sampled_from([0.0, 900.0]),
       depth=st.sampled_from([0, 1, 3]))
def test_no_decision_ever_puts_a_job_where_its_constraint_forbids(q, preset, trigger, depth):
    running, pending = q
    base = load_policy(preset=preset)
    pol = policy_from_mapping({**base.model_dump(),
                               "preemption": {**base.preemption.model_dump(), "trigger_wait_s": trigger,
                                              "min_runtime_s": 0},
                               "reservation": {**base.reservation.model_dump(), "depth": depth}})
    snap = SnapshotBuilder(INV).running(*running).pending(*pending).build(NOW)
    plan = decide(snap, pol, explain=True)
    want = {s.job_id: s.constraint_text for s in pending}
    for d in plan.queue():
        text = want[d.job_id]
        assert d.constraint == text
        if d.action in ("start", "preempt", "reserve"):
            allowed = {LAY.node_names[i] for i in np.flatnonzero(node_mask(LAY, text))} if text else set(LAY.node_names)
            assert nodes_of(d) <= allowed, (d.job_id, text, d.reason)
        if d.action == "reject" and text:
            assert f"constraint {text}" in d.reason
    for a in plan.assignments:  # starts and preemptors' GPUs, as the replay acts on them
        text = want[a.job_id]
        if text:
            assert node_mask(LAY, text)[LAY.gpu_node[a.gpus]].all()
    # rule *snapshot grace*: a victim holds its GPUs until its eviction's grace ends, the preemptor
    # starts then; no GPU is ever over-booked (jobs ending by their p90)
    grace_of = {v.job_id: e.grace_s for e in plan.evictions for v in e.victims}
    r = snap.running
    held = [(g, NOW, NOW + grace_of[r.job_id[k]] if r.job_id[k] in grace_of else r.predicted_end_ts[k],
             r.gpu_milli[k]) for k in range(len(r)) for g in r.gpus_of(k)]
    held += [(g, a.start_ts, a.predicted_end_ts, a.gpu_milli) for a in plan.assignments for g in a.gpus]
    for e in plan.evictions:
        d = next(d for d in plan.decisions if d.job_id == e.for_job_id)
        assert e.grace_s >= pol.preemption.grace_s
        assert [a.start_ts for a in plan.assignments if a.job_id == d.job_id] == [pytest.approx(NOW + e.grace_s)]
    for g in range(LAY.n_gpus):
        mine = [(s0, e0, m) for gg, s0, e0, m in held if gg == g and e0 > s0]
        for t in {s0 for s0, _, _ in mine}:
            assert sum(m for s0, e0, m in mine if s0 <= t < e0) <= 1000, (g, t, mine)


def test_queue_as_partition():
    inv = Inventory(nodes=(Node("a", "A100-80GB", 4, partitions=("gpu", "long")), Node("b", "A100-80GB", 4,
                                                                                       partitions=("gpu",))))
    snap = (SnapshotBuilder(inv)
            .pending(make_job("l").gpus(4).predict(60).queue("long"), make_job("x").gpus(4).predict(60).queue("debug"))
            .build(NOW))
    by_id = {d.job_id: d for d in decide(snap, policy(queue_is_partition=True)).queue()}
    assert nodes_of(by_id["l"]) == {"a"} and by_id["l"].constraint == "partition=long"
    assert by_id["x"].action == "reject" and "partition=debug" in by_id["x"].reason
    assert {d.action for d in decide(snap, policy()).queue()} == {"start"}  # off by default: queues are not nodes
