"""The replay's incremental scheduler against a full ``decide()`` at every event.

``PolicyRules`` plans with ``IncrementalScheduler`` (light plan, sizing kept per trace row, gang
searches remembered across cycles). Here every cycle of random small replays is also decided from
scratch by ``decide()`` on the same snapshot, and the two must agree on every start, reservation,
preemption and rejection (job, priority, GPUs, class, times, victims) and on the revisit; and a whole
replay carried out from Decisions (the reference path) must give every job the same runs.
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import Inventory, Node, homogeneous_inventory
from predictor.policy import admission
from predictor.policy.config import QueueingConfig
from predictor.policy.incremental import IncrementalScheduler
from predictor.policy.scheduler import decide
from predictor.sim.predictions import NoPredictions, OraclePredictions, PredictionTable
from predictor.sim.replay import Replay, SimConfig
from predictor.sim.rules import PolicyRules, load_policy
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows

SOURCES = {"none": (NoPredictions(), 1.0), "oracle": (OraclePredictions(), 1.0),
           "under": (OraclePredictions(), 0.3), "over": (OraclePredictions(), 2.5)}
PRESETS = ["fifo", "sjf-oracle", "qssf", "las", "kueue", "ours", "greedy-fifo"]


def _policy(preset: str):
    if preset == "greedy-fifo":
        return load_policy("fifo").model_copy(update={"queueing": QueueingConfig(strategy="best_effort",
                                                                                  scope="cluster")})
    return load_policy(preset)


def _scaled(preds: PredictionTable, factor: float) -> PredictionTable:
    return replace(preds, p10_s=preds.p10_s * factor, p50_s=preds.p50_s * factor, p90_s=preds.p90_s * factor)


def _acts_of_decisions(plan, layout) -> list[tuple]:
    """(job, action, priority, GPUs, class, start, end, victims) of a full plan's Decisions."""
    out = []
    starts = {a.job_id: a for a in plan.assignments}
    for d in plan.decisions:
        gpus, cls, start, end = None, None, None, None
        if d.action in ("start", "preempt"):
            a = starts[d.job_id]
            gpus, cls, start, end = tuple(a.gpus.tolist()), d.placement.placement_class, a.start_ts, a.predicted_end_ts
        elif d.action == "reserve":
            p = d.reservation.placement
            gpus = tuple(sorted(layout.gpu_index(node, int(g)) for node, idx in p.gpu_indices for g in idx))
            cls, start, end = p.placement_class, d.reservation.start_ts, d.reservation.predicted_end_ts
        victims = () if d.eviction is None else tuple(v.job_id for v in d.eviction.victims)
        out.append((d.job_id, d.action, int(d.priority), gpus, cls, start, end, victims))
    return out


def _acts_of_light(plan) -> list[tuple]:
    out = []
    for a in plan.acts:
        if a.action in ("start", "preempt", "reserve"):
            gpus, cls, start, end = tuple(a.gpus.tolist()), PLACEMENT_CLASSES[a.placement_class], a.start_ts, a.end_ts
        else:
            gpus = cls = start = end = None
        out.append((a.job_id, a.action, a.priority, gpus, cls, start, end, a.victim_ids))
    return out


class CheckedRules(PolicyRules):
    """Plans incrementally and checks each plan against ``decide()`` from scratch on the same snapshot."""

    cycles = 0

    def plan(self, view):
        out = super().plan(view)
        light = getattr(out, "plan", out)
        full = decide(light.snapshot, self.policy, explain=False)
        assert _acts_of_light(light) == _acts_of_decisions(full, self.layout)
        assert light.revisit_at_ts == full.revisit_at_ts
        # the thin walk skips the GPU shares the full walk would test only to leave waiting
        assert light.stats["considered"] <= full.stats["considered"]
        self.cycles += 1
        return out


class DecisionRules(PolicyRules):
    """The reference path: the replay carries out ``decide()``'s Decisions, nothing kept between cycles."""

    def plan(self, view):
        out = super().plan(view)
        full = decide(getattr(out, "plan", out).snapshot, self.policy, explain=False)
        if out is not getattr(out, "plan", out):
            return type(out)(plan=_FullAsLight(full), revisit_at_ts=out.revisit_at_ts)
        return full


class _FullAsLight:
    """A SchedulePlan seen through ReplayPlan (Decisions, no acts)."""

    def __init__(self, plan) -> None:
        self._plan = plan
        self.decisions = plan.decisions
        self.acts = None


