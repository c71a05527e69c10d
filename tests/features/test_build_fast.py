"""``JobFeatureBuilder.transform_array`` (written block by block into one float32 array) and
``recent_runs_block`` (all key kinds at once) against the code they replaced, kept here as the
oracle: bit for bit on one row, many rows, no rows, missing values, users never seen, and on both
history paths (the batch ``history_state`` and the serving ``HistoryStore.state_for``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.build import CATEGORICAL_FEATURES, PRECISION_BYTES, JobFeatureBuilder, _history_block, _log
from features.history import (
    KEY_KINDS,
    HistoryState,
    HistoryStore,
    JobColumns,
    ended_events,
    history_state,
    object_column,
)
from features.history import numeric_column as _num
from features.recent_runs import recent_runs_block
from features.synth import generate


def old_recent_runs_block(state: HistoryState) -> np.ndarray:
    cols = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for kind in KEY_KINDS:
            n_dur = state.get(kind, "n_dur")
            mean_d = np.where(n_dur > 0, state.get(kind, "sum_d") / n_dur, np.nan)
            last2 = state.get(kind, "last2_d")
            cols += [
                np.log(np.where(mean_d > 0, np.maximum(mean_d, 1.0), np.nan)),
                np.log(np.where(last2 > 0, np.maximum(last2, 1.0), np.nan)),
                state.get(kind, "recent_logd"),
                state.get(kind, "recent_q10_logd"),
                state.get(kind, "recent_q90_logd"),
            ]
    return np.column_stack(cols)


def old_transform_array(
    builder: JobFeatureBuilder, jobs: pd.DataFrame | JobColumns, state: HistoryState
) -> np.ndarray:
    n = len(jobs)
    submit = _num(jobs, "submit_ts")
    gpus = _num(jobs, "num_gpus")
    share = _num(jobs, "gpu_milli") / 1000.0
    limit = _num(jobs, "time_limit_s")
    batch, seq = _num(jobs, "batch_size"), _num(jobs, "seq_len")
    precision = object_column(jobs, "precision")
    request = np.column_stack(
        [
            gpus,
            share,
            gpus * np.where(np.isfinite(share), share, 1.0),
            _num(jobs, "num_nodes"),
            _num(jobs, "cpus"),
            _log(_num(jobs, "mem_mib")),
            _log(limit),
            np.isfinite(limit) & (limit > 0),
            _log(_num(jobs, "checkpoint_interval_s")),
            np.isfinite(_num(jobs, "deadline_ts")),
        ]
    )
    workload = np.column_stack(
        [
            _log(_num(jobs, "model_params")),
            np.fromiter(
                (PRECISION_BYTES.get(p, np.nan) if isinstance(p, str) else np.nan for p in precision),
                "float64",
                n,
            ),
            _log(batch),
            _log(seq),
            _log(batch * seq),
        ]
    )
    seconds = np.mod(submit, 86400.0)
    days = np.floor(submit / 86400.0)
    weekday = np.mod(days + 3.0, 7.0)
    calendar = np.column_stack([seconds / 3600.0, weekday, weekday >= 5])
    cats = np.column_stack(
        [builder.vocabularies_[f].encode(object_column(jobs, c)) for f, c in CATEGORICAL_FEATURES.items()]
    )
    hist = _history_block(state, submit, limit)
    return np.hstack([request, workload, calendar, cats, hist, old_recent_runs_block(state)]).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def history() -> pd.DataFrame:
    return generate(3_000, seed=21)


@pytest.fixture(scope="module")
def queries(history: pd.DataFrame) -> pd.DataFrame:
    jobs = generate(400, seed=22, start_ts=float(history["submit_ts"].max()) + 60.0)
    rng = np.random.default_rng(4)
    for col in (
        "time_limit_s",
        "model_params",
        "batch_size",
        "seq_len",
        "num_gpus",
        "gpu_milli",
        "mem_mib",
        "cpus",
    ):
        jobs.loc[rng.random(len(jobs)) < 0.2, col] = np.nan
    jobs.loc[rng.random(len(jobs)) < 0.1, "time_limit_s"] = 0.0
    jobs.loc[rng.random(len(jobs)) < 0.1, "batch_size"] = -1.0
    for col in ("precision", "gpu_type", "queue", "optimizer", "team"):
        jobs.loc[rng.random(len(jobs)) < 0.2, col] = None
    jobs.loc[rng.random(len(jobs)) < 0.2, "precision"] = "fp99"  # not a known precision
    unseen = rng.random(len(jobs)) < 0.25
    jobs.loc[unseen, "user"] = [f"never-seen-{i}" for i in range(int(unseen.sum()))]
    return jobs.reset_index(drop=True)


@pytest.mark.parametrize("rows", [slice(0, 0), slice(0, 1), slice(3, 4), slice(0, 100), slice(0, 400)])
def test_transform_array_equals_the_replaced_code(
    history: pd.DataFrame, queries: pd.DataFrame, rows: slice
) -> None:
    builder = JobFeatureBuilder().fit(history)
    jobs = queries.iloc[rows].reset_index(drop=True)
    store = HistoryStore(history)
    for state in (store.state_for(jobs), history_state(jobs, ended_events(history))):
        for view in (jobs, JobColumns(jobs)):
            got = builder.transform_array(view, state)
            want = old_transform_array(builder, jobs, state)
            assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    if len(jobs) > 50:
        assert np.isnan(got).any() and np.isfinite(got[:, -20:]).any()  # both missing and known history


def test_recent_runs_equal_the_replaced_code(history: pd.DataFrame, queries: pd.DataFrame) -> None:
    state = HistoryStore(history).state_for(queries)
    np.testing.assert_array_equal(recent_runs_block(state), old_recent_runs_block(state))
    plain = HistoryState(
        {k: np.ascontiguousarray(v) for k, v in state.values.items()}
    )  # no block: stacked here
    assert plain.block is None
    np.testing.assert_array_equal(recent_runs_block(plain), old_recent_runs_block(state))


def test_store_state_is_one_block_with_views_per_kind(history: pd.DataFrame, queries: pd.DataFrame) -> None:
    state = HistoryStore(history).state_for(queries.head(7))
    S = state.stacked()
    assert S is state.block and S.shape == (7, len(KEY_KINDS), state.values["user"].shape[1])
    for k, kind in enumerate(KEY_KINDS):
        np.testing.assert_array_equal(state.values[kind], S[:, k, :])
    state.values["user"] = state.values["user"].copy()  # replaced: the block no longer describes the state
    assert state.stacked() is not state.block


def test_category_lookup_on_odd_values() -> None:
    from features.build import _Vocabulary

    vocab = _Vocabulary({"a": 0, "b": 1, "None": 2})
    plain = np.array(["a", None, "b", "zz", "None"], dtype=object)
    odd = np.array(["a", np.str_("b"), 3, np.nan, None, b"a", ("a",)], dtype=object)
    np.testing.assert_array_equal(vocab.encode(plain), [0.0, np.nan, 1.0, np.nan, 2.0])
    np.testing.assert_array_equal(vocab.encode(odd), [0.0, 1.0, np.nan, np.nan, np.nan, np.nan, np.nan])
    assert vocab.encode(np.array([], dtype=object)).shape == (0,)


def test_state_for_with_odd_keys_equals_lookup_per_job(history: pd.DataFrame, queries: pd.DataFrame) -> None:
    """Keys that are not all strings or None take the per-job lookup; both give what it gives."""
    from features.history import history_keys
    from features.history_state import _EMPTY_STATE

    store = HistoryStore(history)
    jobs = queries.head(30).copy()
    plain = store.state_for(jobs)
    jobs["user"] = jobs["user"].astype(object)
    jobs.loc[[1, 2], "user"] = [7, np.nan]
    odd = store.state_for(jobs)
    keys = history_keys(jobs)
    for kind in KEY_KINDS:
        table = store._state[kind]
        want = np.array(
            [table.get(key, _EMPTY_STATE) if isinstance(key, str) else _EMPTY_STATE for key in keys[kind]]
        )
        np.testing.assert_array_equal(odd.values[kind], want)
    np.testing.assert_array_equal(plain.values["team"], odd.values["team"])


def test_transform_array_with_odd_category_values(history: pd.DataFrame, queries: pd.DataFrame) -> None:
    builder = JobFeatureBuilder().fit(history)
    jobs = queries.head(20).copy()
    jobs["queue"] = jobs["queue"].astype(object)
    jobs.loc[[0, 3], "queue"] = [5, np.str_(str(jobs["queue"].iloc[1]))]
    state = HistoryStore(history).state_for(jobs)
    np.testing.assert_array_equal(
        builder.transform_array(jobs, state), old_transform_array(builder, jobs, state)
    )
