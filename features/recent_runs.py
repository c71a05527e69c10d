"""Recent-runs features: the duration baselines and the key's recent run times, as model features.

For each key kind (``features.history.KEY_KINDS``: user, team, job family, request signature) five
columns, all point in time (from ``HistoryState``, i.e. jobs that ended before the job's submit):

* ``log_mean_d``: log of the mean run time in seconds (the ``user_mean`` / ``family_mean``
  baselines of ``models.baselines``);
* ``log_last2_d``: log of the arithmetic mean of the latest two run times (the ``user_last2``
  baseline, Tsafrir et al. 2007);
* ``recent_logd``: recency-weighted mean log run time of the latest ``LONG_WINDOW`` runs, the j-th
  newest weighing ``RECENT_DECAY ** j`` (a user's behaviour drifts; the latest runs say most);
* ``recent_q10_logd`` / ``recent_q90_logd``: the empirical 10 % and 90 % quantiles of log run time
  of the latest ``LONG_WINDOW`` runs (the per-user empirical interval).

Giving the model its own baselines lets it lean on them where the log has little else (no time
limits, no job names), instead of having to rebuild them from splits.
"""

from __future__ import annotations

import numpy as np

from features.history import KEY_KINDS, HistoryState

__all__ = ["RECENT_STATS", "RECENT_FEATURES", "recent_runs_block"]

RECENT_STATS: tuple[str, ...] = ("log_mean_d", "log_last2_d", "recent_logd", "recent_q10_logd", "recent_q90_logd")
#: Column names, kind-major, in ``recent_runs_block``'s order.
RECENT_FEATURES: tuple[str, ...] = tuple(f"{kind}_{stat}" for kind in KEY_KINDS for stat in RECENT_STATS)


def recent_runs_block(state: HistoryState) -> np.ndarray:
    """The ``RECENT_FEATURES`` columns for the jobs of ``state``, shape (n_jobs, len(RECENT_FEATURES))."""
    cols = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for kind in KEY_KINDS:
            n_dur = state.get(kind, "n_dur")
            mean_d = np.where(n_dur > 0, state.get(kind, "sum_d") / n_dur, np.nan)
            last2 = state.get(kind, "last2_d")
            cols += [
                np.log(np.where(mean_d > 0, np.maximum(mean_d, 1.0), np.nan)),
                np.log(np.where(last2 > 0, np.maximum(last2, 1.0), np.nan)),
                state.get(kind, "recent_logd"),
                state.get(kind, "recent_q10_logd"),
                state.get(kind, "recent_q90_logd"),
            ]
    n = len(state.values[KEY_KINDS[0]])
    return np.column_stack(cols) if cols else np.empty((n, 0))
