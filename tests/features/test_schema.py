import numpy as np
import pandas as pd
import pytest

from features.schema import COLUMNS, conform, empty_jobs, validate


def _row(**kw):
    base = {"job_id": "1", "user": "u", "submit_ts": 100.0, "start_ts": 110.0, "end_ts": 200.0, "state": "COMPLETED"}
    base.update(kw)
    return base


def test_empty_has_every_column():
    df = empty_jobs()
    assert tuple(df.columns) == COLUMNS
    assert df["censored"].dtype == bool


def test_duration_derived_from_times():
    res = validate(pd.DataFrame([_row()]))
    assert res.rejects.empty
    assert res.jobs.loc[0, "duration_s"] == 90.0
    assert not res.jobs.loc[0, "censored"]


def test_running_job_is_censored_with_lower_bound_and_no_end():
    rows = [_row(job_id="a", end_ts=500.0), _row(job_id="b", state="RUNNING", end_ts=np.nan)]
    res = validate(pd.DataFrame(rows))
    b = res.jobs.set_index("job_id").loc["b"]
    assert b["censored"]
    assert np.isnan(b["end_ts"])
    assert b["duration_s"] == 500.0 - 110.0


def test_pending_job_censored_without_duration():
    res = validate(pd.DataFrame([_row(state="PENDING", start_ts=np.nan, end_ts=np.nan)]))
    assert res.jobs.loc[0, "censored"] and np.isnan(res.jobs.loc[0, "duration_s"])


@pytest.mark.parametrize(
    "override, reason",
    [
        ({"job_id": None}, "missing job_id"),
        ({"submit_ts": "yesterday"}, "missing or unparseable submit time"),
        ({"state": "WEIRD"}, "unknown state"),
        ({"state": None}, "missing state"),
        ({"num_gpus": -1}, "negative num_gpus"),
        ({"time_limit_s": 0}, "non-positive time_limit_s"),
        ({"gpu_milli": 1500}, "gpu_milli outside 1..1000"),
        ({"start_ts": 50.0}, "start before submit"),
        ({"end_ts": 105.0}, "end before start"),
        ({"start_ts": np.nan}, "completed without a start time"),
        ({"duration_s": -3}, "negative duration_s"),
        ({"peak_vram_mib": -1}, "negative peak_vram_mib"),
        ({"placement_class": "moon"}, "unknown placement_class"),
        ({"finetune_method": "adapters"}, "unknown finetune_method"),
        ({"precision": "fp64x"}, "unknown precision"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_reject_reason(override, reason):
    res = validate(pd.DataFrame([_row(job_id="ok"), _row(**{"job_id": "bad", **override})]))
    assert list(res.jobs["job_id"]) == ["ok"]
    assert list(res.rejects["reject_reason"]) == [reason]


def test_duplicate_job_id_rejected_not_dropped():
    res = validate(pd.DataFrame([_row(), _row()]))
    assert len(res.jobs) == 1 and list(res.rejects["reject_reason"]) == ["duplicate job_id"]


def test_extra_columns_kept_and_blank_strings_are_null():
    df = conform(pd.DataFrame([{**_row(), "user": "  ", "my_extra": 7}]))
    assert df.columns[-1] == "my_extra" and df["user"].isna().all()
