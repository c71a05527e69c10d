"""``fit_bundle``: train every estimator on a canonical job table, without MLflow.

The training pipeline (``models.train``) and the replay simulator (which trains only on jobs that
ended before a replay window) both call it.

Steps
    1. Sort by submit time; the latest ``calibration_fraction`` of the table is the calibration
       slice (conformal shifts of the duration interval and of the memory bound).
    2. Point-in-time features for every job (``features.build``), history from the table itself.
    3. Topology: learn slowdown per placement class from placement-labelled multi-GPU jobs.
    4. Duration: LightGBM quantiles of log duration *on the best placement* (the observed log
       duration minus the log slowdown predicted for the placement the job ran on), relative to
       ``duration_offset`` (the job's time limit, else the global median). Jobs that never started
       are skipped; censored and preempted runs are lower bounds (``models.duration``).
    5. Memory: analytic estimate + learned correction from measured peaks (``models.memory``);
       out-of-memory runs and synthetic rows are left out (``models.memory.measured_peaks``).
    6. History snapshot: every ended job of the table, for serving.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from features.build import CATEGORICAL_FEATURES, FEATURE_NAMES, JobFeatureBuilder
from features.errors import InputError
from features.history import HistoryStore, history_state, numeric_column, object_column
from models.bundle import JobPredictorBundle, duration_offset, placement_slowdown
from models.duration import DurationEstimator
from models.lgbm import BoosterParams
from models.memory import MEMORY_EXTRA_FEATURES, MemoryEstimator, measured_peaks, memory_design
from models.memory_analytic import GPU_MEMORY_MIB, analytic_memory
from models.topology import TopologyEstimator

__all__ = ["fit_bundle", "duration_targets", "DEFAULT_DURATION_PARAMS"]

#: Small leaves with many jobs each: job logs drift over months, and coarse trees on history
#: features generalise to the next months better than fine ones (measured on the SWF logs).
#: 200 rounds at 0.09 on 60 % bags and 63 bins: as accurate there as 300 at 0.06, 40 % faster.
DEFAULT_DURATION_PARAMS = BoosterParams(n_estimators=200, learning_rate=0.09, num_leaves=15, min_child_samples=100,
                                        bagging_fraction=0.6, max_bin=63)
#: States whose run time is a lower bound on the job's full run time (cut short by the scheduler).
LOWER_BOUND_STATES = frozenset({"PREEMPTED"})


def duration_targets(jobs: pd.DataFrame, slowdown_at_placement: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels for the duration model.

    Returns
    -------
    usable : ndarray of bool
        Rows with a positive observed run time.
    log_duration : ndarray of float
        log(max(duration_s, 1)) minus the log slowdown of the job's placement (best-placement scale).
    censored : ndarray of bool
        The run time is a lower bound (censored at the end of the log, or preempted).
    """
    dur = numeric_column(jobs, "duration_s")
    usable = np.isfinite(dur) & (dur > 0)
    cens = jobs["censored"].fillna(False).to_numpy(dtype=bool) if "censored" in jobs.columns else np.zeros(len(jobs), bool)
    cens = cens | np.isin(object_column(jobs, "state"), list(LOWER_BOUND_STATES))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_d = np.log(np.maximum(np.where(usable, dur, 1.0), 1.0)) - np.log(slowdown_at_placement)
    return usable, log_d, cens


