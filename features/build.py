"""Point-in-time features for every model: request, workload, calendar and history features.

``JobFeatureBuilder`` is a scikit-learn style transformer. ``fit`` learns the category vocabularies
(queue, GPU type, tier, precision, optimizer, fine-tuning method); ``transform(jobs, history=None)``
returns one row of features per job:

* ``history=None`` (training, evaluation, replay): the table is its own history, point in time
  (``features.history.history_state``: only jobs that ended before each job's submit time);
* ``history=<HistoryStore>`` (serving): history as of now from the store;
* ``history=<events DataFrame>``: point in time against a given set of ended jobs (evaluation of a
  saved model on new data: the model's history snapshot plus the new table).

All three go through ``history_state``/``HistoryStore.state_for`` -> the same ``_history_block``,
so training and serving cannot drift apart. Bump ``FEATURE_PIPELINE_VERSION`` whenever a feature's
definition changes; saved models record it and refuse a mismatch.

Features (``FEATURE_NAMES``)
    request: GPUs, GPU share, total GPU, nodes, CPUs, log host memory, log time limit (and whether
    there is one), log checkpoint interval, whether there is a deadline; workload: log parameters,
    bytes per parameter of the precision, log batch, log sequence, log tokens per step; calendar:
    UTC hour of day, weekday, weekend; categories (see ``CATEGORICAL_FEATURES``); history, for each
    key kind (user, team, family, request signature; ``features.history``): ended-job count (capped
    at ``COUNT_CAP``), mean / std / recent median / last / last-2 of log duration, failure rate, log
    GPU-hours per job, mean and last log(duration / limit), log hours since the last end, log(limit
    / last limit), the limit scaled by the mean and the last ratio, share of short runs, share that
    hit the limit, mean and last log peak GPU memory per GPU (with log GPUs and log batch x sequence of that job);
    recent runs (``features.recent_runs``, last in the row): per key kind the duration baselines
    (log mean and log last-2 run time) and the recency-weighted mean and empirical 10 % / 90 %
    quantiles of the latest runs. User identity is not a feature: who the user is enters through their history,
    which keeps the model valid as users come and go.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
import pandas as pd

from features.errors import InputError
from features.history import (
    KEY_KINDS,
    STATE_FIELDS,
    HistoryState,
    HistoryStore,
    JobColumns,
    ended_events,
    history_state,
    merge_events,
    numeric_column,
    object_column,
)
from features.recent_runs import RECENT_FEATURES, recent_runs_from

__all__ = [
    "FEATURE_PIPELINE_VERSION",
    "CATEGORICAL_FEATURES",
    "FEATURE_NAMES",
    "PRECISION_BYTES",
    "JobFeatureBuilder",
    "build_features",
    "features_for",
    "history_with",
]

FEATURE_PIPELINE_VERSION = "1.5"

#: Bytes per parameter of each training precision (weights as stored during training).
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}

#: Categorical features (codes from the fitted vocabulary; unknown -> NaN, which LightGBM treats as
#: missing) and the canonical column each comes from.
CATEGORICAL_FEATURES: dict[str, str] = {
    "cat_queue": "queue",
    "cat_gpu_type": "gpu_type",
    "cat_tier": "tier",
    "cat_precision": "precision",
    "cat_optimizer": "optimizer",
    "cat_finetune": "finetune_method",
}
#: History counts are capped: enough to say how much evidence there is, too little to act as a clock
#: (a cumulative count keeps growing, and trees would learn "after N jobs" as a stand-in for the date).
COUNT_CAP = 20

_REQUEST = (
    "num_gpus", "gpu_share", "gpu_total", "num_nodes", "cpus", "log_mem_mib", "log_time_limit_s",
    "has_time_limit", "log_checkpoint_interval_s", "has_deadline",
)
_WORKLOAD = ("log_model_params", "precision_bytes", "log_batch_size", "log_seq_len", "log_tokens_per_step")
_CALENDAR = ("hour_utc", "weekday", "weekend")
_HISTORY_STATS = (
    "n", "mean_logd", "std_logd", "median_logd", "last1_logd", "last2_logd", "fail_rate",
    "log_gpu_hours_per_job", "mean_ratio", "last_ratio", "log_hours_since_last_end", "limit_vs_last",
    "ratio_estimate", "last_ratio_estimate", "short_rate", "limit_rate",
    "mean_log_peak", "last_log_peak", "log_last_peak_gpus", "last_peak_log_tokens",
)
_HISTORY = tuple(f"{kind}_{stat}" for kind in KEY_KINDS for stat in _HISTORY_STATS)

#: Every feature, in the column order of ``transform``'s output.
FEATURE_NAMES: tuple[str, ...] = (*_REQUEST, *_WORKLOAD, *_CALENDAR, *CATEGORICAL_FEATURES, *_HISTORY, *RECENT_FEATURES)


_num = numeric_column
_STATE_INDEX = {name: i for i, name in enumerate(STATE_FIELDS)}


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.nan)


_RATIO_NUM = np.array([_STATE_INDEX[f] for f in ("sum_logd", "n_fail", "sum_ratio", "n_short", "n_at_limit", "sum_log_peak")])
_RATIO_DEN = np.array([_STATE_INDEX[f] for f in ("n_dur", "n_ended", "n_ratio", "n_dur", "n_ratio", "n_peak")])
#: Where each of those ratios goes among ``_HISTORY_STATS``.
_RATIO_AT = np.array([_HISTORY_STATS.index(f) for f in ("mean_logd", "fail_rate", "mean_ratio", "short_rate",
                                                          "limit_rate", "mean_log_peak")])
_COPIED = ("median_logd", "last1_logd", "last2_logd", "last_ratio", "last_log_peak", "last_peak_log_tokens")
_COPY_FROM = np.array([_STATE_INDEX[f] for f in _COPIED])
_COPY_AT = np.array([_HISTORY_STATS.index(f) for f in _COPIED])
_LOGGED_STATE = np.array([_STATE_INDEX["last_limit_s"], _STATE_INDEX["last_peak_gpus"]])
#: The statistics computed one by one.
_N, _STD, _GPU_HOURS, _SINCE, _LIMIT_VS_LAST, _RATIO_ESTIMATE, _LAST_RATIO_ESTIMATE, _PEAK_GPUS = (
    _HISTORY_STATS.index(f) for f in ("n", "std_logd", "log_gpu_hours_per_job", "log_hours_since_last_end",
                                      "limit_vs_last", "ratio_estimate", "last_ratio_estimate", "log_last_peak_gpus"))


def _history_block(state: HistoryState, submit: np.ndarray, time_limit: np.ndarray) -> np.ndarray:
    """History features (columns ``_HISTORY``) from a history state; shared by batch and serving."""
    return _history_from(state.stacked(), submit, _log(time_limit))


def _history_from(S: np.ndarray, submit: np.ndarray, log_limit: np.ndarray) -> np.ndarray:
    """``_history_block`` from ``HistoryState.stacked()`` (jobs, kinds, fields) and ``_log(time_limit)``.

    All key kinds and alike statistics at once (the six count ratios are one division, the copied
    fields one gather): a serving request scores a few rows, where the number of numpy calls is the
    cost.
    """
    n = len(submit)
    out = np.empty((n, len(KEY_KINDS), len(_HISTORY_STATS)))

    def f(name: str) -> np.ndarray:
        return S[:, :, _STATE_INDEX[name]]

    log_limit = log_limit[:, None]
    n_ended, n_dur = f("n_ended"), f("n_dur")
    with np.errstate(divide="ignore", invalid="ignore"):
        den = S[:, :, _RATIO_DEN]
        ratios = np.where(den > 0, S[:, :, _RATIO_NUM] / den, np.nan)
        out[:, :, _RATIO_AT] = ratios
        mean, mean_ratio = ratios[:, :, 0], ratios[:, :, 2]
        var = np.where(n_dur > 1, f("sum_logd2") / n_dur - mean * mean, np.nan)
        out[:, :, _COPY_AT] = S[:, :, _COPY_FROM]
        logged = _log(S[:, :, _LOGGED_STATE])
        out[:, :, _N] = np.minimum(n_ended, COUNT_CAP)
        out[:, :, _STD] = np.sqrt(np.maximum(var, 0.0))
        out[:, :, _GPU_HOURS] = np.where(n_ended > 0, np.log1p(f("gpu_hours") / n_ended), np.nan)
        out[:, :, _SINCE] = np.where(n_ended > 0, np.log1p(np.maximum(submit[:, None] - f("last_end_ts"), 0.0) / 3600.0),
                                     np.nan)
        out[:, :, _LIMIT_VS_LAST] = log_limit - logged[:, :, 0]
        out[:, :, _RATIO_ESTIMATE] = log_limit + mean_ratio
        out[:, :, _LAST_RATIO_ESTIMATE] = log_limit + f("last_ratio")
        out[:, :, _PEAK_GPUS] = logged[:, :, 1]
    # (jobs, kinds, stats) -> (jobs, kinds x stats): kind-major columns, as ``_HISTORY`` lists them
    return out.reshape(n, len(KEY_KINDS) * len(_HISTORY_STATS))



@dataclass
class _Vocabulary:
    """Category -> code for one categorical column."""

    codes: dict[str, int]

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Codes for an object array of categories (NaN for unknown or null)."""
        return _lookup(self.codes, values)


