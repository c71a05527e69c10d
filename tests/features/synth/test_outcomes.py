"""End events: the earliest wins, limits cut runs, OOM pre-empts everything."""

from __future__ import annotations

import numpy as np

from features.schema import STATES
from features.synth import get_profile
from features.synth.outcomes import LIMIT_MENU_S, FamilyTiming, draw_outcomes


def _timing(n_fam=1, early=0.0, fail=1e-9, limit=LIMIT_MENU_S[-1]):
    return FamilyTiming(log_median_s=np.full(n_fam, 8.0), within_sd=np.full(n_fam, 0.3),
                        trial_share=np.zeros(n_fam), early_fail=np.full(n_fam, early),
                        fail_per_hour=np.full(n_fam, fail), limit_s=np.full(n_fam, limit),
                        checkpoint_s=np.full(n_fam, np.nan))


def _draw(n, timing, duration, oom=False, cancel=0.0, tier=3, seed=0):
    return draw_outcomes(np.random.default_rng(seed), timing=timing, fam_of_job=np.zeros(n, dtype=int),
                         tier=np.full(n, tier), true_duration_s=np.full(n, duration), slowdown=np.ones(n),
                         num_gpus=np.ones(n), oom=np.full(n, oom), cancel_share=np.full(n, cancel),
                         profile=get_profile("philly"))


def _states(out):
    return np.array(STATES)[out.state]


def test_clean_runs_complete_after_their_jittered_duration():
    out = _draw(5_000, _timing(), 3600.0)
    share = np.mean(_states(out) == "COMPLETED")
    assert share > 0.99
    done = _states(out) == "COMPLETED"
    np.testing.assert_allclose(out.run_s[done], 3600.0 * out.jitter[done])


def test_limits_below_the_run_time_out_at_the_limit_or_a_neighbour():
    out = _draw(2_000, _timing(limit=1800.0), 20 * 3600.0)
    assert (_states(out) == "TIMEOUT").mean() > 0.95
    t = _states(out) == "TIMEOUT"
    assert set(np.unique(out.run_s[t])) <= {1800.0, 3600.0}  # 8 % of runs move one step on the menu


def test_oom_and_early_failures():
    out = _draw(1_000, _timing(early=1.0), 3600.0, oom=True)
    assert (_states(out) == "OUT_OF_MEMORY").all() and not out.started_training.any()
    early = _draw(1_000, _timing(early=1.0), 3600.0)
    assert (_states(early) == "FAILED").all() and (early.run_s <= 1800.0 * 1.2).all()
    assert not early.started_training.any()


def test_cancellations_cut_the_run_and_preemption_hits_best_effort_only():
    out = _draw(4_000, _timing(), 7200.0, cancel=0.5)
    c = _states(out) == "CANCELLED"
    assert 0.45 < c.mean() < 0.55 and (out.run_s[c] < 7200.0 * out.jitter[c]).all()
    long_be = _draw(2_000, _timing(), 200 * 3600.0, tier=4)
    assert (_states(long_be) == "PREEMPTED").mean() > 0.9
    long_research = _draw(2_000, _timing(), 200 * 3600.0, tier=3)
    assert not (_states(long_research) == "PREEMPTED").any()