def fit_bundle(
    jobs: pd.DataFrame,
    *,
    calibration_fraction: float = 0.2,
    duration_params: BoosterParams | None = None,
    memory_estimator: MemoryEstimator | None = None,
    coverage: float = 0.8,
    refit_on_calibration: bool = False,
    on_phase: Callable[[str], None] | None = None,
) -> JobPredictorBundle:
    """Train the duration, memory and topology estimators on ``jobs``.

    Parameters
    ----------
    jobs : DataFrame of shape (n_jobs, n_columns)
        Canonical job table (extra columns are ignored; ground-truth columns are never read).
    calibration_fraction : float, default 0.2
        Share of the table (latest by submit time) held out for conformal calibration.
    duration_params : BoosterParams, optional
        LightGBM settings of the duration quantile models.
    memory_estimator : MemoryEstimator, optional
        An unfitted memory estimator with custom settings.
    coverage : float, default 0.8
        Target coverage of the duration p10-p90 interval.
    refit_on_calibration : bool, default False
        Refit the duration boosters on train + calibration after calibrating (see ``models.duration``).
    on_phase : callable, optional
        Called with a phase name as training proceeds (progress display).

    Returns
    -------
    JobPredictorBundle
    """
    phase = on_phase or (lambda _name: None)
    if not 0.0 < calibration_fraction < 0.9:
        raise InputError(f"calibration_fraction must be in (0, 0.9), got {calibration_fraction}")
    if "submit_ts" not in jobs.columns or "job_id" not in jobs.columns:
        raise InputError("job table lacks submit_ts or job_id")
    jobs = jobs.loc[np.isfinite(numeric_column(jobs, "submit_ts"))].sort_values("submit_ts", kind="stable")
    jobs = jobs.reset_index(drop=True)
    dur = numeric_column(jobs, "duration_s")
    if int((np.isfinite(dur) & (dur > 0)).sum()) < 20:
        raise InputError(f"need at least 20 jobs with a positive duration_s to train, got {int((dur > 0).sum())}")
    n = len(jobs)
    cal_start = int(round(n * (1.0 - calibration_fraction)))
    train, cal = slice(0, cal_start), slice(cal_start, n)

    phase("features")
    builder = JobFeatureBuilder().fit(jobs.iloc[train])
    X = builder.transform_array(jobs, history_state(jobs))
    cats = [FEATURE_NAMES.index(c) for c in CATEGORICAL_FEATURES]
    names = list(FEATURE_NAMES)

    phase("topology")
    topology = TopologyEstimator().fit(jobs.iloc[train])
    at_placement = placement_slowdown(jobs, topology.predict(jobs))

    phase("duration")
    usable, log_d, cens = duration_targets(jobs, at_placement)
    observed = usable & ~cens
    global_median = float(np.median(np.maximum(dur[observed if observed.any() else usable], 1.0)))
    log_d = log_d - duration_offset(jobs, global_median)
    tr = np.zeros(n, bool)
    tr[train] = True
    use_tr, use_cal = usable & tr, usable & ~tr
    duration = DurationEstimator(params=duration_params or DEFAULT_DURATION_PARAMS, coverage=coverage,
                                 refit_on_calibration=refit_on_calibration)
    duration.fit(X[use_tr], log_d[use_tr], cens[use_tr], X_cal=X[use_cal], log_duration_cal=log_d[use_cal],
                 censored_cal=cens[use_cal], feature_names=names, categorical=cats, global_median_s=global_median)

    phase("memory")
    parts = analytic_memory(jobs, GPU_MEMORY_MIB)
    cap = np.fromiter((GPU_MEMORY_MIB.get(t, np.nan) if isinstance(t, str) else np.nan
                       for t in object_column(jobs, "gpu_type")), "float64", n)
    Z = memory_design(X, parts, cap)
    memory = memory_estimator or MemoryEstimator()
    # measured peaks only: no out-of-memory run (a lower bound), no synthetic truth (our own formula)
    peak = measured_peaks(jobs, include_synthetic=memory.learn_from_synthetic)
    memory.fit(Z[train], parts["total"][train], peak[train], Z_cal=Z[cal], analytic_cal=parts["total"][cal],
               actual_cal=peak[cal], feature_names=names + list(MEMORY_EXTRA_FEATURES), categorical=cats)

    phase("history")
    bundle = JobPredictorBundle(
        builder=builder, duration=duration, memory=memory, topology=topology, history=HistoryStore(jobs),
        global_median_s=global_median,
        info={
            "n_jobs": n, "n_train": cal_start, "n_calibration": n - cal_start,
            "n_duration_labels": int(usable.sum()), "n_censored_labels": int((usable & cens).sum()),
            "n_memory_labels": memory.n_labelled_, "n_topology_families": topology.n_families_,
            "submit_span": [float(jobs["submit_ts"].iloc[0]), float(jobs["submit_ts"].iloc[-1])],
        },
    )
    return bundle
