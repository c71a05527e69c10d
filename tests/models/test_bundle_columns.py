"""``predict_columns`` (the serving path: arrays in, arrays out) gives exactly ``predict_frame``'s table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.history import HistoryStore, numeric_column, object_column
from features.schema import FLOAT_COLUMNS, STRING_COLUMNS, conform
from models.bundle import JobPredictorBundle, columns_frame
from models.fallback import FallbackPredictor
from models.prediction import PREDICTION_COLUMNS

NOW = 1.9e9


def typed_columns(jobs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The jobs as the serving layer hands them over: float64 with NaN, object strings with None."""
    cols = {c: numeric_column(jobs, c) for c in FLOAT_COLUMNS}
    cols.update({c: object_column(jobs, c) for c in STRING_COLUMNS})
    return cols


def requests(later_jobs: pd.DataFrame, n: int) -> pd.DataFrame:
    """Incoming requests: no outcome fields, fresh index."""
    keep = [c for c in later_jobs.columns if c not in ("end_ts", "start_ts", "duration_s", "state", "peak_vram_mib")]
    return conform(later_jobs[keep].head(n).reset_index(drop=True))


@pytest.mark.parametrize("n", [1, 7, 120])
def test_columns_path_equals_frame_path(bundle: JobPredictorBundle, synth_jobs: pd.DataFrame,
                                        later_jobs: pd.DataFrame, n: int) -> None:
    jobs = requests(later_jobs, n)
    store = HistoryStore(synth_jobs)
    want = bundle.predict_frame(jobs, store, NOW)
    got = bundle.predict_columns(jobs, store, NOW, columns=typed_columns(jobs))
    assert tuple(got) == PREDICTION_COLUMNS
    assert all(isinstance(v, np.ndarray) and len(v) == n for v in got.values())
    pd.testing.assert_frame_equal(columns_frame(got), want)
    pd.testing.assert_frame_equal(columns_frame(bundle.predict_columns(jobs, store, NOW)), want)


def test_missing_submit_time_is_now_on_both_paths(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    jobs = requests(later_jobs, 5)
    jobs.loc[[1, 3], "submit_ts"] = np.nan
    cols = typed_columns(jobs)
    assert np.isnan(cols["submit_ts"]).sum() == 2
    want = bundle.predict_frame(jobs, None, NOW)
    pd.testing.assert_frame_equal(columns_frame(bundle.predict_columns(jobs, None, NOW, columns=cols)), want)
    filled = jobs.assign(submit_ts=jobs["submit_ts"].fillna(NOW))
    pd.testing.assert_frame_equal(bundle.predict_frame(filled, None, NOW), want)


def test_the_arrays_are_what_is_read(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    """Given arrays win over the frame (the frame is not read again column by column)."""
    jobs = requests(later_jobs, 3).assign(time_limit_s=1e7)
    cols = typed_columns(jobs)
    cols["time_limit_s"] = np.full(3, 120.0)
    got = bundle.predict_columns(jobs, None, NOW, columns=cols)
    assert np.all(got["duration_p90_s"] <= 120.0)
    assert np.any(bundle.predict_frame(jobs, None, NOW)["duration_p90_s"].to_numpy() > 120.0)


def test_fallback_columns_equal_its_frame(synth_jobs: pd.DataFrame, later_jobs: pd.DataFrame) -> None:
    jobs = requests(later_jobs, 40)
    store = HistoryStore(synth_jobs)
    fb = FallbackPredictor()
    got = fb.predict_columns(jobs, store, NOW, columns=typed_columns(jobs))
    pd.testing.assert_frame_equal(columns_frame(got), fb.predict_frame(jobs, store, NOW))
    assert got["fallback"].all() and set(got["model_version"]) == {"fallback"}


@pytest.mark.parametrize("n", [1, 120])
def test_columns_without_a_frame_equal_the_frame_path(bundle: JobPredictorBundle, synth_jobs: pd.DataFrame,
                                                      later_jobs: pd.DataFrame, n: int) -> None:
    """The serving path passes no table (``jobs=None``): the same predictions, and no frame built."""
    jobs = requests(later_jobs, n)
    store = HistoryStore(synth_jobs)
    cols = typed_columns(jobs)
    want = bundle.predict_frame(jobs, store, NOW)  # builds the store's history state (frames of its own)
    built: list[str] = []

    class Watched(pd.DataFrame):  # counts the frames the no-table path makes (it should make none)
        def __init__(self, *args, **kwargs) -> None:
            built.append(repr(args)[:80])
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pd, "DataFrame", Watched)
        got = bundle.predict_columns(None, store, NOW, columns=cols)
    assert built == []
    pd.testing.assert_frame_equal(columns_frame(got), want)
    fb = FallbackPredictor()
    pd.testing.assert_frame_equal(columns_frame(fb.predict_columns(None, store, NOW, columns=cols)),
                                  fb.predict_frame(jobs, store, NOW))


def test_without_a_frame_a_missing_column_is_read_from_one_made_of_the_arrays(
        bundle: JobPredictorBundle, synth_jobs: pd.DataFrame, later_jobs: pd.DataFrame) -> None:
    """Arrays that lack a column or hold it with another type: a frame is built from them, once."""
    jobs = requests(later_jobs, 4)
    cols = typed_columns(jobs)
    cols["num_gpus"] = cols["num_gpus"].astype(np.int64)  # another dtype: read through the frame
    del cols["lora_rank"]
    got = bundle.predict_columns(None, HistoryStore(synth_jobs), NOW, columns=cols)
    pd.testing.assert_frame_equal(columns_frame(got), bundle.predict_frame(jobs, HistoryStore(synth_jobs), NOW))


def test_without_a_frame_missing_submit_times_are_now(bundle: JobPredictorBundle, later_jobs: pd.DataFrame) -> None:
    jobs = requests(later_jobs, 3)
    jobs.loc[[0, 2], "submit_ts"] = np.nan
    got = bundle.predict_columns(None, None, NOW, columns=typed_columns(jobs))
    pd.testing.assert_frame_equal(columns_frame(got), bundle.predict_frame(jobs, None, NOW))
