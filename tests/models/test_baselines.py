"""Baselines from point-in-time history."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.history import history_state
from features.schema import conform
from models.baselines import baseline_predictions


def test_baselines_by_hand() -> None:
    rows = [
        # job, user, name, submit, duration, limit
        ("a", "u1", "train-1", 0, 100, 1000),
        ("b", "u1", "train-2", 10, 300, 1000),
        ("c", "u1", "eval", 20, 50, 500),
        ("q", "u1", "train-3", 5000, 1, 2000),
        ("r", "u2", None, 5000, 1, None),
    ]
    jobs = conform(pd.DataFrame([
        {"job_id": j, "user": u, "job_name": n, "submit_ts": s, "start_ts": s, "end_ts": s + d, "duration_s": d,
         "time_limit_s": lim, "state": "COMPLETED"} for j, u, n, s, d, lim in rows
    ]))
    base = baseline_predictions(jobs, history_state(jobs), global_median_s=123.0)
    q, r = 3, 4
    assert base["requested_time"][q] == 2000 and base["requested_time"][r] == 123.0
    assert base["user_last2"][q] == pytest.approx((300 + 100) / 2)  # last two by end time: b (310), a (100)
    assert base["family_mean"][q] == pytest.approx((100 + 300) / 2)  # the "train" family
    assert base["user_last2"][r] == 123.0 and base["family_mean"][r] == 123.0
    assert np.all(base["global_median"] == 123.0)
