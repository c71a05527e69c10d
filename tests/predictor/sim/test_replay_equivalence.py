"""The replay's shortcuts against the loop without them: small traces replayed both ways, every job's
runs (start, end, how each ended) compared.

* ``decide()`` is skipped at an instant where its plan provably could not start or evict anything
  (``Replay._nothing_can_start``: nothing may be evicted, and no queued job has enough GPUs with its
  share free). Against ``NoSkipReplay`` (same loop, ``decide()`` at every instant with an event and
  a queue): identical, whatever the policy and the predictions.
* The rules layer's ``revisit_at_ts`` is one superseding wakeup (the latest plan's, moved earlier to
  the next running job's predicted end by ``PolicyRules.plan``), not one wakeup per plan ever made.
  Against ``ReferenceReplay`` (every plan's revisit kept, as the replay did before, and no skip):
  identical for policies that never preempt while no running job outlives its predicted run time
  (exact predictions, overestimates, none with runs under the 4 h assumed for an unknown duration).
  Otherwise the plan also changes between events at instants no revisit names (a job overrunning
  its prediction; a preempting policy's priorities moving with attained service, waiting time and
  decayed usage), the old loop decided at whichever of them stale wakeups happened to name, and the
  two may differ; the overrun case a hypothesis search found is pinned.
"""

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.config import QueueingConfig
from predictor.sim.events import EventKind
from predictor.sim.predictions import NoPredictions, OraclePredictions, PredictionTable
from predictor.sim.replay import Replay, SimConfig
from predictor.sim.rules import PolicyRules, load_policy
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows


class ReferenceReplay(Replay):
    """The replay without its shortcuts: every plan's revisit is kept (deduplicated by instant only),
    and decide() runs at every instant with an event and a queue."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._wakeups: set[float] = set()

    def _revisit(self, revisit_ts, now):
        if revisit_ts is None:
            return
        t = revisit_ts - self.jobs.origin_ts
        if t <= now or t in self._wakeups or (not self.running and self.arrivals_left == 0):
            return
        self._wakeups.add(t)
        self.events.push(t, EventKind.WAKEUP)

    def _nothing_can_start(self, pending) -> bool:
        return False


class NoSkipReplay(Replay):
    """The replay with ``decide()`` at every instant with an event and a queue."""

    def _nothing_can_start(self, pending) -> bool:
        return False


def _scaled(preds: PredictionTable, factor: float) -> PredictionTable:
    return replace(preds, p10_s=preds.p10_s * factor, p50_s=preds.p50_s * factor, p90_s=preds.p90_s * factor)


SOURCES = {"none": (NoPredictions(), 1.0), "oracle": (OraclePredictions(), 1.0),
           "under": (OraclePredictions(), 0.3), "over": (OraclePredictions(), 2.5)}
PRESETS = ["fifo", "sjf-oracle", "qssf", "las", "kueue", "ours", "greedy-fifo"]


def _runs(cls, rows: JobRows, preset: str, source: str, gpus: int):
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(gpus)
    src, factor = SOURCES[source]
    preds = _scaled(src.predict(table, inv), factor)
    if preset == "greedy-fifo":  # the PAI validation's FIFO: best effort, later jobs may start
        policy = load_policy("fifo").model_copy(update={"queueing": QueueingConfig(strategy="best_effort",
                                                                                    scope="cluster")})
    else:
        policy = load_policy(preset)
    rec = cls(table, inv, PolicyRules(preset, policy, table, inv, preds), preds,
              SimConfig(default_checkpoint_s=600.0)).run()
    order = np.lexsort((rec.seg_start, rec.seg_job))
    segs = list(zip(rec.seg_job[order].tolist(), rec.seg_start[order].tolist(), rec.seg_end[order].tolist(),
                    rec.seg_kind[order].tolist(), strict=True))
    return rec, segs


jobs_strategy = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 4, 8, 16]), st.floats(10, 5000), st.floats(0, 6000),
              st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), st.floats(50, 2000))),
    min_size=1, max_size=25,
)


def _workload(draw_jobs) -> JobRows:
    rows = JobRows()
    for i, (gpus, run_s, submit, team, ckpt) in enumerate(draw_jobs):
        rows.add(f"j{i}", gpus=gpus, run=round(run_s), submit=round(submit), team=team, checkpoint=ckpt,
                 tier=["research", "production", "best_effort"][i % 3])
    return rows


EXACT = ["none", "oracle", "over"]  # no running job outlives its predicted run time
# policies that never preempt: between events their plan can start nothing new. The preempting ones
# (las, kueue, ours) also change their plan as attained service, waiting time and decayed usage grow
# with the clock, at instants no revisit names: a search found a las trace where the old loop's
# stale wakeup preempts a job the new loop lets finish.
NON_PREEMPTING = ["fifo", "sjf-oracle", "qssf", "greedy-fifo"]


def _assert_runs_as_in(reference, rows, preset, source) -> None:
    """Every job's runs and end status as under ``reference``, with no more decide() calls."""
    ref, ref_segs = _runs(reference, rows, preset, source, gpus=16)
    new, new_segs = _runs(Replay, rows, preset, source, gpus=16)
    assert new_segs == ref_segs
    assert new.status.tolist() == ref.status.tolist()
    assert new.decide_calls <= ref.decide_calls


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, preset=st.sampled_from(PRESETS), source=st.sampled_from(sorted(SOURCES)))
def test_skipping_decide_changes_no_run(draw, preset, source):
    _assert_runs_as_in(NoSkipReplay, _workload(draw), preset, source)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, preset=st.sampled_from(NON_PREEMPTING), source=st.sampled_from(EXACT))