_PLAIN = frozenset({str, type(None)})


def _lookup_many(tables: list[dict[str, float]], columns: list[np.ndarray], n: int) -> np.ndarray:
    """``_lookup`` of each column in its table, shape (len(columns), n), in one pass when every value
    is a ``str`` or None."""
    if all(_PLAIN.issuperset(map(type, values)) for values in columns):
        found = chain.from_iterable(
            map(t.get, values, repeat(np.nan, n)) for t, values in zip(tables, columns, strict=True)
        )
        return np.fromiter(found, "float64", n * len(columns)).reshape(len(columns), n)
    return np.array([_lookup(t, values) for t, values in zip(tables, columns, strict=True)]).reshape(len(columns), n)


def _lookup(table: dict[str, float], values: np.ndarray) -> np.ndarray:
    """``table[v]`` per value as float64, NaN where ``v`` is not a key or not a string. Values that are
    all ``str`` or None (what ``object_column`` gives) are looked up without a Python frame per value."""
    n = len(values)
    if _PLAIN.issuperset(map(type, values)):  # None is no key: NaN
        return np.fromiter(map(table.get, values, repeat(np.nan, n)), "float64", n)
    return np.fromiter((table.get(v, np.nan) if isinstance(v, str) else np.nan for v in values), "float64", n)