def _replay(rules_cls, rows: JobRows, preset: str, source: str, gpus: int = 16, thin_after: int | None = None,
            inv: Inventory | None = None):
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(gpus) if inv is None else inv
    src, factor = SOURCES[source]
    preds = _scaled(src.predict(table, inv), factor)
    rules = rules_cls(preset, _policy(preset), table, inv, preds)
    if thin_after is not None:  # the thin walk on queues of any length (the replay: over 64 jobs left)
        rules.scheduler = IncrementalScheduler(rules.policy, thin_after=thin_after)
    rec = Replay(table, inv, rules, preds, SimConfig(default_checkpoint_s=600.0)).run()
    order = np.lexsort((rec.seg_start, rec.seg_job))
    segs = list(zip(rec.seg_job[order].tolist(), rec.seg_start[order].tolist(), rec.seg_end[order].tolist(),
                    rec.seg_kind[order].tolist(), rec.seg_class[order].tolist(), strict=True))
    return rec, segs, rules


jobs_strategy = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 4, 8, 16]), st.floats(10, 5000), st.floats(0, 6000),
              st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.floats(50, 2000)),
              st.sampled_from([None, None, None, 500, 250]), st.one_of(st.none(), st.floats(0, 9000))),
    min_size=1, max_size=25,
)


def _workload(draw) -> JobRows:
    rows = JobRows()
    for i, (gpus, run_s, submit, team, ckpt, milli, deadline) in enumerate(draw):
        rows.add(f"j{i}", gpus=gpus if milli is None else 1, run=round(run_s), submit=round(submit), team=team,
                 checkpoint=ckpt, milli=milli, deadline=None if deadline is None else round(submit + deadline),
                 tier=["research", "production", "best_effort"][i % 3])
    return rows


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, preset=st.sampled_from(PRESETS), source=st.sampled_from(sorted(SOURCES)),
       thin_after=st.sampled_from([0, 2, None]), arrays=st.booleans())
def test_every_incremental_plan_is_the_full_decide(draw, preset, source, thin_after, arrays):
    saved = admission._LIST_UP_TO
    if arrays:  # the walk over a long queue (columns read as arrays), on short ones
        admission._LIST_UP_TO = 0
    try:
        _, _, rules = _replay(CheckedRules, _workload(draw), preset, source, thin_after=thin_after)
    finally:
        admission._LIST_UP_TO = saved
    assert rules.cycles >= 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, preset=st.sampled_from(PRESETS), source=st.sampled_from(sorted(SOURCES)))
def test_a_replay_from_acts_runs_every_job_as_one_from_decisions(draw, preset, source):
    rows = _workload(draw)
    light, light_segs, _ = _replay(PolicyRules, rows, preset, source)
    full, full_segs, _ = _replay(DecisionRules, rows, preset, source)
    assert light_segs == full_segs
    assert light.status.tolist() == full.status.tolist()
    assert (light.decide_calls, light.reservations_made, light.reservation_starts) == \
        (full.decide_calls, full.reservations_made, full.reservation_starts)
    assert light.rejected_reasons == full.rejected_reasons


def test_the_light_plan_writes_the_full_plan_on_ask():
    rows = JobRows().add("big", gpus=16, run=1000).add("a", gpus=8, run=50, submit=1).add("b", gpus=4, run=60, submit=1)
    plans = []

    class Keep(PolicyRules):
        def may_evict(self, pending, running):  # plan at t=1 too, where nothing fits (no skip)
            return True

        def plan(self, view):
            out = super().plan(view)
            plans.append(getattr(out, "plan", out))
            return out

    _replay(Keep, rows, "ours", "oracle")
    second = plans[1]  # "big" runs; a and b wait behind it: one reservation
    assert [a.action for a in second.acts] == ["reserve"]
    full = second.full()
    assert [d.action for d in full.decisions] == ["reserve"]
    assert [d.job_id for d in second.queue()] == [d.job_id for d in full.queue()]
    assert second.acts[0].placement == full.decisions[0].reservation.placement


def _two_types() -> Inventory:
    """16 GPUs: one 8-GPU node of A100-80GB, one of H100-80GB."""
    a, h = homogeneous_inventory(8).nodes[0], homogeneous_inventory(8, gpu_type="H100-80GB").nodes[0]
    return Inventory(nodes=(a, replace(h, name="node-h100")))