def test_every_job_runs_exactly_as_in_the_old_loop(draw, preset, source):
    _assert_runs_as_in(ReferenceReplay, _workload(draw), preset, source)


def test_a_running_job_passing_its_predicted_end_is_a_revisit():
    """Predictions 0.3x the truth (found by a hypothesis search). At t=1 the plan reserves all 16 GPUs
    for j4 from t=36.1 (when j1 is predicted to end) and asks to look again then. At t=3 four running
    jobs pass their predicted end (3.0) without ending: the rules layer now assumes each needs 900 s
    more, j4's reservation moves far out and the 1-GPU j2 fits before it. ``decide`` names only its
    reservation starts, so the seam (``PolicyRules.plan``) adds the next predicted end: j2 starts at
    t=3, as in the old loop (which held the t=0 plan's wakeup for t=3 by accident)."""
    rows = JobRows()
    for i, (gpus, run_s, submit, tier) in enumerate([
            (1, 10, 2418, "research"), (1, 117, 1, "production"), (1, 125, 0, "best_effort"),
            (8, 26, 0, "research"), (16, 10, 1, "production"), (1, 10, 0, "best_effort"), (1, 10, 0, "research"),
            (16, 4787, 0, "production"), (1, 10, 0, "best_effort"), (8, 10, 0, "research")]):
        rows.add(f"j{i}", gpus=gpus, run=run_s, submit=submit, team="a", tier=tier)
    ref, ref_segs = _runs(ReferenceReplay, rows, "ours", "under", gpus=16)
    new, new_segs = _runs(Replay, rows, "ours", "under", gpus=16)
    j2 = list(new.jobs.job_ids).index("j2")
    assert ref.first_start[j2] == 3.0 and new.first_start[j2] == 3.0
    assert new_segs == ref_segs


def test_moving_reservations_do_not_multiply_wakeups():
    """Run times 3.3x their prediction: every plan reserves past a running job's overrun, the reference
    keeps one wakeup chain per plan, the replay one in all (same outcome)."""
    rows = JobRows()
    for i in range(30):
        rows.add(f"j{i}", gpus=8 if i % 3 else 16, run=3000 + 97 * i, submit=13 * i, team="abc"[i % 3])
    ref, ref_segs = _runs(ReferenceReplay, rows, "ours", "under", gpus=16)
    new, new_segs = _runs(Replay, rows, "ours", "under", gpus=16)
    assert new_segs == ref_segs
    assert new.events < ref.events and new.decide_calls < ref.decide_calls


def _queue_behind(big_tier: str, queued_tier: str) -> JobRows:
    """16 GPUs held by one long job of ``big_tier``; ten 8-GPU jobs of ``queued_tier`` arrive behind
    it one by one (nothing fits: every arrival is an instant where no queued job can start)."""
    rows = JobRows().add("big", gpus=16, run=5000, tier=big_tier)
    for i in range(10):
        rows.add(f"q{i}", gpus=8, run=100, submit=10 + 10 * i, tier=queued_tier)
    return rows


def test_a_preempting_policy_skips_decide_while_no_queued_job_may_evict():
    """``ours`` preempts under its tier rules (production over research and best effort). With only
    research jobs queued behind a research job, nothing may be evicted: the arrivals while the
    cluster is full ask no plan, and every run is as with a plan at every instant."""
    rows = _queue_behind("research", "research")
    ref, ref_segs = _runs(NoSkipReplay, rows, "ours", "oracle", gpus=16)
    new, new_segs = _runs(Replay, rows, "ours", "oracle", gpus=16)
    assert new_segs == ref_segs
    assert ref.decide_calls - new.decide_calls == 10  # the ten arrivals behind the full cluster


def test_a_queued_job_that_may_evict_is_planned_for_at_every_instant():
    """The same queue of production jobs behind the research job: each arrival may preempt, so each
    asks a plan (and the first production job's wait passes the trigger: it preempts)."""
    rows = _queue_behind("research", "production")
    ref, ref_segs = _runs(NoSkipReplay, rows, "ours", "oracle", gpus=16)
    new, new_segs = _runs(Replay, rows, "ours", "oracle", gpus=16)
    assert new_segs == ref_segs
    assert new.decide_calls == ref.decide_calls
    big = list(new.jobs.job_ids).index("big")
    assert (new.seg_job == big).sum() >= 2  # evicted and run again


def test_under_other_scopes_every_queued_job_may_evict():
    """``las`` preempts any lower priority (no tier rules): the skip never applies while a job runs."""
    rows = _queue_behind("research", "research")
    ref, _ = _runs(NoSkipReplay, rows, "las", "oracle", gpus=16)
    new, _ = _runs(Replay, rows, "las", "oracle", gpus=16)
    assert new.decide_calls == ref.decide_calls
