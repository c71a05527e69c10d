"""The train | tune | validate split by submit time."""

from __future__ import annotations

import numpy as np
import pytest

from features.errors import InputError
from features.schema import validate
from features.synth import generate
from predictor.capacity.inventory import homogeneous_inventory
from predictor.tune.windows import split_windows


@pytest.fixture(scope="module")
def history():
    return validate(generate(300, seed=5, cluster_gpus=16, target_load=0.9)).jobs


def test_the_three_parts_follow_submit_time_and_the_split_is_printed(history):
    split, tune, val = split_windows(history, homogeneous_inventory(16), train_fraction=0.3, validate_fraction=0.3)
    ordered = history.sort_values("submit_ts", kind="stable")
    assert split.jobs_in_input == 300 and split.training_jobs == 90
    assert split.tune_jobs + split.validate_jobs == 210 and split.validate_jobs == 90
    assert tune.last_submit_ts < split.validate_start_ts <= val.first_submit_ts
    assert split.tune_start_ts == ordered["submit_ts"].iloc[90]
    assert set(val.jobs.job_ids) == set(ordered["job_id"].iloc[210:].astype(str))
    # the predictor is fit once, on training jobs that ended before the tuning window
    assert [f["train_jobs"] for f in split.trained_models] == [split.training_jobs_ended]
    text = "\n".join(split.describe())
    for word in ("train     90 jobs", "tune      120 jobs", "validate  90 jobs", "never seen by a trial"):
        assert word in text
    for w in (tune, val):  # predictions are row-aligned with the window's jobs
        assert np.array_equal(w.predictions["oracle"].p50_s, w.jobs.work_s)
        assert len(w.predictions["trained"]) == len(w.jobs) and np.isfinite(w.predictions["trained"].p50_s).all()


def test_what_a_trial_replays_does_not_depend_on_the_validation_window(history):
    inv = homogeneous_inventory(16)
    _, tune, val = split_windows(history, inv)
    changed = history.copy()
    late = changed["submit_ts"] >= changed["submit_ts"].sort_values().iloc[210]
    changed.loc[late, "duration_s"] *= 10
    changed.loc[late, "true_duration_s"] *= 10
    _, tune2, val2 = split_windows(changed, inv)
    assert np.array_equal(tune.jobs.job_ids, tune2.jobs.job_ids) and np.array_equal(tune.jobs.work_s, tune2.jobs.work_s)
    for kind in ("trained", "oracle"):
        assert np.array_equal(tune.predictions[kind].p50_s, tune2.predictions[kind].p50_s)
    assert np.allclose(val2.jobs.work_s, 10 * val.jobs.work_s)  # the change did reach the validation window


@pytest.mark.parametrize("train, val, message", [
    (0.5, 0.5, "leave no tuning window"),
    (0.3, 0.0, "--validate-fraction must be in"),
    (1.0, 0.2, "--train-fraction must be in"),
])
def test_fractions_that_leave_no_window_are_one_line_errors(history, train, val, message):
    with pytest.raises(InputError, match=message):
        split_windows(history, homogeneous_inventory(16), train_fraction=train, validate_fraction=val)
