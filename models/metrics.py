"""Error metrics shared by evaluation, training reports and benchmarks.

Definitions (``p`` predicted, ``a`` actual; durations floored at 1 s and memory at 1 MiB before logs):

* ``mae``: mean |p - a|; ``median_ae``: median |p - a| (seconds or MiB);
* ``mean_abs_log_ratio``: mean |log(p / a)|; ``r2``: coefficient of determination of log p against
  log a;
* ``within_10pct`` / ``within_50pct``: share with |p / a - 1| <= 0.1 / 0.5; ``within_2x``: share
  with 1/2 <= p / a <= 2;
* intervals: ``coverage``: share with p10 <= a <= p90; ``mean_width_ratio``: mean (p90 - p10) / a;
  ``median_width_ratio``: median p90 / p10 (both floored at 1 s), how many-fold the interval spans;
* memory: ``underestimate_rate``: share with a > upper bound; ``mean_overreserve_ratio``: mean of
  max(upper - a, 0) / a, the memory reserved beyond the real peak as a share of it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["point_metrics", "interval_metrics", "reservation_metrics", "absent"]


def absent(reason: str) -> dict:
    """The entry for a target the data has no labels for."""
    return {"n": 0, "absent": reason}


def point_metrics(pred: np.ndarray, actual: np.ndarray, *, floor: float = 1.0) -> dict:
    """Point-estimate metrics of ``pred`` against ``actual`` (arrays of shape (n,))."""
    p = np.maximum(np.asarray(pred, dtype=float), floor)
    a = np.maximum(np.asarray(actual, dtype=float), floor)
    n = len(a)
    if n == 0:
        return absent("no labelled rows")
    err = np.abs(p - a)
    lr = np.log(p / a)
    la, lp = np.log(a), np.log(p)
    ss_tot = float(np.sum((la - la.mean()) ** 2))
    rel = np.abs(p / a - 1.0)
    return {
        "n": int(n),
        "mae": float(err.mean()),
        "median_ae": float(np.median(err)),
        "mean_abs_log_ratio": float(np.abs(lr).mean()),
        "r2": float(1.0 - np.sum((la - lp) ** 2) / ss_tot) if ss_tot > 0 else float("nan"),
        "within_10pct": float(np.mean(rel <= 0.1)),
        "within_50pct": float(np.mean(rel <= 0.5)),
        "within_2x": float(np.mean(np.abs(lr) <= np.log(2.0) + 1e-12)),
    }


def interval_metrics(lower: np.ndarray, upper: np.ndarray, actual: np.ndarray, *, floor: float = 1.0) -> dict:
    """Coverage and relative width of [lower, upper] intervals."""
    a = np.maximum(np.asarray(actual, dtype=float), floor)
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    if len(a) == 0:
        return {}
    return {
        "coverage": float(np.mean((lo <= a) & (a <= hi))),
        "mean_width_ratio": float(np.mean((hi - lo) / a)),
        "median_width_ratio": float(np.median(np.maximum(hi, floor) / np.maximum(lo, floor))),
    }


def reservation_metrics(upper: np.ndarray, actual: np.ndarray, *, floor: float = 1.0) -> dict:
    """How often an upper bound under-reserves, and how much it over-reserves on average."""
    a = np.maximum(np.asarray(actual, dtype=float), floor)
    u = np.asarray(upper, dtype=float)
    if len(a) == 0:
        return {}
    return {
        "underestimate_rate": float(np.mean(a > u)),
        "mean_overreserve_ratio": float(np.mean(np.maximum(u - a, 0.0) / a)),
    }
