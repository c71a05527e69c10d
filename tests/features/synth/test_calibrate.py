"""Calibration: summary statistics by AcmeTrace's definitions and the comparison with a published row."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from features.errors import InputError
from features.synth import TOLERANCES, calibration_report, generate, summarize


def _jobs(rows):
    cols = ["num_gpus", "state", "censored", "duration_s", "submit_ts", "start_ts"]
    return pd.DataFrame(rows, columns=cols)


def test_summary_follows_acmetrace_definitions():
    df = _jobs([
        (1, "COMPLETED", False, 100.0, 0.0, 10.0),
        (2, "CANCELLED", False, 300.0, 0.0, 0.0),
        (4, "TIMEOUT", False, 500.0, 0.0, 30.0),
        (8, "RUNNING", True, 50.0, 0.0, 0.0),  # censored: out of run/queue/state stats, in GPU stats
        (0, "COMPLETED", False, 9999.0, 0.0, 0.0),  # CPU job: ignored
    ])
    s = summarize(df)
    assert s["gpu_job_num"] == 4 and s["ended_gpu_job_num"] == 3
    assert s["avg_run_time_gpu"] == pytest.approx(300.0) and s["med_run_time_gpu"] == 300.0
    assert s["avg_que_time_gpu"] == pytest.approx(40 / 3) and s["med_que_time_gpu"] == 10.0
    assert s["avg_gpu_num"] == pytest.approx(15 / 4) and s["med_gpu_num"] == 3.0
    assert (s["complete_rate_gpu"], s["cancel_rate_gpu"], s["fail_rate_gpu"]) == pytest.approx((1 / 3,) * 3)


def test_summary_of_fractional_gpus_and_missing_columns():
    df = _jobs([(1, "COMPLETED", False, 10.0, 0.0, 0.0)] * 2).assign(gpu_milli=[500.0, 250.0])
    assert summarize(df)["avg_gpu_num"] == pytest.approx(0.375)
    with pytest.raises(InputError, match="state"):
        summarize(df.drop(columns=["state"]))


def test_default_profile_lands_within_tolerance_on_20k_jobs(philly_20k):
    report = calibration_report(philly_20k, "Philly")
    off = {m["name"]: (m["ours"], m["published"]) for m in report["metrics"] if m["ok"] is False}
    assert report["ok"], off
    assert {m["name"] for m in report["metrics"]} == set(TOLERANCES)
    assert report["ended_jobs"] > 19_000


def test_helios_profile_lands_within_tolerance():
    """Helios submits ~8,600 jobs a day: 60k jobs span a week, enough for day-long jobs to end."""
    report = calibration_report(generate(60_000, seed=1, profile="helios"), "helios")
    assert report["ok"], [m for m in report["metrics"] if m["ok"] is False]


def test_bundled_numbers_are_used_without_the_file(philly_20k, tmp_path):
    report = calibration_report(philly_20k, "philly", tmp_path / "absent.csv")
    assert report["source"].startswith("bundled")
    assert next(m for m in report["metrics"] if m["name"] == "med_run_time_gpu")["published"] == 874.0
    assert calibration_report(philly_20k, "philly", None)["source"].startswith("bundled")


def test_file_values_win_and_missing_values_are_not_compared(philly_20k, tmp_path):
    path = tmp_path / "summary.csv"
    path.write_text("id,avg_run_time_gpu,med_run_time_gpu,avg_gpu_num,med_gpu_num,complete_rate_gpu,"
                    "cancel_rate_gpu,fail_rate_gpu,avg_que_time_gpu,med_que_time_gpu,gpu_job_num\n"
                    "Mine,1,2,3,4,,,,0,0,10\n")
    report = calibration_report(philly_20k, "mine", path)
    by_name = {m["name"]: m for m in report["metrics"]}
    assert report["source"] == str(path) and by_name["avg_run_time_gpu"]["published"] == 1.0
    assert by_name["cancel_rate_gpu"]["ok"] is None and not report["ok"]
    assert by_name["med_que_time_gpu"]["diff"] == math.inf  # published 0, ours not 0


@pytest.mark.parametrize(("content", "message"), [
    ("id,avg_run_time_gpu\nOther,1\n", "no row for cluster"),
    ("id,avg_run_time_gpu\nMine,fast\n", "avg_run_time_gpu is not a number"),
], ids=["missing-row", "bad-number"])
def test_bad_summary_file_is_named(tmp_path, content, message):
    path = tmp_path / "summary.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        calibration_report(_jobs([(1, "COMPLETED", False, 1.0, 0.0, 0.0)]), "Mine", path)


def test_unknown_cluster_without_file():
    with pytest.raises(InputError, match="Philly"):
        calibration_report(_jobs([(1, "COMPLETED", False, 1.0, 0.0, 0.0)]), "Atlantis", None)