class JobFeatureBuilder:
    """Transformer from canonical job rows to the model feature matrix.

    Parameters
    ----------
    min_category_count : int, default 5
        Categories seen fewer times than this in ``fit`` are treated as unknown.

    Attributes
    ----------
    vocabularies_ : dict of str to _Vocabulary
        Fitted category codes per categorical feature.
    feature_names_out_ : tuple of str
        Output column names, ``FEATURE_NAMES``.
    version_ : str
        ``FEATURE_PIPELINE_VERSION`` at fit time.
    """

    def __init__(self, *, min_category_count: int = 5) -> None:
        self.min_category_count = min_category_count

    def fit(self, jobs: pd.DataFrame, y: object = None) -> JobFeatureBuilder:
        """Learn the category vocabularies from ``jobs`` (a canonical job table)."""
        _require(jobs, ("job_id", "submit_ts"))
        self.vocabularies_: dict[str, _Vocabulary] = {}
        for feature, col in CATEGORICAL_FEATURES.items():
            if col not in jobs.columns:
                self.vocabularies_[feature] = _Vocabulary({})
                continue
            counts = jobs[col].astype("string").value_counts()
            counts = counts[counts >= self.min_category_count]
            self.vocabularies_[feature] = _Vocabulary({str(k): i for i, k in enumerate(sorted(counts.index))})
        self.feature_names_out_ = FEATURE_NAMES
        self.version_ = FEATURE_PIPELINE_VERSION
        return self

    def get_feature_names_out(self) -> np.ndarray:
        return np.asarray(FEATURE_NAMES, dtype=object)

    def history_for(
        self, jobs: pd.DataFrame, history: HistoryStore | pd.DataFrame | None = None
    ) -> HistoryState:
        """The history state behind ``transform``'s history features (see the module docstring)."""
        if history is None:
            return history_state(jobs)
        if isinstance(history, HistoryStore):
            return history.state_for(jobs)
        return history_state(jobs, history)

    def transform(
        self,
        jobs: pd.DataFrame,
        history: HistoryStore | pd.DataFrame | None = None,
        *,
        state: HistoryState | None = None,
    ) -> pd.DataFrame:
        """Feature matrix for ``jobs``.

        Parameters
        ----------
        jobs : DataFrame of shape (n_jobs, n_columns)
            Canonical job rows (missing optional columns are treated as null).
        history : HistoryStore, DataFrame of ended events, or None
            Where history comes from (see the module docstring).
        state : HistoryState, optional
            A precomputed ``history_for(jobs, history)`` to reuse.

        Returns
        -------
        DataFrame of shape (n_jobs, len(FEATURE_NAMES))
            float32 features, index aligned with ``jobs``.
        """
        if not hasattr(self, "vocabularies_"):
            raise RuntimeError("JobFeatureBuilder is not fitted; call fit() first")
        if self.version_ != FEATURE_PIPELINE_VERSION:
            raise InputError(
                f"model was built with feature pipeline {self.version_}, this code is {FEATURE_PIPELINE_VERSION}; retrain"
            )
        _require(jobs, ("job_id", "submit_ts"))
        if state is None:
            state = self.history_for(jobs, history)
        return pd.DataFrame(self.transform_array(jobs, state), columns=list(FEATURE_NAMES), index=jobs.index)

    def transform_array(self, jobs: pd.DataFrame | JobColumns, state: HistoryState) -> np.ndarray:
        """``transform`` as a bare float32 array (the fast path used when scoring).

        Written block by block into one float32 array (the columns that take a log are one ``_log``
        over a stacked block): a few numpy calls per request instead of one or more per column; the
        values are the same as computing each column and casting the whole to float32."""
        n = len(jobs)
        submit = _num(jobs, "submit_ts")
        if np.isnan(submit).any():
            row = int(np.flatnonzero(np.isnan(submit))[0])
            raise InputError(f"job {object_column(jobs, 'job_id')[row]!s}: submit_ts is missing or not a number")
        raw = np.empty((len(_RAW) + 1, n))
        for i, col in enumerate(_RAW):
            raw[i] = _num(jobs, col)
        raw[_BATCH_X_SEQ] = raw[_RAW_AT["batch_size"]] * raw[_RAW_AT["seq_len"]]
        logs = _log(raw[_LOG_FROM])
        gpus, limit = raw[_RAW_AT["num_gpus"]], raw[_RAW_AT["time_limit_s"]]
        share = raw[_RAW_AT["gpu_milli"]] / 1000.0
        out = np.empty((n, len(FEATURE_NAMES)), dtype=np.float32)
        out[:, _LOG_AT] = logs.T
        out[:, _PLAIN_AT] = raw[_PLAIN_FROM].T
        out[:, _AT["gpu_share"]] = share
        out[:, _AT["gpu_total"]] = gpus * np.where(np.isfinite(share), share, 1.0)
        out[:, _AT["has_time_limit"]] = np.isfinite(limit) & (limit > 0)
        out[:, _AT["has_deadline"]] = np.isfinite(raw[_RAW_AT["deadline_ts"]])
        # the precision's bytes and the category codes: one lookup pass over the seven columns
        tables = [PRECISION_BYTES, *(self.vocabularies_[f].codes for f in CATEGORICAL_FEATURES)]
        values = [object_column(jobs, c) for c in _LOOKED_UP]
        out[:, _LOOKUP_AT] = _lookup_many(tables, values, n).T
        seconds = np.mod(submit, 86400.0)
        days = np.floor(submit / 86400.0)
        weekday = np.mod(days + 3.0, 7.0)  # 1970-01-01 was a Thursday: Monday = 0
        out[:, _AT["hour_utc"]] = seconds / 3600.0
        out[:, _AT["weekday"]] = weekday
        out[:, _AT["weekend"]] = weekday >= 5
        S = state.stacked()
        out[:, _HISTORY_AT] = _history_from(S, submit, logs[_RAW_AT["time_limit_s"]])
        out[:, _RECENT_AT] = recent_runs_from(S)
        return out


