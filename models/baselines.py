"""Duration baselines, always evaluated beside the model, from the same point-in-time history.

* ``requested_time``: the user's requested time limit (what a scheduler without predictions uses);
* ``user_last2``: arithmetic mean run time of the same user's last two ended jobs (Tsafrir, Etsion &
  Feitelson, "Backfilling using system-generated predictions", TPDS 2007); the last one when only
  one has ended;
* ``user_mean``: mean run time of all the same user's ended jobs;
* ``family_mean``: mean run time of the same user's job family (``features.history.family_keys``:
  user + job name without digits/dates). Logs without job names (the SWF logs here) have no
  families, so it answers the global median there;
* ``global_median``: median run time of the uncensored training jobs.

Where a baseline has nothing to say (no time limit, a user's first job) it answers the global
median, so every baseline scores every job and all are compared on the same rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.history import HistoryState, numeric_column

__all__ = ["BASELINES", "baseline_predictions"]

BASELINES: tuple[str, ...] = ("requested_time", "user_last2", "user_mean", "family_mean", "global_median")


def baseline_predictions(jobs: pd.DataFrame, state: HistoryState, global_median_s: float) -> dict[str, np.ndarray]:
    """Each baseline's predicted duration (seconds) for each job.

    Parameters
    ----------
    jobs : DataFrame of shape (n_jobs, n_columns)
        Canonical rows (``time_limit_s`` is read).
    state : HistoryState
        Point-in-time history of those jobs (``features.history``).
    global_median_s : float
        Median training duration, the fallback of every baseline.

    Returns
    -------
    dict of str to ndarray of shape (n_jobs,)
    """

    def fill(x: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(x) & (x > 0), x, global_median_s)

    with np.errstate(divide="ignore", invalid="ignore"):
        family = state.get("family", "sum_d") / state.get("family", "n_dur")
        user = state.get("user", "sum_d") / state.get("user", "n_dur")
    return {
        "requested_time": fill(numeric_column(jobs, "time_limit_s")),
        "user_last2": fill(state.get("user", "last2_d")),
        "user_mean": fill(user),
        "family_mean": fill(family),
        "global_median": np.full(len(jobs), float(global_median_s)),
    }
