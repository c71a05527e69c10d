"""Rule *calibrated interval*: the start estimate's p10/p90 rescaled by what past estimates missed.

The walk of ``predictor.queue.start_estimate`` brackets a job's start by booking every duration at
its 10th and 90th percentile. What it cannot see (later arrivals that overtake, running jobs that end
far from their own quantiles, preemptions, priorities moving with age) makes that bracket miss in a
way that depends on the cluster: on a busy synthetic workload a quarter of the queued jobs started
before their p10, on the Philly-derived trace a quarter after their p90 (docs/benchmarks.md, "Start-
time estimates"). The interval is therefore calibrated on the estimator's own history, split-conformal
style on waits:

- each job's first estimate (made when it was first seen queued) is kept: its wait to the p10 and to
  the p90 start, ``w10 = p10 - made_at`` and ``w90 = p90 - made_at``;
- when the job starts, after waiting ``w``, the ratios ``w / w10`` and ``w / w90`` join a window of
  the last ``window`` queued jobs' ratios (jobs estimated to start at once, ``w90 = 0``, say nothing
  and are skipped);
- a new estimate's p10 wait is multiplied by ``lo`` = the ``lower`` quantile of the ``w / w10``
  ratios, its p90 wait by ``hi`` = the ``upper`` quantile of the ``w / w90`` ratios. Were the
  ratios exchangeable, a fraction ``lower`` of jobs would start before the new p10 and
  ``1 - upper`` after the new p90. Neither factor crosses the p50 (``lo <= 1 <= hi`` is not
  required, but p10 <= p50 <= p90 is kept by clipping).

Until ``min_samples`` jobs have started the factors are 1 (the walk's interval as it is). The window
forgets: a cluster whose load changes recalibrates within ``window`` starts. It is kept in memory by
whoever estimates (the service's ``QueueEstimates``, the replay's ``EstimatingRules``): a restarted
service begins uncalibrated. Only the interval moves; the p50 estimate is the walk's.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

__all__ = ["StartCalibration", "RULE_CALIBRATED"]

RULE_CALIBRATED = "calibrated interval (predictor.queue.start_calibration)"


class StartCalibration:
    """Online factors on the p10 and p90 waits (see the module docstring)."""

    def __init__(self, *, window: int = 2000, min_samples: int = 50, lower: float = 0.1,
                 upper: float = 0.9, refresh_every: int = 16) -> None:
        if not 0.0 < lower < upper < 1.0:
            raise ValueError(f"need 0 < lower ({lower}) < upper ({upper}) < 1")
        if window < 1 or min_samples < 1 or refresh_every < 1:
            raise ValueError("window, min_samples and refresh_every must be >= 1")
        self.lower, self.upper = float(lower), float(upper)
        self.min_samples, self.refresh_every = int(min_samples), int(refresh_every)
        self._lo: deque[float] = deque(maxlen=int(window))
        self._hi: deque[float] = deque(maxlen=int(window))
        self._since = 0
        self._factors = (1.0, 1.0)
        self._calibrated = False  # the factors in force were computed from >= min_samples ratios
        self.observed = 0

    def observe(self, made_at: float, p10_ts: float, p90_ts: float, start_ts: float) -> None:
        """A job estimated at ``made_at`` (its raw, uncalibrated p10/p90 start) started at ``start_ts``."""
        w10, w90, w = p10_ts - made_at, p90_ts - made_at, max(start_ts - made_at, 0.0)
        if not (math.isfinite(w90) and math.isfinite(w) and w90 > 0):
            return
        if math.isfinite(w10) and w10 > 0:
            self._lo.append(w / w10)
        self._hi.append(w / w90)
        self.observed += 1
        self._since += 1
        if self._since >= self.refresh_every:
            self._refresh()

    def _refresh(self) -> None:
        self._since = 0
        lo = float(np.quantile(self._lo, self.lower)) if len(self._lo) >= self.min_samples else 1.0
        hi = float(np.quantile(self._hi, self.upper)) if len(self._hi) >= self.min_samples else 1.0
        self._factors = (lo, hi)
        self._calibrated = len(self._hi) >= self.min_samples

    @property
    def factors(self) -> tuple[float, float]:
        """``(lo, hi)``: the factors on the p10 and p90 waits now (1, 1 until calibrated)."""
        return self._factors

    @property
    def calibrated(self) -> bool:
        """True once the factors in force come from at least ``min_samples`` started jobs (they are
        recomputed every ``refresh_every`` observations, so this lags the sample count a little)."""
        return self._calibrated

    def apply(self, now: float, p10: np.ndarray, p50: np.ndarray, p90: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The calibrated p10 and p90 starts for raw estimates made at ``now`` (arrays or floats;
        non-finite values stay as they are)."""
        lo, hi = self._factors
        p10, p50, p90 = (np.asarray(a, dtype=np.float64) for a in (p10, p50, p90))
        if lo == 1.0 and hi == 1.0:
            return p10, p90
        with np.errstate(invalid="ignore"):
            new10 = np.minimum(now + lo * np.maximum(p10 - now, 0.0), p50)
            new90 = np.maximum(now + hi * np.maximum(p90 - now, 0.0), p50)
        new10 = np.where(np.isfinite(new10), new10, p10)
        new90 = np.where(np.isfinite(new90), new90, p90)
        return new10, new90

    def doc(self) -> dict:
        """What the calibration holds, for explain and the queue views."""
        lo, hi = self._factors
        return {"p10_wait_factor": lo, "p90_wait_factor": hi, "calibrated": self.calibrated,
                "samples": len(self._hi), "rule": RULE_CALIBRATED}