#: Numeric job columns ``transform_array`` reads (a row each of one block, batch x sequence after
#: them); which of them are features after a log (``_LOG_FROM`` -> ``_LOG_AT``) and which as they are.
_RAW = ("mem_mib", "time_limit_s", "checkpoint_interval_s", "model_params", "batch_size", "seq_len",
        "num_gpus", "num_nodes", "cpus", "gpu_milli", "deadline_ts")
_RAW_AT = {c: i for i, c in enumerate(_RAW)}
_BATCH_X_SEQ = len(_RAW)
_AT = {name: i for i, name in enumerate(FEATURE_NAMES)}
_LOGGED = {"log_mem_mib": "mem_mib", "log_time_limit_s": "time_limit_s", "log_checkpoint_interval_s":
           "checkpoint_interval_s", "log_model_params": "model_params", "log_batch_size": "batch_size",
           "log_seq_len": "seq_len"}
_LOG_FROM = np.array([_RAW_AT[c] for c in _LOGGED.values()] + [_BATCH_X_SEQ])
_LOG_AT = np.array([_AT[f] for f in _LOGGED] + [_AT["log_tokens_per_step"]])
_PLAIN_FROM = np.array([_RAW_AT[c] for c in ("num_gpus", "num_nodes", "cpus")])
_PLAIN_AT = np.array([_AT[f] for f in ("num_gpus", "num_nodes", "cpus")])
#: Looked-up columns (the precision's bytes, then the categories) and their feature columns.
_LOOKED_UP = ("precision", *CATEGORICAL_FEATURES.values())
_LOOKUP_AT = np.array([_AT["precision_bytes"], *(_AT[f] for f in CATEGORICAL_FEATURES)])
_HISTORY_AT = slice(_AT[_HISTORY[0]], _AT[_HISTORY[-1]] + 1)
_RECENT_AT = slice(_AT[RECENT_FEATURES[0]], _AT[RECENT_FEATURES[-1]] + 1)


