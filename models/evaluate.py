"""Evaluate a bundle on any labelled job table, beside the baselines: the ``evaluate`` report.

History is point in time: the features of each evaluated job use the model's history snapshot plus
the table's own jobs that ended before its submit time (``features.build.history_with``), which is
what the service would have known. Report shape (``predictor evaluate``)::

    {"duration": {"model": {...}, "requested_time": {...}, "user_last2": {...}, "user_mean": {...},
                  "family_mean": {...}, "global_median": {...}, "user_interval": {...}},
     "memory": {"model": {...}, "analytic": {...}},
     "topology": {"model": {...}, "prior": {...}, "no_slowdown": {...}}}

Each entry has ``n`` and the metrics of ``models.metrics`` (duration: point metrics; the model also
``coverage``, ``mean_width_ratio`` and ``median_width_ratio`` of its p10-p90 interval, and
``user_interval`` the same three for the interval baseline: the user's empirical 10-90 % range of
their latest runs, widened by one conformal shift fitted on the model's calibration slice
(``DurationEstimator.empirical_interval_log``; the training period's range for a user without runs); memory: point metrics of the estimate
plus ``underestimate_rate`` and ``mean_overreserve_ratio`` of the bound it reserves, for
``analytic`` the estimate itself). A target without labels in the table is ``{"n": 0, "absent": why}``.
``topology`` is an extension of the issue's shape, filled where the table carries the true slowdown
(synthetic data); it compares the predicted slowdown of each multi-GPU job's placement with it.

Rows scored: duration, jobs that ran and ended (censored and preempted runs are lower bounds, not
labels); predictions are scaled by the predicted slowdown of the placement the job ran on.
Memory, jobs with a measured ``peak_vram_mib`` and a model size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.build import history_with
from features.history import HistoryState, history_state, numeric_column, object_column
from features.schema import PLACEMENT_CLASSES
from models.baselines import BASELINES, baseline_predictions
from models.bundle import JobPredictorBundle, duration_offset, placement_slowdown
from models.fit import LOWER_BOUND_STATES
from models.memory_analytic import analytic_memory
from models.metrics import absent, interval_metrics, point_metrics, reservation_metrics
from models.prediction import SLOWDOWN_COLUMNS
from models.topology import TopologyEstimator

__all__ = ["evaluate_bundle", "predictions_for", "duration_rows"]


def predictions_for(bundle: JobPredictorBundle, jobs: pd.DataFrame) -> tuple[pd.DataFrame, HistoryState]:
    """Point-in-time predictions for a table: snapshot + the table's own ended jobs as history."""
    events = history_with(bundle.history, jobs)
    state = history_state(jobs, events)
    return bundle.predict_with_state(jobs, state), state


def duration_rows(jobs: pd.DataFrame) -> np.ndarray:
    """Rows whose duration is a label: ran, ended, not censored, not cut short by preemption."""
    dur = numeric_column(jobs, "duration_s")
    cens = jobs["censored"].fillna(False).to_numpy(dtype=bool) if "censored" in jobs.columns else np.zeros(len(jobs), bool)
    return np.isfinite(dur) & (dur > 0) & ~cens & ~np.isin(object_column(jobs, "state"), list(LOWER_BOUND_STATES))


def _duration_report(bundle: JobPredictorBundle, jobs: pd.DataFrame, preds: pd.DataFrame, state: HistoryState) -> dict:
    rows = duration_rows(jobs)
    if not rows.any():
        return {name: absent("no ended jobs with a duration") for name in ("model", *BASELINES, "user_interval")}
    actual = numeric_column(jobs, "duration_s")[rows]
    scale = placement_slowdown(jobs, preds[list(SLOWDOWN_COLUMNS)].to_numpy())[rows]
    p10, p50, p90 = (preds[c].to_numpy()[rows] * scale for c in ("duration_p10_s", "duration_p50_s", "duration_p90_s"))
    report = {"model": {**point_metrics(p50, actual), **interval_metrics(p10, p90, actual)}}
    base = baseline_predictions(jobs, state, bundle.global_median_s)
    has_limit = np.isfinite(numeric_column(jobs, "time_limit_s"))[rows]
    for name in BASELINES:
        if name == "requested_time" and not has_limit.any():
            report[name] = absent("no time limits in the data")
        else:
            report[name] = point_metrics(base[name][rows], actual)
    report["user_interval"] = _user_interval(bundle, jobs, state, rows, actual, scale)
    return report


