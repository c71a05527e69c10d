"""The no-starvation bound over time, through the real replay (docs/rules-layer.md, *The
no-starvation bound*): with the default weights and exact predictions (every job ends by its p90), a
job J waits at most

    T + (1 + N_J) x L

where T is the guard threshold, N_J the number of jobs ahead of J in the band's order (submitted
before J) that were still queued at some instant after J started starving, and L the longest time a
band head can take to start: the longest predicted run on its worst placement (jobs running when it
reached the head end by then) plus that again for wait-for-better, plus the eviction grace period.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.presets import load_policy, policy_from_mapping
from predictor.sim.predictions import OraclePredictions
from predictor.sim.progress import JobStatus
from predictor.sim.record import SegmentEnd
from predictor.sim.replay import SimConfig, replay
from predictor.sim.rules import PolicyRules
from predictor.sim.workload import load_workload
from tests.predictor.sim.sim_builders import JobRows

T = 600.0  # a short threshold so a short trace starves; every other setting is the default


def _queued_intervals(rec, j):
    """(from, to) intervals during which job j waited in the queue."""
    segs = np.flatnonzero(rec.seg_job == j)
    segs = segs[np.argsort(rec.seg_start[segs])]
    out, since = [], float(rec.jobs.submit_s[j])
    for s in segs:
        out.append((since, float(rec.seg_start[s])))
        since = float(rec.seg_end[s]) if rec.seg_kind[s] == SegmentEnd.PREEMPTED else np.inf
    if np.isfinite(since):
        out.append((since, np.inf))
    return out


jobs_strategy = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 4, 8, 8, 16]), st.floats(30, 4000), st.floats(0, 2000),
              st.sampled_from(["production", "research", "best_effort", "sla", "debug"]),
              st.sampled_from(["a", "b", "c"])),
    min_size=2, max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(draw=jobs_strategy, depth=st.sampled_from([None, 1, 3]))
def test_every_job_starts_within_the_stated_bound(draw, depth):
    base = load_policy()
    policy = policy_from_mapping({**base.model_dump(), "aging": {**base.aging.model_dump(),
                                                                 "starvation_after_s": T, "guard_depth": depth}})
    rows = JobRows()
    for i, (gpus, run_s, submit, tier, team) in enumerate(draw):
        rows.add(f"j{i}", gpus=gpus, run=run_s, submit=submit, team=team, tier=tier)
    table, _ = load_workload(rows.frame())
    inv = homogeneous_inventory(16)
    preds = OraclePredictions().predict(table, inv)
    rec = replay(table, inv, PolicyRules("ours", policy, table, inv, preds), preds, SimConfig())
    assert (rec.status == JobStatus.DONE).all()
    submit = table.submit_s
    L = 2 * float((table.work_s * table.slowdown.max(axis=1)).max()) + policy.preemption.grace_s
    queued = [_queued_intervals(rec, j) for j in range(len(table))]
    for j in range(len(table)):
        starving_from = submit[j] + T
        ahead = [k for k in range(len(table)) if k != j and (submit[k], k) < (submit[j], j)
                 and any(b > starving_from and a < rec.first_start[j] for a, b in queued[k])]
        bound = T + (1 + len(ahead)) * L
        assert rec.first_start[j] - submit[j] <= bound + 1e-6, (j, rec.first_start[j] - submit[j], bound)
