"""The training pipeline: time-ordered split, fit, evaluate against baselines, log a reviewable run.

``train_pipeline`` splits the table by submit time into train / calibration / test (default
70 / 15 / 15 %), fits a bundle on train + calibration (``models.fit.fit_bundle``), evaluates it on
test beside the baselines (``models.evaluate``) and logs to MLflow:

* parameters: split sizes, estimator settings, feature pipeline version;
* data fingerprint: SHA-256 of the canonical table's content, row count, submit-time span (params
  ``data_*`` and the ``data_fingerprint`` tag);
* metrics ``<target>/<predictor>/<metric>`` for the model and every baseline, plus training time;
* plots (``plots/``): predicted vs actual, interval coverage over time, error by team and by GPU
  count, feature importance (duration p50, memory correction), memory predicted vs measured;
* ``report.json`` (the ``evaluate`` report of the test split), ``heldout/heldout.parquet`` (the
  test split, which ``promote`` re-scores), and the model: ONE pyfunc bundle named ``model`` with a
  signature and an input example. The served history snapshot holds every ended job of the table.

With ``register=True`` the model becomes a new version of ``job-predictor`` with alias
``challenger`` and its headline metrics as tags.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import mlflow
import numpy as np
import pandas as pd

from features.build import FEATURE_NAMES
from features.errors import InputError
from features.history import HistoryStore, numeric_column, object_column
from features.schema import COLUMNS
from models import plots
from models.baselines import BASELINES, baseline_predictions
from models.bundle import JobPredictorBundle, placement_slowdown
from models.evaluate import duration_rows, evaluate_bundle, predictions_for
from models.fit import DEFAULT_DURATION_PARAMS, fit_bundle
from models.memory import MEMORY_EXTRA_FEATURES, MemoryEstimator
from models.memory_analytic import analytic_memory
from models.prediction import SLOWDOWN_COLUMNS
from models.registry import ensure_experiment, headline_metrics, log_bundle, plain_frame, register_version

__all__ = ["TrainResult", "train_pipeline", "fingerprint", "time_split"]


@dataclass(frozen=True)
class TrainResult:
    """What a training run produced."""

    run_id: str
    model_uri: str
    version: str | None
    report: dict
    headline: dict[str, float]
    train_seconds: float


def fingerprint(jobs: pd.DataFrame) -> dict[str, str | int | float]:
    """Content hash of the canonical columns, row count and submit-time span of a job table."""
    hashed = pd.util.hash_pandas_object(jobs[list(COLUMNS)], index=False).to_numpy()
    submit = numeric_column(jobs, "submit_ts")
    return {
        "data_sha256": hashlib.sha256(hashed.tobytes()).hexdigest(),
        "data_rows": int(len(jobs)),
        "data_submit_min": float(np.nanmin(submit)) if len(jobs) else float("nan"),
        "data_submit_max": float(np.nanmax(submit)) if len(jobs) else float("nan"),
    }


def time_split(jobs: pd.DataFrame, test_fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(earlier, later) parts of a table by submit time; ``later`` holds ``test_fraction`` of the rows."""
    if not 0.0 < test_fraction < 0.9:
        raise InputError(f"test fraction must be in (0, 0.9), got {test_fraction}")
    ordered = jobs.loc[np.isfinite(numeric_column(jobs, "submit_ts"))].sort_values("submit_ts", kind="stable")
    cut = int(round(len(ordered) * (1.0 - test_fraction)))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


def _flat_metrics(report: dict) -> dict[str, float]:
    out = {}
    for target, entries in report.items():
        for predictor, metrics in entries.items():
            for name, value in metrics.items():
                if isinstance(value, int | float) and np.isfinite(value):
                    out[f"{target}/{predictor}/{name}"] = float(value)
    return out


def _log_plots(bundle: JobPredictorBundle, test: pd.DataFrame) -> None:
    preds, state = predictions_for(bundle, test)
    rows = duration_rows(test)
    if rows.any():
        actual = numeric_column(test, "duration_s")[rows]
        scale = placement_slowdown(test, preds[list(SLOWDOWN_COLUMNS)].to_numpy())[rows]
        p10, p50, p90 = (preds[c].to_numpy()[rows] * scale for c in ("duration_p10_s", "duration_p50_s", "duration_p90_s"))
        base = baseline_predictions(test, state, bundle.global_median_s)
        last2 = base["user_last2"][rows]
        figures = {
            "plots/duration_predicted_vs_actual.png": plots.predicted_vs_actual(actual, {"model p50": p50, "user_last2": last2}),
            "plots/duration_interval_coverage_over_time.png": plots.coverage_over_time(
                numeric_column(test, "submit_ts")[rows], p10, p90, actual),
        }
        err = {"model": np.abs(np.log(np.maximum(p50, 1) / np.maximum(actual, 1)))}
        for name in BASELINES:
            if name in ("user_last2", "requested_time"):
                err[name] = np.abs(np.log(np.maximum(base[name][rows], 1) / np.maximum(actual, 1)))
        teams = np.array([t if isinstance(t, str) else "(none)" for t in object_column(test, "team")])[rows]
        gpus = numeric_column(test, "num_gpus")[rows]
        figures["plots/duration_error_by_team.png"] = plots.error_by_group(teams, err, "Duration error by team")
        figures["plots/duration_error_by_gpu_count.png"] = plots.error_by_group(
            np.where(np.isfinite(gpus), gpus, -1).astype(int), err, "Duration error by GPU count (-1: unknown)")
        for name, fig in figures.items():
            mlflow.log_figure(fig, name)
            plt.close(fig)
    fig = plots.feature_importance(list(FEATURE_NAMES), bundle.duration.feature_importance(),
                                   "Duration p50 model: feature importance")
    mlflow.log_figure(fig, "plots/feature_importance_duration.png")
    plt.close(fig)
    gains = bundle.memory.feature_importance()
    if gains is not None:
        fig = plots.feature_importance([*FEATURE_NAMES, *MEMORY_EXTRA_FEATURES], gains,
                                       "Memory correction: feature importance")
        mlflow.log_figure(fig, "plots/feature_importance_memory.png")
        plt.close(fig)
    actual_mem = numeric_column(test, "peak_vram_mib")
    point = preds["peak_vram_mib"].to_numpy(dtype=float)
    ok = np.isfinite(actual_mem) & np.isfinite(point)
    if ok.any():
        analytic = analytic_memory(test, bundle.gpu_memory_mib)["total"]
        fig = plots.memory_vs_actual(actual_mem[ok], point[ok], preds["peak_vram_upper_mib"].to_numpy(dtype=float)[ok],
                                     analytic[ok])
        mlflow.log_figure(fig, "plots/memory_predicted_vs_actual.png")
        plt.close(fig)


