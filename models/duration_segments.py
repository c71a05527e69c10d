"""Per-segment choices of the duration model, made on the calibration slice (the end of the training window).

Segments (``segment_ids``): how much history the job's user has (ended jobs before its submit:
0, 1-2, 3-9, 10-19, 20 or more; the count feature is capped at 20) times whether the job has a
time limit. Ten segments at most; one with fewer than ``MIN_SEGMENT_ROWS`` calibration jobs takes
the choice made on the whole slice.

Point (p50): in each segment the candidate with the lowest ``point_score`` on the calibration
jobs is used: mean absolute log ratio plus the share of jobs off by more than 2x (the issue's two
headline metrics, weighed equally); candidates are the model's median, its mode-seeking point
(``models.duration``) and the baselines (``models.duration_anchor``). A model
that loses to "the mean of the user's last two jobs" for users with a deep history is replaced by
it there, and only there; a later period the model never saw decides, not the training fit.

Interval (p10-p90): split-conformal per segment (conformalised quantile regression, Romano,
Patterson & Candes 2019, with the symmetric score ``max(lo - y, y - hi)``: exact coverage
``coverage`` for exchangeable jobs of that segment). Two candidates: the model's q10/q90 and the
user's empirical 10-90 % interval of their latest runs (``features.recent_runs``); after each is
calibrated to the same coverage, the one with the smaller median width on the calibration jobs is
kept for the segment. The p50 is then clipped into the interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MIN_SEGMENT_ROWS", "DEPTH_EDGES", "SegmentPlan", "segment_ids", "conformal_shift", "point_score"]

MIN_SEGMENT_ROWS = 40
#: Lower edges of the user-history-depth bins (ended jobs before submit).
DEPTH_EDGES = (0, 1, 3, 10, 20)
_GLOBAL = -1


def segment_ids(user_n: np.ndarray, has_limit: np.ndarray) -> np.ndarray:
    """Segment of each job: depth bin * 2 + has time limit."""
    depth = np.searchsorted(np.asarray(DEPTH_EDGES, float), np.nan_to_num(user_n, nan=0.0), side="right") - 1
    return depth * 2 + np.asarray(has_limit, dtype=bool).astype(int)


def point_score(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean |log ratio| + share outside 2x (lower is better), in log space."""
    err = np.abs(pred - y)
    return float(err.mean() + np.mean(err > np.log(2.0) + 1e-12))


def conformal_shift(lo: np.ndarray, hi: np.ndarray, y: np.ndarray, coverage: float) -> float:
    """Shift s with [lo - s, hi + s] covering ``coverage`` of (exchangeable) jobs like these."""
    n = len(y)
    level = min(1.0, coverage * (1.0 + 1.0 / n))
    return float(np.quantile(np.maximum(lo - y, y - hi), level))


@dataclass
class SegmentPlan:
    """Per segment: the point candidate, the interval candidate and its conformal shift.

    ``point[seg]`` names a candidate (``"model"`` or a baseline); ``interval[seg]`` is
    ``(kind, shift, model_shift)``: the chosen kind (``"model"`` or ``"empirical"``), its shift, and
    the model's own shift (for a job of the segment without runs in the window). Segment ``-1`` is
    the whole slice (the fallback).
    """

    coverage: float = 0.8
    point: dict[int, str] = field(default_factory=dict)
    interval: dict[int, tuple[str, float, float]] = field(default_factory=dict)
    report: dict[int, dict] = field(default_factory=dict)

    def fit(self, seg: np.ndarray, y: np.ndarray, model_q: np.ndarray, baselines: dict[str, np.ndarray],
            empirical: np.ndarray) -> SegmentPlan:
        """Choose on calibration jobs (target space): ``model_q`` (n, 3), ``empirical`` (n, 2) NaN where unknown."""
        candidates = {"model": model_q[:, 1], **baselines}
        for s in [_GLOBAL, *np.unique(seg).tolist()]:
            rows = np.ones(len(y), bool) if s == _GLOBAL else seg == s
            if s != _GLOBAL and rows.sum() < MIN_SEGMENT_ROWS:
                continue
            errors = {name: point_score(p[rows], y[rows]) for name, p in candidates.items()}
            self.point[s] = min(errors, key=errors.get)
            options = {"model": (model_q[rows, 0], model_q[rows, 2])}
            if np.isfinite(empirical[rows]).all():
                options["empirical"] = (empirical[rows, 0], empirical[rows, 1])
            widths = {}
            for name, (lo, hi) in options.items():
                shift = conformal_shift(lo, hi, y[rows], self.coverage)
                widths[name] = (float(np.median(hi - lo + 2.0 * shift)), shift)
            chosen = min(widths, key=lambda k: widths[k][0])
            self.interval[s] = (chosen, widths[chosen][1], widths["model"][1])
            self.report[s] = {"rows": int(rows.sum()), "point": self.point[s], "point_errors": errors,
                              "interval": chosen, "median_log_width": {k: v[0] for k, v in widths.items()}}
        return self

    def apply(self, seg: np.ndarray, model_q: np.ndarray, baselines: dict[str, np.ndarray],
              empirical: np.ndarray) -> np.ndarray:
        """Quantiles (n, 3) in target space after the per-segment choices."""
        out = np.empty_like(model_q)
        candidates = {"model": model_q[:, 1], **baselines}
        known = np.isfinite(empirical).all(axis=1)
        for s in np.unique(seg).tolist():
            rows = seg == s
            key = s if s in self.point else _GLOBAL
            out[rows, 1] = candidates.get(self.point[key], model_q[:, 1])[rows]
            kind, shift, model_shift = self.interval[key]
            use_emp = rows & known if kind == "empirical" else np.zeros(len(seg), bool)
            use_model = rows & ~use_emp
            out[use_model, 0] = model_q[use_model, 0] - model_shift
            out[use_model, 2] = model_q[use_model, 2] + model_shift
            out[use_emp, 0] = empirical[use_emp, 0] - shift
            out[use_emp, 2] = empirical[use_emp, 1] + shift
        lo, hi = np.minimum(out[:, 0], out[:, 2]), np.maximum(out[:, 0], out[:, 2])
        out[:, 0], out[:, 2] = lo, hi
        out[:, 1] = np.clip(out[:, 1], lo, hi)
        return out
