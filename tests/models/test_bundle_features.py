"""The history features, computed for all key kinds at once (``features.build._history_block``), equal the
per-kind computation they replaced, and training and serving still get the same features for a row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.build import COUNT_CAP, FEATURE_NAMES, JobFeatureBuilder, _history_block, _log
from features.history import KEY_KINDS, HistoryState, HistoryStore, ended_events, history_state


def per_kind_history_block(state: HistoryState, submit: np.ndarray, time_limit: np.ndarray) -> np.ndarray:
    """The previous implementation (one block of statistics per key kind), kept here as the oracle."""
    blocks = []
    log_limit = _log(time_limit)
    for kind in KEY_KINDS:
        def f(name: str, kind: str = kind) -> np.ndarray:
            return state.get(kind, name)

        n_ended, n_dur, n_ratio = f("n_ended"), f("n_dur"), f("n_ratio")
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(n_dur > 0, f("sum_logd") / n_dur, np.nan)
            var = np.where(n_dur > 1, f("sum_logd2") / n_dur - mean * mean, np.nan)
            mean_ratio = np.where(n_ratio > 0, f("sum_ratio") / n_ratio, np.nan)
            blocks.append(np.column_stack([
                np.minimum(n_ended, COUNT_CAP), mean, np.sqrt(np.maximum(var, 0.0)), f("median_logd"),
                f("last1_logd"), f("last2_logd"), np.where(n_ended > 0, f("n_fail") / n_ended, np.nan),
                np.where(n_ended > 0, np.log1p(f("gpu_hours") / n_ended), np.nan), mean_ratio, f("last_ratio"),
                np.where(n_ended > 0, np.log1p(np.maximum(submit - f("last_end_ts"), 0.0) / 3600.0), np.nan),
                log_limit - _log(f("last_limit_s")), log_limit + mean_ratio, log_limit + f("last_ratio"),
                np.where(n_dur > 0, f("n_short") / n_dur, np.nan),
                np.where(n_ratio > 0, f("n_at_limit") / n_ratio, np.nan),
                np.where(f("n_peak") > 0, f("sum_log_peak") / f("n_peak"), np.nan), f("last_log_peak"),
                _log(f("last_peak_gpus")), f("last_peak_log_tokens"),
            ]))
    return np.hstack(blocks)


@pytest.mark.parametrize("n", [0, 1, 2, 300])
def test_all_kinds_at_once_equals_per_kind(synth_jobs: pd.DataFrame, later_jobs: pd.DataFrame, n: int) -> None:
    jobs = later_jobs.head(n).reset_index(drop=True)
    for state in (history_state(jobs, ended_events(synth_jobs)), HistoryStore(synth_jobs).state_for(jobs)):
        submit = jobs["submit_ts"].to_numpy(dtype=float)
        limit = jobs["time_limit_s"].to_numpy(dtype=float)
        got = _history_block(state, submit, limit)
        want = per_kind_history_block(state, submit, limit)
        assert got.shape == want.shape == (n, len(KEY_KINDS) * 20)
        np.testing.assert_array_equal(got, want)  # same operations on the same numbers: bit for bit
    if n:
        assert np.isfinite(got).any()  # the later jobs share users and teams with the history


def test_training_and_serving_entry_points_give_the_same_features(synth_jobs: pd.DataFrame,
                                                                   later_jobs: pd.DataFrame) -> None:
    """A row's features from the training path (the table is its own point-in-time history) equal the
    serving path's (a store holding exactly the jobs that ended before the row was submitted)."""
    table = pd.concat([synth_jobs, later_jobs], ignore_index=True)
    builder = JobFeatureBuilder().fit(synth_jobs)
    batch = builder.transform(table)
    assert list(batch.columns) == list(FEATURE_NAMES)
    for i in (len(synth_jobs) - 1, len(synth_jobs) + 10, len(table) - 1):
        row = table.iloc[[i]]
        store = HistoryStore(table[table["end_ts"] < row["submit_ts"].iloc[0]])
        served = builder.transform(row, store)
        pd.testing.assert_frame_equal(served, batch.iloc[[i]])