def _require(jobs: pd.DataFrame, cols: tuple[str, ...]) -> None:
    missing = [c for c in cols if c not in jobs.columns]
    if missing:
        raise InputError(f"job table lacks required column(s): {', '.join(missing)}")


def build_features(jobs: pd.DataFrame, builder: JobFeatureBuilder | None = None) -> pd.DataFrame:
    """Point-in-time features for a whole table (training path); fits a builder when none is given."""
    builder = builder if builder is not None else JobFeatureBuilder().fit(jobs)
    return builder.transform(jobs)


def features_for(
    jobs: pd.DataFrame, history: HistoryStore, builder: JobFeatureBuilder | None = None
) -> pd.DataFrame:
    """Features for incoming jobs against a ``HistoryStore`` (serving path).

    Without a fitted ``builder`` the categorical features are all unknown (NaN); pass the model's
    builder to get the same features the model was trained on.
    """
    if builder is None:
        builder = JobFeatureBuilder().fit(jobs.iloc[:0])
    return builder.transform(jobs, history)


def history_with(base: HistoryStore | pd.DataFrame | None, jobs: pd.DataFrame) -> pd.DataFrame:
    """Ended events of ``base`` (a store's snapshot or an events table) plus those in ``jobs``."""
    parts: list[pd.DataFrame] = [ended_events(jobs)]  # the new table wins over an older snapshot
    if isinstance(base, HistoryStore):
        parts.append(base.events)
    elif isinstance(base, pd.DataFrame):
        parts.append(base)
    return merge_events(parts)