@pytest.mark.parametrize("two_types", [False, True])
@pytest.mark.parametrize("research_ends_s", [1000, 5000])
def test_the_thin_walk_passes_over_preemptors_whose_wait_would_not_trigger_preemption(monkeypatch, research_ends_s,
                                                                                        two_types):
    # four research jobs hold the 16 GPUs; at 700 s (past their minimum runtime) a debug job and
    # production jobs, which may preempt research, arrive; one of them takes the one reservation.
    # With the research jobs ending at 1000 s the GPUs free up 300 s later, under the 900 s trigger:
    # the thin walk drops the other production jobs before walking them (``_trigger_may_fire``).
    # Ending at 5000 s, the wait triggers preemption: they are kept, and preempt. Every cycle equals
    # a full decide()
    rows = JobRows()
    for k in range(4):
        rows.add(f"r{k}", gpus=4, run=research_ends_s, tier="research")
    rows.add("d0", gpus=8, run=50, submit=700, tier="debug")
    for k in range(3):
        rows.add(f"p{k}", gpus=4, run=100 + k, submit=700, tier="production")
    dropped = []
    fire = admission.Admission._trigger_may_fire

    def spy(self, rows_):
        out = fire(self, rows_)
        dropped.append(int((~out).sum()))
        return out

    monkeypatch.setattr(admission.Admission, "_trigger_may_fire", spy)
    rec, _, rules = _replay(CheckedRules, rows, "ours", "oracle", thin_after=0,
                            inv=_two_types() if two_types else None)
    assert rules.cycles >= 3
    if research_ends_s == 1000:
        assert sum(dropped) >= 2 and rec.preemptions.sum() == 0
    else:
        assert sum(dropped) == 0 and rec.preemptions.sum() == 3


MIXED = Inventory(nodes=(Node("a10", "A10", 8), Node("l40s", "L40S", 4), Node("a100", "A100-80GB", 8)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, peaks=st.lists(st.floats(2_000, 70_000), min_size=25, max_size=25),
       loose=st.sampled_from([1.0, 1.8, 3.0]), thin_after=st.sampled_from([0, None]),
       fraction=st.sampled_from([1.0, 0.0]))
def test_starts_below_the_bound_are_the_full_decide_on_a_mixed_cluster(draw, peaks, loose, thin_after, fraction):
    """Rule *start below the bound* on three GPU types, the bound ``loose`` x the true peak (the point):
    every incremental plan equals a full decide(), with the thin walk and without."""
    rows = JobRows()
    for i, (gpus, run_s, submit, team, *_rest) in enumerate(draw):
        rows.add(f"j{i}", gpus=min(gpus, 8), run=round(run_s), submit=round(submit), team=team,
                 peak_mib=peaks[i], tier=["research", "production", "best_effort"][i % 3])
    table, _ = load_workload(rows.frame())
    preds = OraclePredictions().predict(table, MIXED)
    preds = replace(preds, peak_vram_upper_mib=preds.peak_vram_mib * loose)
    policy = load_policy("ours")
    policy = policy.model_copy(update={"sizing": policy.sizing.model_copy(update={"below_bound_point_fraction": fraction})})
    rules = CheckedRules("ours", policy, table, MIXED, preds)
    if thin_after is not None:
        rules.scheduler = IncrementalScheduler(rules.policy, thin_after=thin_after)
    Replay(table, MIXED, rules, preds, SimConfig(default_checkpoint_s=600.0)).run()
    assert rules.cycles >= 1


def test_a_loose_bound_starts_jobs_below_it_when_the_safe_type_is_busy():
    """Eight 1-GPU jobs whose 3x-loose bound (60 GB) needs an A100 and whose point (20 GB) fits the
    others, arriving while a long 8-GPU job holds the A100s: they start on the free L40S and A10 GPUs."""
    rows = JobRows().add("big", gpus=8, run=10_000, submit=0, peak_mib=70_000)
    for i in range(8):
        rows.add(f"s{i}", gpus=1, run=600, submit=10 + i, peak_mib=20_000)
    table, _ = load_workload(rows.frame())
    preds = OraclePredictions().predict(table, MIXED)
    preds = replace(preds, peak_vram_upper_mib=preds.peak_vram_mib * 3.0)
    rec = Replay(table, MIXED, PolicyRules("ours", load_policy("ours"), table, MIXED, preds), preds,
                 SimConfig(default_checkpoint_s=600.0)).run()
    small = list(range(1, 9))  # rows in submit order: "big" first
    assert all(rec.wait_s[j] < 60 for j in small)  # none waits for the A100s (10,000 s)
    off = load_policy("ours")
    off = off.model_copy(update={"sizing": off.sizing.model_copy(update={"start_below_bound": False})})
    rec_off = Replay(table, MIXED, PolicyRules("ours", off, table, MIXED, preds), preds,
                     SimConfig(default_checkpoint_s=600.0)).run()
    assert all(rec_off.wait_s[j] > 5_000 for j in small)  # the rule off: they queue for the A100s
