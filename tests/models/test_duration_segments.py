"""Per-segment choices of the duration model, and the anchor that lets it follow a user out of range."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.schema import conform
from models.duration_anchor import ANCHOR_CHAINS, AnchoredDesign, choose_anchor
from models.duration_segments import SegmentPlan, conformal_shift, segment_ids
from models.evaluate import duration_rows, predictions_for
from models.fit import fit_bundle
from tests.models.conftest import FAST


def test_conformal_shift_reaches_the_coverage_on_new_jobs() -> None:
    rng = np.random.default_rng(0)
    y_cal, y_new = rng.normal(size=4000), rng.normal(size=20000)
    s = conformal_shift(np.full(4000, -0.5), np.full(4000, 0.5), y_cal, 0.8)
    assert np.mean((-0.5 - s <= y_new) & (y_new <= 0.5 + s)) == pytest.approx(0.8, abs=0.015)


def test_segments_follow_history_depth_and_limits() -> None:
    seg = segment_ids(np.array([0, 1, 2, 3, 9, 10, 19, 20, np.nan]), np.array([0, 1, 0, 1, 0, 1, 0, 1, 0]))
    assert seg.tolist() == [0, 3, 2, 5, 4, 13, 12, 13, 0]
    spread = segment_ids(np.array([5, 5, 5, 5, 0]), np.zeros(5), np.array([0.1, 1.0, 2.0, 9.0, 9.0]))
    assert spread.tolist() == [4, 6, 8, 10, 0]  # spread splits users with history only


def test_plan_picks_the_better_candidate_per_segment_and_the_sharper_interval() -> None:
    """Segment 8 (deep history): a baseline equal to the truth beats a noisy model there, and only there;
    the empirical interval is sharper where it hugs the truth, and both reach the coverage after calibration."""
    rng = np.random.default_rng(1)
    n = 6000
    seg = np.where(rng.random(n) < 0.5, 8, 2)
    y = rng.normal(size=n)
    noise = np.where(seg == 8, 1.0, 0.1)
    model_q = np.column_stack([y - 1.0, y + rng.normal(scale=noise), y + 1.0]) + rng.normal(scale=0.3, size=(n, 1))
    baselines = {"exact_where_deep": np.where(seg == 8, y, y + 2.0)}
    centre = y + rng.normal(scale=0.2, size=n)
    empirical = np.column_stack([centre - 0.2, centre + 0.2])
    empirical[seg == 2] += rng.normal(scale=3.0, size=((seg == 2).sum(), 1))  # useless where shallow
    cal = slice(0, n // 2)
    plan = SegmentPlan(coverage=0.8).fit(seg[cal], y[cal], model_q[cal], {k: v[cal] for k, v in baselines.items()},
                                         empirical[cal])
    assert plan.point[8] == "exact_where_deep" and plan.point[2] == "model"
    assert plan.interval[8][0] == "empirical" and plan.interval[2][0] == "model"
    test = slice(n // 2, n)
    q = plan.apply(seg[test], model_q[test], {k: v[test] for k, v in baselines.items()}, empirical[test])
    assert np.all(np.diff(q, axis=1) >= 0)
    covered = (q[:, 0] <= y[test]) & (y[test] <= q[:, 2])
    for s in (2, 8):
        assert covered[seg[test] == s].mean() == pytest.approx(0.8, abs=0.04)


def _user_table(levels: dict[str, float], n_per_user: int, start: float, seed: int) -> pd.DataFrame:
    """Users whose jobs run about exp(level) seconds (x/ 1.3), one after the other, interleaved."""
    rng = np.random.default_rng(seed)
    rows, t = [], start
    for i in range(n_per_user):
        for user, level in levels.items():
            d = float(np.exp(level + rng.normal(scale=0.25)))
            rows.append({"job_id": f"{user}-{seed}-{i}", "user": user, "team": "t", "submit_ts": t, "start_ts": t,
                         "end_ts": t + d, "duration_s": d, "state": "COMPLETED", "cpus": 8.0})
            t += 50_000.0  # every job ends before the next is submitted
    return conform(pd.DataFrame(rows))


def test_anchored_model_follows_a_user_beyond_the_training_range() -> None:
    """Trained on users running 20 s to 20 min; a new user whose jobs run ~10 h: trees alone answer the edge
    of what they saw, the anchored model answers the user's own recent run times."""
    train = _user_table({f"u{k}": 3.0 + 0.5 * k for k in range(8)}, 60, 0.0, seed=2)
    later = _user_table({"new": 10.5, "u3": 4.5}, 40, float(train["end_ts"].max()) + 1.0, seed=3)
    bundle = fit_bundle(train, duration_params=FAST)
    preds, _ = predictions_for(bundle, later)
    rows = duration_rows(later) & (later["user"] == "new").to_numpy()
    rows[np.flatnonzero(rows)[:2]] = False  # the user's first two jobs: no history yet
    ratio = preds["duration_p50_s"].to_numpy()[rows] / later["duration_s"].to_numpy()[rows]
    assert np.mean((ratio >= 0.5) & (ratio <= 2.0)) > 0.9
    assert bundle.duration.design_ is not None and bundle.duration.design_.chain  # a history anchor was chosen


def test_point_snaps_to_a_repeated_run() -> None:
    """A user who reruns a job of exactly 1,234 s gets 1,234 s back (not a value near it)."""
    train = _user_table({f"u{k}": 3.0 + 0.5 * k for k in range(6)}, 60, 0.0, seed=4)
    rep = train["user"] == "u2"
    train.loc[rep, "duration_s"] = 1234.0
    train.loc[rep, "end_ts"] = train.loc[rep, "start_ts"] + 1234.0
    later = _user_table({"u2": 3.0}, 5, float(train["end_ts"].max()) + 1.0, seed=5)
    later["duration_s"] = 1234.0
    later["end_ts"] = later["start_ts"] + 1234.0
    bundle = fit_bundle(train, duration_params=FAST)
    preds, _ = predictions_for(bundle, later)
    assert np.allclose(preds["duration_p50_s"].to_numpy(), 1234.0, rtol=1e-5)


def test_request_signature_last2_anchor_falls_back_to_the_user() -> None:
    """The ``request_then_user_last2`` chain: the signature's last-2 where it has runs, else the
    user's last-2, else the offset; chosen when it has the lowest error on the training rows."""
    names = ("log_time_limit_s", "user_log_last2_d", "request_log_last2_d")
    gm = float(np.log(600.0))
    X = np.array([[np.nan, np.log(100.0), np.log(3000.0)],   # signature known
                  [np.nan, np.log(100.0), np.nan],           # only the user
                  [np.nan, np.nan, np.nan]])                 # nothing: the offset (global median)
    design = AnchoredDesign(names, gm, ANCHOR_CHAINS["request_then_user_last2"])
    assert design.anchor(X) + design.offset(X) == pytest.approx([np.log(3000.0), np.log(100.0), gm])
    y = np.log([3000.0, 100.0, 600.0]) - gm  # target space: log d - offset
    chosen, errors = choose_anchor(X, y, np.ones(3, bool), names, gm)
    assert chosen.chain == ("request_last2", "user_last2") and errors["request_then_user_last2"] == pytest.approx(0.0)
