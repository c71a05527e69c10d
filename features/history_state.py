"""Point-in-time history statistics: what the batch path computes (see ``features.history``).

Per key (user, team, job family, request signature), the statistics after each ended job, from
grouped cumulative sums over events sorted by ``(key, end_ts, job_id)`` and a window of the last
``WINDOW`` durations (``LONG_WINDOW`` for the recent-runs statistics); each query job finds its state with one binary search on an integer
``(key, end-time rank)`` code. ``HistoryStore`` (serving) seeds itself from the same arrays.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from features.job_keys import family_keys, numeric_column, object_column, request_keys
from features.schema import empty_jobs

__all__ = [
    "KEY_KINDS",
    "STATE_FIELDS",
    "WINDOW",
    "LONG_WINDOW",
    "RECENT_DECAY",
    "FAILURE_STATES",
    "window_summary",
    "HistoryState",
    "family_keys",
    "request_keys",
    "SHORT_RUN_S",
    "AT_LIMIT_SHARE",
    "object_column",
    "numeric_column",
    "history_keys",
    "ended_events",
    "history_state",
    "merge_events",
]

#: Key kinds history is kept for: the submitting user, the team, the job family, and the user's
#: request signature (same user asking for the same time limit, GPUs and CPUs: the same script
#: resubmitted, which is how recurring jobs show up in logs without job names, e.g. SWF).
KEY_KINDS: tuple[str, ...] = ("user", "team", "family", "request")
#: How many of the most recent ended jobs per key are kept for last-1 / last-2 / recent median.
WINDOW = 5
#: How many of the most recent ended jobs per key the recent-runs statistics (recency-weighted mean,
#: empirical 10 % / 90 % quantiles of log duration) look at.
LONG_WINDOW = 20
#: Weight of the j-th most recent run (j = 0 newest) in the recency-weighted mean: RECENT_DECAY ** j.
RECENT_DECAY = 0.75
#: Ended states counted as failures in the failure rate.
FAILURE_STATES: frozenset[str] = frozenset({"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT"})

#: Per-key statistics, each a float (NaN where undefined), in this order.
STATE_FIELDS: tuple[str, ...] = (
    "n_ended",  # ended jobs (started or not)
    "n_dur",  # ended jobs with a known duration
    "sum_logd",  # sum of log(max(duration_s, 1))
    "sum_logd2",  # sum of squares of the above
    "sum_d",  # sum of duration_s
    "n_fail",  # ended in a FAILURE_STATES state
    "gpu_hours",  # sum of num_gpus * gpu share * duration / 3600
    "n_ratio",  # jobs with a known duration and time limit
    "sum_ratio",  # sum of log(duration / time_limit)
    "n_short",  # jobs that ran SHORT_RUN_S or less (crashed at start-up, trial runs)
    "n_at_limit",  # jobs that ran AT_LIMIT_SHARE of their time limit or more
    "n_peak",  # jobs with a measured peak GPU memory
    "sum_log_peak",  # sum of log(peak_vram_mib)
    "last_end_ts",  # end time of the latest ended job
    "last1_logd",  # log duration of the latest job with a duration
    "last2_logd",  # mean log duration of the latest two
    "last2_d",  # arithmetic mean duration (s) of the latest two (Tsafrir's user estimate)
    "median_logd",  # median log duration of the latest WINDOW
    "last_ratio",  # log(duration / time_limit) of the latest job that has both
    "last_limit_s",  # time limit of the latest job that has one
    "last_log_peak",  # log(peak_vram_mib) of the latest job that has one
    "last_peak_gpus",  # GPUs of that job (per-GPU peaks change with sharding)
    "last_peak_log_tokens",  # log(batch x sequence) of that job (activations scale with it)
    "recent_logd",  # recency-weighted mean log duration of the latest LONG_WINDOW (RECENT_DECAY ** age)
    "recent_q10_logd",  # empirical 10 % quantile of log duration of the latest LONG_WINDOW
    "recent_q90_logd",  # empirical 90 % quantile of the same
)
_F = {name: i for i, name in enumerate(STATE_FIELDS)}
_N_SUMS = 13  # the leading fields are counts and sums (0 when empty); the rest are NaN when empty
_EMPTY_STATE = np.array([0.0] * _N_SUMS + [np.nan] * (len(STATE_FIELDS) - _N_SUMS), dtype="float64")
#: A run of at most this many seconds counts as short.
SHORT_RUN_S = 60.0
#: A run of at least this share of its time limit counts as having hit the limit.
AT_LIMIT_SHARE = 0.9

def history_keys(jobs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The key per job for each kind in ``KEY_KINDS`` (object arrays, None where unknown)."""
    users = object_column(jobs, "user")
    return {
        "user": users,
        "team": object_column(jobs, "team"),
        "family": family_keys(jobs, users),
        "request": request_keys(jobs, users),
    }