def _user_interval(bundle: JobPredictorBundle, jobs: pd.DataFrame, state: HistoryState, rows: np.ndarray,
                   actual: np.ndarray, scale: np.ndarray) -> dict:
    """Coverage and widths of the per-user empirical interval baseline on the scored rows."""
    X = bundle.builder.transform_array(jobs.loc[rows], HistoryState({k: v[rows] for k, v in state.values.items()}))
    emp = bundle.duration.empirical_interval_log(X)
    if not np.isfinite(emp).all():
        return absent("the duration model has no empirical interval (trained without history features)")
    bounds = np.exp(emp + duration_offset(jobs.loc[rows], bundle.global_median_s)[:, None]) * scale[:, None]
    return {"n": int(len(actual)), **interval_metrics(bounds[:, 0], bounds[:, 1], actual)}


def _memory_report(jobs: pd.DataFrame, preds: pd.DataFrame, bundle: JobPredictorBundle) -> dict:
    actual = numeric_column(jobs, "peak_vram_mib")
    analytic = analytic_memory(jobs, bundle.gpu_memory_mib)["total"]
    point = preds["peak_vram_mib"].to_numpy(dtype=float)
    upper = preds["peak_vram_upper_mib"].to_numpy(dtype=float)
    rows = np.isfinite(actual) & (actual > 0) & np.isfinite(analytic) & np.isfinite(point) & np.isfinite(upper)
    if not rows.any():
        return {"model": absent("no measured peak_vram_mib with a model size"),
                "analytic": absent("no measured peak_vram_mib with a model size")}
    a = actual[rows]
    return {
        "model": {**point_metrics(point[rows], a), **reservation_metrics(upper[rows], a)},
        "analytic": {**point_metrics(analytic[rows], a), **reservation_metrics(analytic[rows], a)},
    }


def _topology_report(jobs: pd.DataFrame, preds: pd.DataFrame) -> dict:
    names = ("model", "prior", "no_slowdown")
    if "true_slowdown" not in jobs.columns:
        return {n: absent("no true slowdown in the data (synthetic ground truth)") for n in names}
    truth = numeric_column(jobs, "true_slowdown")
    cls = object_column(jobs, "placement_class")
    rows = np.isfinite(truth) & (numeric_column(jobs, "num_gpus") > 1) & np.array([c in PLACEMENT_CLASSES for c in cls])
    if not rows.any():
        return {n: absent("no multi-GPU jobs with a placement and a true slowdown") for n in names}
    sub = jobs.loc[rows]
    model = placement_slowdown(sub, preds.loc[rows, list(SLOWDOWN_COLUMNS)].to_numpy())
    prior_est = TopologyEstimator()
    prior_est.fit(sub.iloc[:0])
    prior = placement_slowdown(sub, prior_est.predict(sub))
    t = truth[rows]
    return {
        "model": point_metrics(model, t, floor=1e-9),
        "prior": point_metrics(prior, t, floor=1e-9),
        "no_slowdown": point_metrics(np.ones(len(t)), t, floor=1e-9),
    }


def evaluate_bundle(bundle: JobPredictorBundle, jobs: pd.DataFrame) -> dict:
    """The evaluation report (see the module docstring) of ``bundle`` on ``jobs``."""
    jobs = jobs.loc[np.isfinite(numeric_column(jobs, "submit_ts"))].reset_index(drop=True)
    preds, state = predictions_for(bundle, jobs)
    return {
        "duration": _duration_report(bundle, jobs, preds, state),
        "memory": _memory_report(jobs, preds, bundle),
        "topology": _topology_report(jobs, preds),
    }