def train_pipeline(
    jobs: pd.DataFrame,
    *,
    experiment: str = "job-predictor",
    register: bool = False,
    test_fraction: float = 0.15,
    calibration_fraction: float = 0.15,
    source: str | None = None,
    n_estimators: int | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> TrainResult:
    """Split, fit, evaluate and log one run (see the module docstring); MLflow must be configured.

    ``n_estimators`` overrides the boosting rounds of the duration and memory models (faster,
    coarser models; default: the estimators' own settings).
    """
    phase = on_phase or (lambda _name: None)
    earlier, test = time_split(jobs, test_fraction)
    if len(test) == 0 or len(earlier) < 50:
        raise InputError(f"need at least 50 training jobs and one test job, got {len(earlier)} and {len(test)}")
    cal_share = calibration_fraction / (1.0 - test_fraction)
    duration_params, memory = DEFAULT_DURATION_PARAMS, MemoryEstimator()
    if n_estimators is not None:
        if n_estimators < 1:
            raise InputError(f"--trees must be at least 1, got {n_estimators}")
        duration_params = replace(duration_params, n_estimators=n_estimators)
        memory = MemoryEstimator(params=replace(memory.params, n_estimators=n_estimators))
    mlflow.set_experiment(experiment_id=ensure_experiment(experiment))
    with mlflow.start_run() as run:
        prints = fingerprint(jobs)
        mlflow.set_tags({"data_fingerprint": prints["data_sha256"], "source": source or "(in memory)"})
        mlflow.log_params({
            **prints, "n_train": int(round(len(earlier) * (1 - cal_share))),
            "n_calibration": int(round(len(earlier) * cal_share)), "n_test": len(test),
            "test_fraction": test_fraction, "calibration_fraction": calibration_fraction,
            **{f"duration_{k}": v for k, v in asdict(duration_params).items() if k != "extra"},
            **{f"memory_{k}": v for k, v in asdict(memory.params).items() if k != "extra"},
        })
        started = time.perf_counter()
        bundle = fit_bundle(earlier, calibration_fraction=cal_share, duration_params=duration_params,
                            memory_estimator=memory, on_phase=phase)
        train_seconds = time.perf_counter() - started
        bundle.history = HistoryStore(pd.concat([earlier, test], ignore_index=True))
        mlflow.log_params({"feature_pipeline_version": bundle.feature_pipeline_version,
                           "duration_coverage_target": bundle.duration.coverage,
                           "memory_alpha": bundle.memory.alpha, **{f"fit_{k}": v for k, v in bundle.info.items()
                                                                  if not isinstance(v, list)}})
        phase("evaluate")
        report = evaluate_bundle(bundle, test)
        mlflow.log_metrics({**_flat_metrics(report), "train_seconds": train_seconds,
                            "duration_shift_lo": bundle.duration.shift_lo_, "duration_shift_hi": bundle.duration.shift_hi_,
                            "memory_shift": bundle.memory.shift_})
        mlflow.log_dict(report, "report.json")
        phase("plots")
        _log_plots(bundle, test)
        with tempfile.TemporaryDirectory() as tmp:
            held = Path(tmp) / "heldout.parquet"
            plain_frame(test).to_parquet(held, index=False)
            mlflow.log_artifact(str(held), artifact_path="heldout")
        phase("model")
        example = test.iloc[: min(5, len(test))]
        info = log_bundle(bundle, example)
        headline = headline_metrics(report)
        version = None
        if register:
            phase("register")
            tags = {k: f"{v:.4f}" for k, v in headline.items()}
            tags.update(data_fingerprint=prints["data_sha256"], run_id=run.info.run_id)
            version = register_version(info.model_uri, tags)
    return TrainResult(run.info.run_id, info.model_uri, version, report, headline, train_seconds)