def ended_events(jobs: pd.DataFrame, keys: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """The jobs that count as history: ended (``end_ts`` known) and not censored.

    Returns one row per ended job with the columns history needs: ``job_id``, the three keys,
    ``end_ts``, ``duration_s``, ``logd``, ``failed``, ``gpu_hours``, ``log_ratio``, ``time_limit_s``,
    ``log_peak`` (log of the measured peak GPU memory per GPU), ``num_gpus`` and ``log_tokens``
    (log of batch x sequence length, the batch alone without a sequence).
    """
    ended = np.isfinite(numeric_column(jobs, "end_ts"))
    if "censored" in jobs.columns:
        ended &= ~jobs["censored"].fillna(False).to_numpy(dtype=bool)
    src = jobs.loc[ended]
    keys = history_keys(src) if keys is None else {k: v[ended] for k, v in keys.items()}
    dur = numeric_column(src, "duration_s")
    limit = numeric_column(src, "time_limit_s")
    share = numeric_column(src, "gpu_milli") / 1000.0
    share = np.where(np.isfinite(share), share, 1.0)
    gpus = np.nan_to_num(numeric_column(src, "num_gpus"), nan=0.0)
    peak = numeric_column(src, "peak_vram_mib")
    seq = numeric_column(src, "seq_len")
    with np.errstate(invalid="ignore", divide="ignore"):
        logd = np.log(np.maximum(dur, 1.0))
        log_ratio = np.where((limit > 0) & np.isfinite(dur), np.log(np.maximum(dur, 1.0) / limit), np.nan)
        log_peak = np.where(peak > 0, np.log(peak), np.nan)
    return pd.DataFrame(
        {
            "job_id": src["job_id"].astype("string").to_numpy(dtype=object),
            **{kind: keys[kind] for kind in KEY_KINDS},
            "end_ts": numeric_column(src, "end_ts"),
            "duration_s": dur,
            "logd": logd,
            "failed": np.isin(object_column(src, "state"), list(FAILURE_STATES)),
            "gpu_hours": np.nan_to_num(gpus * share * dur / 3600.0, nan=0.0),
            "log_ratio": log_ratio,
            "time_limit_s": limit,
            "log_peak": log_peak,
            "num_gpus": gpus,
            "log_tokens": np.log(numeric_column(src, "batch_size") * np.where(seq > 0, seq, 1.0)),
        }
    )


@dataclass
class HistoryState:
    """History statistics per query job: ``values[kind]`` has shape (n_jobs, len(STATE_FIELDS)).

    ``block``, when given, is the same statistics as one array (n_jobs, len(KEY_KINDS),
    len(STATE_FIELDS)) that the ``values`` are views of (``HistoryStore.state_for`` builds it so);
    ``stacked`` returns it instead of stacking again.
    """

    values: dict[str, np.ndarray]
    block: np.ndarray | None = field(default=None, repr=False, compare=False)

    def get(self, kind: str, name: str) -> np.ndarray:
        """One statistic (column of ``STATE_FIELDS``) for one key kind, shape (n_jobs,)."""
        return self.values[kind][:, _F[name]]

    def stacked(self) -> np.ndarray:
        """Every statistic of every key kind, shape (n_jobs, len(KEY_KINDS), len(STATE_FIELDS))."""
        block = self.block
        if block is not None:
            owner = block if block.base is None else block.base
            if all(self.values[kind].base is owner for kind in KEY_KINDS):
                return block
        return np.stack([self.values[kind] for kind in KEY_KINDS], axis=1)


# ---------------------------------------------------------------------------------------------
# batch path


def _row_quantile(lags: np.ndarray, q: float) -> np.ndarray:
    """Linear-interpolation quantile of the finite values of each row (NaN for an empty row)."""
    ordered = np.sort(lags, axis=1)  # NaN sorts last
    k = np.isfinite(lags).sum(axis=1)
    pos = np.maximum(k - 1, 0) * q
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
    rows = np.arange(len(lags))
    a, b = ordered[rows, lo], ordered[rows, hi]
    return np.where(k > 0, a + (b - a) * (pos - lo), np.nan)


def window_summary(lags: np.ndarray, lags_d: np.ndarray) -> np.ndarray:
    """The window statistics from the latest runs of each key, newest first.

    ``lags`` (n, LONG_WINDOW): log durations, column j the j-th most recent, NaN where the key has
    fewer runs; ``lags_d`` (n, 2): the two most recent durations in seconds. Returns (n, 7):
    last1, last2 (log), last2 (s), median of the latest WINDOW, recency-weighted mean, 10 % and
    90 % quantiles of the latest LONG_WINDOW. The batch path and ``HistoryStore`` both call it (one
    row at a time there), so the two agree bit for bit.
    """
    n = len(lags)
    out = np.empty((n, 7))
    out[:, 0] = lags[:, 0]
    out[:, 1] = np.where(np.isnan(lags[:, 1]), lags[:, 0], (lags[:, 0] + lags[:, 1]) / 2.0)
    out[:, 2] = np.where(np.isnan(lags_d[:, 1]), lags_d[:, 0], (lags_d[:, 0] + lags_d[:, 1]) / 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN
        out[:, 3] = np.nanmedian(lags[:, :WINDOW], axis=1) if n else np.empty(0)
    num, den = np.zeros(n), np.zeros(n)
    for j in range(lags.shape[1]):  # one column at a time: the same additions in the same order for any n
        ok = np.isfinite(lags[:, j])
        num += np.where(ok, lags[:, j], 0.0) * RECENT_DECAY**j
        den += ok * RECENT_DECAY**j
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:, 4] = np.where(den > 0, num / den, np.nan)
    out[:, 5] = _row_quantile(lags, 0.1)
    out[:, 6] = _row_quantile(lags, 0.9)
    return out


def _window_stats(logd: np.ndarray, dur: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``window_summary`` after each event, for events sorted within groups.

    ``logd``/``dur`` hold only events with a duration; ``rank`` is the 0-based position of each
    within its group.
    """
    n = len(logd)
    lags = np.full((n, LONG_WINDOW), np.nan)
    lags_d = np.full((n, 2), np.nan)
    for j in range(min(LONG_WINDOW, n)):
        valid = rank >= j
        lags[j:, j] = logd[: n - j]
        lags[~valid, j] = np.nan
        if j < 2:
            lags_d[j:, j] = dur[: n - j]
            lags_d[~valid, j] = np.nan
    return window_summary(lags, lags_d)


_WINDOW_FIELDS = ("last1_logd", "last2_logd", "last2_d", "median_logd", "recent_logd", "recent_q10_logd",
                  "recent_q90_logd")


def _ffill_in_group(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs within each group (``group_start`` marks each group's first row)."""
    n = len(values)
    idx = np.where(np.isfinite(values) | group_start, np.arange(n), 0)
    np.maximum.accumulate(idx, out=idx)
    return values[idx]


def _cumulative_states(ev: pd.DataFrame, codes: np.ndarray) -> np.ndarray:
    """State after each event for events sorted by (code, end_ts, job_id); shape (n, n_fields)."""
    n = len(ev)
    out = np.empty((n, len(STATE_FIELDS)))
    dur = ev["duration_s"].to_numpy()
    has_d = np.isfinite(dur)
    logd = np.where(has_d, ev["logd"].to_numpy(), 0.0)
    ratio = ev["log_ratio"].to_numpy()
    has_r = np.isfinite(ratio)
    log_peak = ev["log_peak"].to_numpy()
    has_p = np.isfinite(log_peak)
    summed = np.column_stack([
        np.ones(n),
        has_d,
        logd,
        logd * logd,
        np.where(has_d, dur, 0.0),
        ev["failed"].to_numpy(dtype="float64"),
        ev["gpu_hours"].to_numpy(),
        has_r,
        np.where(has_r, ratio, 0.0),
        has_d & (dur <= SHORT_RUN_S),
        has_r & (ratio >= np.log(AT_LIMIT_SHARE)),
        has_p,
        np.where(has_p, log_peak, 0.0),
    ]).astype("float64")
    # sequential sums within each key (the same additions, in the same order, as HistoryStore.add)
    out[:, :_N_SUMS] = pd.DataFrame(summed).groupby(codes, sort=False).cumsum().to_numpy(dtype="float64")
    out[:, _F["last_end_ts"]] = ev["end_ts"].to_numpy()

    group_start = np.ones(n, dtype=bool)
    group_start[1:] = codes[1:] != codes[:-1]
    # Window over the events that have a duration; forward-filled to the events without one.
    win = np.full((n, len(_WINDOW_FIELDS)), np.nan)
    if has_d.any():
        sub_codes = codes[has_d]
        sub_rank = pd.Series(sub_codes).groupby(sub_codes, sort=False).cumcount().to_numpy()
        win[has_d] = _window_stats(ev["logd"].to_numpy()[has_d], dur[has_d], sub_rank)
    for j, name in enumerate(_WINDOW_FIELDS):
        out[:, _F[name]] = _ffill_in_group(win[:, j], group_start)
    out[:, _F["last_ratio"]] = _ffill_in_group(np.where(has_r, ratio, np.nan), group_start)
    limit = ev["time_limit_s"].to_numpy()
    out[:, _F["last_limit_s"]] = _ffill_in_group(np.where(limit > 0, limit, np.nan), group_start)
    out[:, _F["last_log_peak"]] = _ffill_in_group(np.where(has_p, log_peak, np.nan), group_start)
    out[:, _F["last_peak_gpus"]] = _ffill_in_group(np.where(has_p, ev["num_gpus"].to_numpy(), np.nan), group_start)
    out[:, _F["last_peak_log_tokens"]] = _ffill_in_group(np.where(has_p, ev["log_tokens"].to_numpy(), np.nan),
                                                         group_start)
    return out


def _sorted_events(events: pd.DataFrame, kind: str) -> tuple[pd.DataFrame, np.ndarray, pd.Index]:
    """Events with a key for ``kind``, sorted by (key code, end_ts, job_id); codes and key labels."""
    ev = events.loc[pd.notna(events[kind])]
    codes, labels = pd.factorize(ev[kind], sort=True)
    id_codes = ev["id_rank"].to_numpy() if "id_rank" in ev.columns else pd.factorize(ev["job_id"], sort=True)[0]
    order = np.lexsort((id_codes, ev["end_ts"].to_numpy(), codes))
    return ev.iloc[order].reset_index(drop=True), codes[order], pd.Index(labels)


def _with_id_rank(events: pd.DataFrame) -> pd.DataFrame:
    """Events plus ``id_rank``, the job id's rank in sorted order (the tie-break for equal end times)."""
    return events.assign(id_rank=pd.factorize(events["job_id"], sort=True)[0])


def history_state(jobs: pd.DataFrame, events: pd.DataFrame | None = None) -> HistoryState:
    """Point-in-time history state for every job in ``jobs`` (the batch path).

    Parameters
    ----------
    jobs : DataFrame of shape (n_jobs, n_columns)
        Canonical job table: the query jobs (their ``submit_ts`` and keys are used).
    events : DataFrame, optional
        Output of ``ended_events`` for the history to draw on (default: ``ended_events(jobs)``,
        i.e. the table is its own history). Only events with ``end_ts < submit_ts`` of a query job
        contribute to that job's state.

    Returns
    -------
    HistoryState
        One row per job, in ``jobs`` order.
    """
    keys = history_keys(jobs)
    if events is None:
        events = ended_events(jobs, keys)
    events = _with_id_rank(events)
    submit = jobs["submit_ts"].to_numpy(dtype="float64")
    values: dict[str, np.ndarray] = {}
    for kind in KEY_KINDS:
        state = np.tile(_EMPTY_STATE, (len(jobs), 1))
        ev, codes, labels = _sorted_events(events, kind)
        if len(ev):
            cums = _cumulative_states(ev, codes)
            times = np.unique(ev["end_ts"].to_numpy())
            stride = np.int64(len(times) + 1)
            ev_key = codes.astype(np.int64) * stride + np.searchsorted(times, ev["end_ts"].to_numpy(), "left")
            q_code = labels.get_indexer(keys[kind])
            known = q_code >= 0
            q_key = q_code.astype(np.int64) * stride + np.searchsorted(times, submit, "left")
            idx = np.searchsorted(ev_key, q_key, "left") - 1
            hit = known & (idx >= 0)
            hit[hit] = codes[idx[hit]] == q_code[hit]
            state[hit] = cums[idx[hit]]
        values[kind] = state
    return HistoryState(values)


# ---------------------------------------------------------------------------------------------
# serving path


_EMPTY_JOBS = empty_jobs()


def merge_events(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate event tables, keeping the first row of each job id."""
    frames = [p for p in parts if len(p)]
    if not frames:
        return ended_events(_EMPTY_JOBS)
    return pd.concat(frames, ignore_index=True).drop_duplicates("job_id", keep="first").reset_index(drop=True)
