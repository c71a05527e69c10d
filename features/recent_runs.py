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

from features.history import KEY_KINDS, STATE_FIELDS, HistoryState

__all__ = ["RECENT_STATS", "RECENT_FEATURES", "recent_runs_block", "recent_runs_from"]

RECENT_STATS: tuple[str, ...] = ("log_mean_d", "log_last2_d", "recent_logd", "recent_q10_logd", "recent_q90_logd")
#: Column names, kind-major, in ``recent_runs_block``'s order.
RECENT_FEATURES: tuple[str, ...] = tuple(f"{kind}_{stat}" for kind in KEY_KINDS for stat in RECENT_STATS)


_F = {name: i for i, name in enumerate(STATE_FIELDS)}
_COPIED = np.array([_F["recent_logd"], _F["recent_q10_logd"], _F["recent_q90_logd"]])


def recent_runs_block(state: HistoryState) -> np.ndarray:
    """The ``RECENT_FEATURES`` columns for the jobs of ``state``, shape (n_jobs, len(RECENT_FEATURES))."""
    return recent_runs_from(state.stacked())


def recent_runs_from(S: np.ndarray) -> np.ndarray:
    """``recent_runs_block`` from ``HistoryState.stacked()`` (jobs, kinds, fields): all kinds at once."""
    n, kinds = S.shape[0], S.shape[1]
    out = np.empty((n, kinds, len(RECENT_STATS)))
    with np.errstate(divide="ignore", invalid="ignore"):
        n_dur = S[:, :, _F["n_dur"]]
        means = np.empty((n, kinds, 2))
        means[:, :, 0] = np.where(n_dur > 0, S[:, :, _F["sum_d"]] / n_dur, np.nan)  # mean run time
        means[:, :, 1] = S[:, :, _F["last2_d"]]  # mean of the latest two
        out[:, :, :2] = np.log(np.where(means > 0, np.maximum(means, 1.0), np.nan))
    out[:, :, 2:] = S[:, :, _COPIED]
    return out.reshape(n, kinds * len(RECENT_STATS))
