"""The evaluate report: its exact shape, baselines on the same rows, absent targets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.baselines import BASELINES
from models.bundle import JobPredictorBundle
from models.evaluate import evaluate_bundle

INTERVAL = {"coverage", "mean_width_ratio", "median_width_ratio"}
POINT = {"n", "mae", "median_ae", "mean_abs_log_ratio", "r2", "within_10pct", "within_50pct", "within_2x"}


def test_report_shape_on_synthetic_data(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    report = evaluate_bundle(bundle, later_jobs)
    assert set(report) == {"duration", "memory", "topology"}
    assert set(report["duration"]) == {"model", *BASELINES, "user_interval"}
    assert set(report["duration"]["model"]) == POINT | INTERVAL
    assert all(set(report["duration"][b]) == POINT for b in BASELINES)
    assert set(report["duration"]["user_interval"]) == {"n"} | INTERVAL
    assert len({report["duration"][k]["n"] for k in report["duration"]}) == 1  # same rows for all
    assert set(report["memory"]) == {"model", "analytic"}
    for entry in report["memory"].values():
        assert set(entry) == POINT | {"underestimate_rate", "mean_overreserve_ratio"}
    assert report["memory"]["model"]["mean_abs_log_ratio"] < report["memory"]["analytic"]["mean_abs_log_ratio"]
    assert set(report["topology"]) == {"model", "prior", "no_slowdown"}
    assert report["topology"]["model"]["mean_abs_log_ratio"] < report["topology"]["no_slowdown"]["mean_abs_log_ratio"]


def test_targets_without_labels_are_absent(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    bare = later_jobs.drop(columns=[c for c in later_jobs.columns if c.startswith(("true_", "comm_"))])
    bare = bare.assign(peak_vram_mib=np.nan, time_limit_s=np.nan)
    report = evaluate_bundle(bundle, bare)
    assert report["memory"]["model"] == {"n": 0, "absent": "no measured peak_vram_mib with a model size"}
    assert report["duration"]["requested_time"]["n"] == 0 and "absent" in report["duration"]["requested_time"]
    assert report["topology"]["model"]["n"] == 0
    assert report["duration"]["model"]["n"] > 0


def test_interval_widths_are_those_of_the_reported_bounds(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    """median_width_ratio is the median p90 / p10 of the scored rows; both intervals cover some jobs."""
    from models.evaluate import duration_rows, predictions_for

    report = evaluate_bundle(bundle, later_jobs)["duration"]
    preds, _ = predictions_for(bundle, later_jobs)
    rows = duration_rows(later_jobs)
    ratio = np.maximum(preds["duration_p90_s"], 1.0) / np.maximum(preds["duration_p10_s"], 1.0)
    assert report["model"]["median_width_ratio"] == pytest.approx(float(np.median(ratio[rows])), rel=1e-6)
    for entry in (report["model"], report["user_interval"]):
        assert 0.3 < entry["coverage"] <= 1.0 and entry["median_width_ratio"] >= 1.0
