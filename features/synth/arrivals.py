"""When jobs arrive and how long they queue.

Arrival intensity
    A non-homogeneous Poisson-like process with rate proportional to
    ``diurnal(hour) * weekly(weekday)`` in UTC: ``diurnal(h) = 1 + 0.5 cos(2 pi (h - 15) / 24)``
    (peak mid-afternoon, trough at 03:00, three to one; submissions in Philly and Helios follow
    working hours, Jeon et al. ATC'19, Hu et al. SC'21) and ``weekly`` 1.0 on weekdays, 0.6 on
    Saturday and 0.55 on Sunday. Times are drawn by warping uniform "effective time" through the
    inverse cumulative intensity ``Lambda^-1`` on an hourly grid.

Family activity
    A recurring family is active for a lognormal number of days (median 21) at a random point of
    the trace, and its runs are spread uniformly over that window in effective time (wrapping round
    the end of the trace, which keeps the overall rate exactly diurnal). One-off jobs are uniform.

Load
    The span of the trace is chosen by the caller: ``total GPU-seconds / (target_load * gpus)``
    when a cluster size is given (so offered load is ``target_load``), else ``n_jobs / jobs_per_day``.

Queueing
    A share of jobs starts at once; the others wait a lognormal time whose median grows 35 %
    (``e^0.3``) per doubling of the gang and with the arrival intensity at submission (``(rate / 0.9)^1.5``: busy hours wait longer),
    and shrinks for ``sla``/``production``/``debug`` tiers. The replay simulator recomputes waits
    from its own queue; these only make the history look like a real one.
"""

from __future__ import annotations

import numpy as np

from features.synth.profiles import TIERS, Profile

__all__ = ["intensity", "arrival_times", "queue_waits"]

_WEEKLY = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 0.55])  # Monday first
#: Log-offset of the median wait per tier (TIERS order: production, debug, sla, research, best_effort).
_TIER_WAIT_SHIFT = np.array([-0.5, -0.8, -1.0, 0.0, 0.7])
if len(_TIER_WAIT_SHIFT) != len(TIERS):  # pragma: no cover - guards an edit of TIERS
    raise RuntimeError("arrivals: one wait shift per tier is needed")


def intensity(ts: np.ndarray) -> np.ndarray:
    """Relative arrival rate at epoch seconds ``ts`` (mean ~0.9 over a week)."""
    ts = np.asarray(ts, dtype=float)
    hour = (ts % 86400.0) / 3600.0
    weekday = ((ts // 86400.0).astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday (index 3)
    return (1.0 + 0.5 * np.cos(2 * np.pi * (hour - 15.0) / 24.0)) * _WEEKLY[weekday]


def arrival_times(rng: np.random.Generator, fam_of_job: np.ndarray, n_families: int, recurring: np.ndarray,
                  start_ts: float, span_s: float) -> np.ndarray:
    """Submit time of each job, epoch seconds, within ``[start_ts, start_ts + span_s)``.

    Parameters
    ----------
    rng : numpy Generator
    fam_of_job : ndarray of int, shape (n,)
    n_families : int
    recurring : ndarray of bool, shape (n,)
        False for one-off jobs (spread uniformly).
    start_ts, span_s : float
    """
    n = len(fam_of_job)
    life_days = np.clip(rng.lognormal(np.log(21.0), 1.0, n_families), 1.0, None)
    width = np.minimum(life_days * 86400.0 / span_s, 1.0)
    offset = rng.random(n_families)
    u = np.where(recurring, (offset[fam_of_job] + width[fam_of_job] * rng.random(n)) % 1.0, rng.random(n))
    grid = start_ts + np.arange(0.0, span_s + 3600.0, 3600.0)
    grid[-1] = start_ts + span_s
    rate = intensity(grid[:-1] + 1800.0) * np.diff(grid)
    cum = np.concatenate([[0.0], np.cumsum(rate)])
    return np.interp(u * cum[-1], cum, grid)


def queue_waits(rng: np.random.Generator, num_gpus: np.ndarray, tier: np.ndarray, submit_ts: np.ndarray,
                profile: Profile) -> np.ndarray:
    """Seconds each job waits between submission and start (see module docstring)."""
    n = len(num_gpus)
    busy = intensity(submit_ts) / 0.9
    log_median = (np.log(profile.wait_median) + 0.3 * np.log2(np.maximum(num_gpus, 1.0))
                  + _TIER_WAIT_SHIFT[tier] + 1.5 * np.log(busy))
    wait = np.exp(log_median + profile.wait_log_sd * rng.standard_normal(n))
    return np.where(rng.random(n) < profile.wait_zero_share, 0.0, np.round(wait))
