"""Recent-runs statistics and features: by hand, the window's length, and batch == serving past the window."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from features.build import JobFeatureBuilder
from features.history import LONG_WINDOW, RECENT_DECAY, HistoryStore, ended_events, history_state
from features.recent_runs import RECENT_FEATURES
from features.schema import conform


def runs(durations: list[float], user: str = "u1", start: float = 0.0) -> list[dict]:
    """One job per duration, each submitted after the previous one ended."""
    rows, t = [], start
    for i, d in enumerate(durations):
        rows.append({"job_id": f"{user}-{i}", "user": user, "team": "t", "submit_ts": t, "start_ts": t,
                     "end_ts": t + d, "duration_s": d, "state": "COMPLETED", "cpus": 4.0})
        t += d + 1.0
    return rows


def query(t: float, user: str = "u1") -> dict:
    return {"job_id": f"q-{user}", "user": user, "team": "t", "submit_ts": t, "state": "PENDING", "cpus": 4.0}


def test_recent_statistics_by_hand() -> None:
    durations = [100.0, 200.0, 400.0]
    rows = runs(durations)
    jobs = conform(pd.DataFrame([*rows, query(rows[-1]["end_ts"] + 10.0)]))
    state = history_state(jobs)
    q = len(durations)
    newest_first = np.log(durations[::-1])
    weights = RECENT_DECAY ** np.arange(3)
    assert state.get("user", "recent_logd")[q] == pytest.approx(float(np.sum(weights * newest_first) / weights.sum()))
    assert state.get("user", "recent_q10_logd")[q] == pytest.approx(float(np.quantile(np.log(durations), 0.1)))
    assert state.get("user", "recent_q90_logd")[q] == pytest.approx(float(np.quantile(np.log(durations), 0.9)))
    x = JobFeatureBuilder(min_category_count=1).fit(jobs).transform(jobs).iloc[q]
    assert x["user_log_last2_d"] == pytest.approx(math.log(300.0), rel=1e-6)
    assert x["user_log_mean_d"] == pytest.approx(math.log(700.0 / 3), rel=1e-6)
    assert np.isnan(JobFeatureBuilder(min_category_count=1).fit(jobs).transform(jobs).iloc[0]["user_recent_logd"])


def test_window_keeps_only_the_latest_runs() -> None:
    """Runs older than LONG_WINDOW do not move the quantiles: 5 huge old runs, then LONG_WINDOW short ones."""
    rows = runs([1e6] * 5 + [10.0] * LONG_WINDOW)
    jobs = conform(pd.DataFrame([*rows, query(rows[-1]["end_ts"] + 1.0)]))
    state = history_state(jobs)
    assert state.get("user", "recent_q90_logd")[-1] == pytest.approx(math.log(10.0))
    assert state.get("user", "recent_logd")[-1] == pytest.approx(math.log(10.0))
    assert state.get("user", "n_dur")[-1] == 5 + LONG_WINDOW  # the running sums still see everything


def test_store_equals_batch_past_the_window() -> None:
    """Two users with more runs than the window, added to the store in chunks: the same recent features."""
    rng = np.random.default_rng(3)
    rows = runs(list(rng.lognormal(5, 1.5, 2 * LONG_WINDOW + 7)), "a") + runs(list(rng.lognormal(7, 1, 31)), "b", 5.0)
    jobs = conform(pd.DataFrame(rows))
    later = conform(pd.DataFrame([query(1e9, "a"), query(1e9, "b")]))
    builder = JobFeatureBuilder(min_category_count=1).fit(jobs)
    grown = HistoryStore()
    grown.state_for(later)  # build first, so that add() updates in place
    ordered = jobs.sort_values(["end_ts", "job_id"])
    for k in range(0, len(ordered), 4):
        grown.add(ordered.iloc[k : k + 4])
    batch = builder.transform(later, ended_events(jobs))
    for store in (grown, HistoryStore(jobs)):
        served = builder.transform(later, store)
        np.testing.assert_array_equal(served[list(RECENT_FEATURES)].to_numpy(), batch[list(RECENT_FEATURES)].to_numpy())
