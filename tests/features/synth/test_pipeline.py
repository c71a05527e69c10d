"""features.synth.generate: the table's contract, determinism and internal consistency of the truth."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from features.schema import COLUMNS, PLACEMENT_CLASSES, validate
from features.synth import GPU_SPECS, PROFILES, TRUTH_COLUMNS, generate
from features.synth.outcomes import LIMIT_MENU_S


def test_columns_are_canonical_then_truth(philly_20k):
    assert list(philly_20k.columns) == [*COLUMNS, *TRUTH_COLUMNS]
    assert {"family", "true_duration_s", "true_slowdown", "comm_intensity", "true_peak_vram_mib"} <= set(TRUTH_COLUMNS)


@pytest.mark.parametrize("profile", PROFILES)
def test_validate_rejects_nothing(profile):
    df = generate(3_000, seed=11, profile=profile)
    result = validate(df)
    assert len(result.rejects) == 0, result.reasons().to_dict()
    assert len(result.jobs) == 3_000


def test_same_seed_same_table_other_seed_other_table():
    a = generate(2_000, seed=5, cluster_gpus=64)
    b = generate(2_000, seed=5, cluster_gpus=64)
    pd.testing.assert_frame_equal(a, b)
    assert pd.util.hash_pandas_object(a, index=True).sum() == pd.util.hash_pandas_object(b, index=True).sum()
    c = generate(2_000, seed=6, cluster_gpus=64)
    assert not a["duration_s"].equals(c["duration_s"])


def test_sorted_by_submit_time_with_unique_ids(philly_20k):
    assert philly_20k["submit_ts"].is_monotonic_increasing
    assert philly_20k["job_id"].is_unique
    assert philly_20k["job_id"].iloc[0] == "s0-0000000"


def test_offered_load_is_near_target(loaded_cluster):
    df, gpus, load = loaded_cluster
    span = df["submit_ts"].max() - df["submit_ts"].min()
    offered = (df["num_gpus"] * df["duration_s"].fillna(0.0)).sum() / (span * gpus)
    assert offered == pytest.approx(load, rel=0.1)


def test_completed_duration_is_truth_times_slowdown_times_noise(philly_20k):
    done = philly_20k[(philly_20k["state"] == "COMPLETED") & (philly_20k["duration_s"] >= 60)]
    ratio = done["duration_s"] / (done["true_duration_s"] * done["true_slowdown"])
    log_ratio = np.log(ratio.to_numpy(dtype=float))
    assert abs(np.median(log_ratio)) < 0.01
    assert np.std(log_ratio) == pytest.approx(0.06, abs=0.015)  # documented run-to-run jitter
    assert np.abs(log_ratio).max() < 0.4


def test_throughput_is_best_speed_over_slowdown(philly_20k):
    """Runs of one family on one config share a best-placement speed: throughput * slowdown * run / truth."""
    done = philly_20k[(philly_20k["state"] == "COMPLETED") & (philly_20k["duration_s"] >= 600)].copy()
    done["best_speed"] = done["throughput"] * done["duration_s"] / done["true_duration_s"]
    keys = ["family", "gpu_type", "num_gpus", "batch_size", "seq_len", "precision", "placement_class"]
    spread = done.groupby(keys)["best_speed"].agg(lambda s: s.max() / s.min() - 1 if len(s) > 1 else 0.0)
    assert spread.max() < 0.01  # only second-rounding of durations differs


def test_single_gpu_jobs_run_on_nvlink_without_slowdown(philly_20k):
    single = philly_20k[(philly_20k["num_gpus"] == 1) & philly_20k["start_ts"].notna()]
    assert (single["placement_class"] == "nvlink").all()
    assert (single["true_slowdown"] == 1.0).all()
    assert (single["comm_intensity"] == 0.0).all()


def test_slowdown_matches_the_placement_it_ran_on(philly_20k):
    ran = philly_20k[philly_20k["placement_class"].notna()]
    for cls in PLACEMENT_CLASSES:
        part = ran[ran["placement_class"] == cls]
        np.testing.assert_allclose(part["true_slowdown"], part[f"true_slowdown_{cls}"])
    assert (ran["true_slowdown"] >= 1.0).all()
    multi = ran[ran["num_gpus"] > 1]
    assert set(multi["placement_class"]) == set(PLACEMENT_CLASSES)


def test_out_of_memory_exactly_when_truth_exceeds_the_gpu(philly_20k):
    ran = philly_20k[philly_20k["start_ts"].notna()]
    capacity = ran["gpu_type"].map({k: v.memory_mib for k, v in GPU_SPECS.items()}).astype(float)
    oom = ran["state"] == "OUT_OF_MEMORY"
    ended = ~ran["censored"]
    assert ((ran["true_peak_vram_mib"] > capacity) == oom)[ended].all()
    assert 0.01 < oom.mean() < 0.06  # a small realistic rate from under-sized runs
    assert (ran.loc[oom & ended, "duration_s"] < 3600).all()  # fails at start-up
    assert (ran.loc[oom, "peak_vram_mib"] == capacity[oom]).all()


def test_measured_peak_is_truth_plus_small_noise(philly_20k):
    ok = philly_20k["peak_vram_mib"].notna() & (philly_20k["state"] != "OUT_OF_MEMORY")
    rel = philly_20k.loc[ok, "peak_vram_mib"] / philly_20k.loc[ok, "true_peak_vram_mib"] - 1
    assert abs(rel.mean()) < 0.005 and rel.std() == pytest.approx(0.02, abs=0.005)


def test_timeouts_end_at_the_limit_and_cancels_cut_the_run_short(philly_20k):
    t = philly_20k[philly_20k["state"] == "TIMEOUT"]
    assert len(t) and (t["duration_s"] == t["time_limit_s"]).all()
    c = philly_20k[philly_20k["state"] == "CANCELLED"]
    full = c["true_duration_s"] * c["true_slowdown"]
    assert (c["duration_s"] <= full * 1.3 + 1).all() and (c["duration_s"] < full).mean() > 0.9


def test_time_limits_are_round_and_poor_predictors(philly_20k):
    assert philly_20k["time_limit_s"].isin(LIMIT_MENU_S).all()
    done = philly_20k[philly_20k["state"] == "COMPLETED"]
    log_d = np.log(done["duration_s"])
    by_limit = np.abs(np.log(done["time_limit_s"]) - log_d).median()
    # leave-one-out family median: what history alone predicts
    g = done.assign(log_d=log_d).groupby("family")["log_d"]
    n, total = g.transform("size"), g.transform("sum")
    loo = ((total - log_d) / (n - 1)).where(n > 1)
    by_history = np.abs(loo - log_d).median()
    assert by_history < 0.5 * by_limit


def test_censored_rows_are_running_or_pending(philly_20k):
    cens = philly_20k[philly_20k["censored"]]
    assert set(cens["state"]) <= {"RUNNING", "PENDING"} and len(cens) > 0
    assert cens["end_ts"].isna().all()
    log_end = philly_20k["submit_ts"].max()  # the log ends at its last submission
    running = cens[cens["state"] == "RUNNING"]
    np.testing.assert_allclose(running["start_ts"] + running["duration_s"], log_end)
    assert cens.loc[cens["state"] == "PENDING", "start_ts"].isna().all()
    assert (philly_20k.loc[~philly_20k["censored"], "end_ts"] <= log_end).all()


def test_tiers_deadlines_and_checkpoints(philly_20k):
    assert set(philly_20k["tier"]) == {"production", "debug", "sla", "research", "best_effort"}
    sla = philly_20k["tier"] == "sla"
    assert philly_20k.loc[sla, "deadline_ts"].notna().all() and philly_20k.loc[~sla, "deadline_ts"].isna().all()
    assert (philly_20k.loc[sla, "deadline_ts"] > philly_20k.loc[sla, "submit_ts"]).all()
    ckpt = philly_20k["checkpoint_interval_s"].notna()
    assert philly_20k.loc[ckpt, "true_duration_s"].median() > 5 * philly_20k.loc[~ckpt, "true_duration_s"].median()
    assert (philly_20k.loc[philly_20k["tier"] == "best_effort", "state"] == "PREEMPTED").any()


def test_families_recur_with_similar_durations_and_teams_are_skewed(philly_20k):
    sizes = philly_20k.groupby("family").size()
    assert (sizes >= 10).sum() > 100 and (sizes == 1).sum() > 1000  # recurring families and one-offs
    done = philly_20k[philly_20k["state"] == "COMPLETED"]
    within = np.log(done["duration_s"]).groupby(done["family"]).std().median()
    assert within < 0.5 * np.log(done["duration_s"]).std()
    teams = philly_20k["team"].value_counts(normalize=True)
    assert teams.iloc[0] > 3 / len(teams)  # a few heavy teams


def test_names_strip_to_their_family(philly_20k):
    recurring = philly_20k[philly_20k.groupby("family")["family"].transform("size") > 1]
    stripped = recurring["job_name"].str.replace(r"\d+", "", regex=True)
    assert (stripped.groupby(recurring["family"]).nunique() == 1).all()
    assert recurring["job_name"].str.contains(r"\d{4}-\d{2}-\d{2}-run\d+$").any()
    purity = recurring.groupby(stripped)["family"].agg(lambda f: f.value_counts(normalize=True).iloc[0])
    assert purity.mean() > 0.9


def test_model_descriptors_span_the_documented_ranges(philly_20k):
    assert philly_20k["model_params"].min() >= 100e6 and philly_20k["model_params"].max() <= 406e9
    assert set(philly_20k["finetune_method"]) == {"full", "lora", "qlora"}
    assert {"fp32", "bf16", "fp16"} <= set(philly_20k["precision"])
    assert set(philly_20k["optimizer"]) == {"adamw", "adamw_8bit", "sgd", "adafactor"}
    assert set(philly_20k["gpu_type"]) == set(GPU_SPECS)
    v100 = philly_20k["gpu_type"] == "V100"
    assert not philly_20k.loc[v100, "precision"].isin(["bf16", "fp8"]).any()
    assert philly_20k.loc[philly_20k["precision"] == "fp8", "gpu_type"].isin(["H100-80GB", "L40S"]).all()


def test_arrivals_follow_working_hours_and_weekdays(philly_20k):
    ts = pd.to_datetime(philly_20k["submit_ts"], unit="s", utc=True)
    by_hour = ts.dt.hour.value_counts().sort_index()
    assert by_hour.loc[13:17].mean() > 2 * by_hour.loc[1:5].mean()
    weekday = ts.dt.day_of_week
    per_day = ts.dt.floor("D").value_counts()
    weekend_days = per_day[per_day.index.day_of_week >= 5]
    weekdays = per_day[per_day.index.day_of_week < 5]
    assert weekend_days.mean() < 0.75 * weekdays.mean() and (weekday >= 5).any()
    assert (philly_20k["start_ts"].dropna() >= philly_20k.loc[philly_20k["start_ts"].notna(), "submit_ts"]).all()


def test_durations_are_heavy_tailed(philly_20k):
    d = philly_20k.loc[~philly_20k["censored"], "duration_s"]
    assert d.mean() / d.median() > 8


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_jobs": 0}, "n_jobs"),
    ({"n_jobs": 10, "seed": -1}, "seed"),
    ({"n_jobs": 10, "cluster_gpus": 0}, "cluster_gpus"),
    ({"n_jobs": 10, "cluster_gpus": 8, "target_load": 0.0}, "target_load"),
    ({"n_jobs": 10, "cluster_gpus": 8, "target_load": True}, "target_load"),
    ({"n_jobs": 10, "start_ts": float("nan")}, "start_ts"),
    ({"n_jobs": 10, "profile": "nope"}, "profile"),
], ids=["no-jobs", "negative-seed", "no-gpus", "zero-load", "bool-load", "nan-start", "unknown-profile"])
def test_bad_arguments_raise_input_error(kwargs, field):
    with pytest.raises(InputError, match=re.escape(field)):
        generate(**kwargs)


def test_tiny_tables_and_phase_callback():
    phases: list[str] = []
    df = generate(1, seed=0, on_phase=phases.append)
    assert len(df) == 1 and phases == ["families", "runs", "durations", "arrivals", "table"]
    assert len(validate(generate(7, seed=1, profile="helios")).rejects) == 0
