"""Point-in-time job history: per-user, per-team and per-family statistics of *ended* jobs.

The rule (``POINT_IN_TIME``): a job's history features use only jobs whose ``end_ts`` is strictly
before that job's ``submit_ts``. Jobs still running (or censored) at that moment are invisible, even
if they were submitted earlier, so changing or removing any job that ends after a job's submit time
cannot change that job's features.

Two ways to get the same numbers:

* ``history_state(jobs, events)`` - the batch path (training, evaluation, replay). Events are
  sorted once by ``(key, end_ts, job_id)``; per-key cumulative sums and a window of the last
  ``WINDOW`` jobs are computed with grouped cumulative operations, and each query job finds its
  state with one binary search (``searchsorted``) on an integer ``(key, end-time rank)`` code. No
  per-job loop over history; 1,000,000 jobs take seconds.
* ``HistoryStore`` - the serving path. It holds the finished jobs (``events``) and, per key, the
  state *after all of them*, seeded from the batch arrays and then updated one finished job at a
  time with ``add``. ``state_for(jobs)`` answers with the history as of now.

Both return a ``HistoryState`` (one float array per statistic and key kind), which
``features.build`` turns into features and ``models.baselines`` into baseline predictions; the
batch and serving paths therefore agree to the last bit when the store holds exactly the jobs that
ended before the query's submit time (tested).
"""

from __future__ import annotations

import re
import warnings
from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from features.schema import empty_jobs

__all__ = [
    "KEY_KINDS",
    "STATE_FIELDS",
    "WINDOW",
    "FAILURE_STATES",
    "HistoryState",
    "HistoryStore",
    "family_keys",
    "object_column",
    "history_keys",
    "ended_events",
    "history_state",
    "merge_events",
]

#: Key kinds history is kept for: the submitting user, the team, and the job family.
KEY_KINDS: tuple[str, ...] = ("user", "team", "family")
#: How many of the most recent ended jobs per key are kept for last-1 / last-2 / recent median.
WINDOW = 5
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
    "last_end_ts",  # end time of the latest ended job
    "last1_logd",  # log duration of the latest job with a duration
    "last2_logd",  # mean log duration of the latest two
    "last2_d",  # arithmetic mean duration (s) of the latest two (Tsafrir's user estimate)
    "median_logd",  # median log duration of the latest WINDOW
    "last_ratio",  # log(duration / time_limit) of the latest job that has both
    "last_limit_s",  # time limit of the latest job that has one
)
_F = {name: i for i, name in enumerate(STATE_FIELDS)}
_EMPTY_STATE = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0] + [np.nan] * 7, dtype="float64")

_DATE = re.compile(r"(19|20)\d\d[-_./]?[01]\d[-_./]?[0-3]\d([tT _-]?[0-2]\d[:_.-]?[0-5]\d([:_.-]?[0-5]\d)?)?")
_DIGITS = re.compile(r"\d+")
_SEPARATORS = re.compile(r"[-_./: ]+")
_LETTER = re.compile(r"[^\W\d_]")


@lru_cache(maxsize=65536)
def _strip_name(name: str) -> str:
    """A job name with dates and digit runs removed; the name itself when nothing alphabetic remains.

    ``train-llama-2024-05-01-run3`` -> ``train-llama-run``. A purely numeric name (SWF executable
    ids) is kept whole, because stripping it would merge unrelated programs into one family.
    """
    stripped = _DIGITS.sub("", _DATE.sub("", name.lower()))
    stripped = _SEPARATORS.sub("-", stripped).strip("-")
    return stripped if _LETTER.search(stripped) else name


def object_column(jobs: pd.DataFrame, col: str) -> np.ndarray:
    """A column as an object array with ``None`` for null (all None when the table lacks it)."""
    if col not in jobs.columns:
        return np.full(len(jobs), None, dtype=object)
    values = jobs[col].to_numpy(dtype=object, na_value=None)
    if values.dtype != object:
        values = values.astype(object)
    return values


def _family_small(users: np.ndarray, names: np.ndarray, explicit: np.ndarray | None) -> np.ndarray:
    out = np.empty(len(users), dtype=object)
    for i, (u, nm) in enumerate(zip(users, names, strict=True)):
        if explicit is not None and explicit[i] is not None and explicit[i] == explicit[i]:
            out[i] = f"family:{explicit[i]}"
        elif nm is None or nm != nm:
            out[i] = None
        else:
            out[i] = f"{u if isinstance(u, str) else '?'}/{_strip_name(str(nm))}"
    return out


def family_keys(jobs: pd.DataFrame) -> np.ndarray:
    """Family key per job: ``family`` where the log has one, else user + name without digits/dates.

    Returns an object array (None where neither a family nor a job name is known).
    """
    explicit = object_column(jobs, "family") if "family" in jobs.columns else None
    users, names = object_column(jobs, "user"), object_column(jobs, "job_name")
    if len(jobs) <= 256:  # serving: a plain loop beats pandas' per-call overhead
        return _family_small(users, names, explicit)
    codes, uniques = pd.factorize(pd.Series(names, dtype="string"))
    stripped = np.array([_strip_name(str(u)) for u in uniques], dtype=object)
    user = pd.Series(users, dtype="string").fillna("?")
    derived = pd.Series(pd.NA, index=range(len(jobs)), dtype="string")
    has_name = codes >= 0
    derived[has_name] = user[has_name] + "/" + pd.Series(stripped[codes[has_name]], index=derived.index[has_name])
    if explicit is not None:
        ex = pd.Series(explicit, dtype="string")
        derived = ("family:" + ex).where(ex.notna(), derived)
    return derived.to_numpy(dtype=object, na_value=None)


def history_keys(jobs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The key per job for each kind in ``KEY_KINDS`` (object arrays, None where unknown)."""
    return {"user": object_column(jobs, "user"), "team": object_column(jobs, "team"), "family": family_keys(jobs)}


def ended_events(jobs: pd.DataFrame) -> pd.DataFrame:
    """The jobs that count as history: ended (``end_ts`` known) and not censored.

    Returns one row per ended job with the columns history needs: ``job_id``, the three keys,
    ``end_ts``, ``duration_s``, ``logd``, ``failed``, ``gpu_hours``, ``log_ratio``, ``time_limit_s``.
    """
    ended = jobs["end_ts"].notna().to_numpy() & ~jobs["censored"].to_numpy(dtype=bool)
    src = jobs.loc[ended]
    keys = history_keys(src)
    dur = src["duration_s"].to_numpy(dtype="float64")
    limit = src["time_limit_s"].to_numpy(dtype="float64")
    share = src["gpu_milli"].to_numpy(dtype="float64") / 1000.0
    share = np.where(np.isfinite(share), share, 1.0)
    gpus = np.nan_to_num(src["num_gpus"].to_numpy(dtype="float64"), nan=0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        logd = np.log(np.maximum(dur, 1.0))
        log_ratio = np.where((limit > 0) & np.isfinite(dur), np.log(np.maximum(dur, 1.0) / limit), np.nan)
    return pd.DataFrame(
        {
            "job_id": src["job_id"].astype("string").to_numpy(dtype=object),
            "user": keys["user"],
            "team": keys["team"],
            "family": keys["family"],
            "end_ts": src["end_ts"].to_numpy(dtype="float64"),
            "duration_s": dur,
            "logd": logd,
            "failed": src["state"].isin(FAILURE_STATES).to_numpy(dtype=bool),
            "gpu_hours": np.nan_to_num(gpus * share * dur / 3600.0, nan=0.0),
            "log_ratio": log_ratio,
            "time_limit_s": limit,
        }
    )


@dataclass
class HistoryState:
    """History statistics per query job: ``values[kind]`` has shape (n_jobs, len(STATE_FIELDS))."""

    values: dict[str, np.ndarray]

    def get(self, kind: str, name: str) -> np.ndarray:
        """One statistic (column of ``STATE_FIELDS``) for one key kind, shape (n_jobs,)."""
        return self.values[kind][:, _F[name]]


# ---------------------------------------------------------------------------------------------
# batch path


def _window_stats(logd: np.ndarray, dur: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """last1, last2 (log), last2 (s), median over the last WINDOW, for events sorted within groups.

    ``logd``/``dur`` hold only events with a duration; ``rank`` is the 0-based position of each
    within its group.
    """
    n = len(logd)
    lags = np.full((n, WINDOW), np.nan)
    lags_d = np.full((n, 2), np.nan)
    valid = [rank >= j for j in range(WINDOW)]
    for j in range(min(WINDOW, n)):
        lags[j:, j] = logd[: n - j]
        lags[~valid[j], j] = np.nan
        if j < 2:
            lags_d[j:, j] = dur[: n - j]
            lags_d[~valid[j], j] = np.nan
    out = np.empty((n, 4))
    out[:, 0] = lags[:, 0]
    out[:, 1] = np.where(np.isnan(lags[:, 1]), lags[:, 0], (lags[:, 0] + lags[:, 1]) / 2.0)
    out[:, 2] = np.where(np.isnan(lags_d[:, 1]), lags_d[:, 0], (lags_d[:, 0] + lags_d[:, 1]) / 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows cannot occur, rank >= 0
        out[:, 3] = np.nanmedian(lags, axis=1) if n else np.empty(0)
    return out


def _ffill_in_group(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs within each group (``group_start`` marks each group's first row)."""
    n = len(values)
    idx = np.where(np.isfinite(values) | group_start, np.arange(n), 0)
    np.maximum.accumulate(idx, out=idx)
    return values[idx]


def _cumulative_states(ev: pd.DataFrame, codes: np.ndarray) -> np.ndarray:
    """State after each event for events sorted by (code, end_ts, job_id); shape (n, n_fields)."""
    n = len(ev)
    grp = pd.Series(codes)
    out = np.empty((n, len(STATE_FIELDS)))

    def cum(x: np.ndarray) -> np.ndarray:
        return pd.Series(x).groupby(grp, sort=False).cumsum().to_numpy(dtype="float64")

    dur = ev["duration_s"].to_numpy()
    has_d = np.isfinite(dur)
    logd = np.where(has_d, ev["logd"].to_numpy(), 0.0)
    ratio = ev["log_ratio"].to_numpy()
    has_r = np.isfinite(ratio)
    out[:, _F["n_ended"]] = cum(np.ones(n))
    out[:, _F["n_dur"]] = cum(has_d.astype("float64"))
    out[:, _F["sum_logd"]] = cum(logd)
    out[:, _F["sum_logd2"]] = cum(logd * logd)
    out[:, _F["sum_d"]] = cum(np.where(has_d, dur, 0.0))
    out[:, _F["n_fail"]] = cum(ev["failed"].to_numpy(dtype="float64"))
    out[:, _F["gpu_hours"]] = cum(ev["gpu_hours"].to_numpy())
    out[:, _F["n_ratio"]] = cum(has_r.astype("float64"))
    out[:, _F["sum_ratio"]] = cum(np.where(has_r, ratio, 0.0))
    out[:, _F["last_end_ts"]] = ev["end_ts"].to_numpy()

    group_start = np.ones(n, dtype=bool)
    group_start[1:] = codes[1:] != codes[:-1]
    # Window over the events that have a duration; forward-filled to the events without one.
    win = np.full((n, 4), np.nan)
    if has_d.any():
        sub_codes = codes[has_d]
        sub_rank = pd.Series(sub_codes).groupby(sub_codes, sort=False).cumcount().to_numpy()
        win[has_d] = _window_stats(ev["logd"].to_numpy()[has_d], dur[has_d], sub_rank)
    for j, name in enumerate(("last1_logd", "last2_logd", "last2_d", "median_logd")):
        out[:, _F[name]] = _ffill_in_group(win[:, j], group_start)
    out[:, _F["last_ratio"]] = _ffill_in_group(np.where(has_r, ratio, np.nan), group_start)
    limit = ev["time_limit_s"].to_numpy()
    out[:, _F["last_limit_s"]] = _ffill_in_group(np.where(limit > 0, limit, np.nan), group_start)
    return out


def _sorted_events(events: pd.DataFrame, kind: str) -> tuple[pd.DataFrame, np.ndarray, pd.Index]:
    """Events with a key for ``kind``, sorted by (key code, end_ts, job_id); codes and key labels."""
    ev = events.loc[pd.notna(events[kind])]
    codes, labels = pd.factorize(ev[kind], sort=True)
    id_codes = pd.factorize(ev["job_id"], sort=True)[0]
    order = np.lexsort((id_codes, ev["end_ts"].to_numpy(), codes))
    return ev.iloc[order].reset_index(drop=True), codes[order], pd.Index(labels)


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
    if events is None:
        events = ended_events(jobs)
    keys = history_keys(jobs)
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


@dataclass
class _KeyWindow:
    """The last WINDOW ended jobs of one key that have a duration, oldest first."""

    items: list[tuple[float, str, float, float]] = field(default_factory=list)  # end, id, logd, dur

    def add(self, end_ts: float, job_id: str, logd: float, dur: float) -> None:
        insort(self.items, (end_ts, job_id, logd, dur))
        if len(self.items) > WINDOW:
            del self.items[0]


class HistoryStore:
    """History of finished jobs for serving, updated incrementally as jobs finish.

    ``state_for`` answers with the state after *all* jobs in the store (the history as of now):
    keep only jobs that have ended in it. The store is picklable and is saved in the model bundle.

    Parameters
    ----------
    jobs : DataFrame, optional
        Canonical job table to seed the store with; rows that have not ended are ignored.
    """

    def __init__(self, jobs: pd.DataFrame | None = None) -> None:
        self._events = ended_events(jobs) if jobs is not None else ended_events(_EMPTY_JOBS)
        self._pending: list[pd.DataFrame] = []
        self._ids: set[str] = set(self._events["job_id"])
        self._state: dict[str, dict[str, np.ndarray]] | None = None
        self._windows: dict[str, dict[str, _KeyWindow]] = {}

    # -- contents ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def events(self) -> pd.DataFrame:
        """All ended jobs in the store (output of ``ended_events``)."""
        if self._pending:
            self._events = pd.concat([self._events, *self._pending], ignore_index=True)
            self._pending = []
        return self._events

    @property
    def last_end_ts(self) -> float | None:
        """Latest end time in the store (None when empty)."""
        ev = self.events
        return float(ev["end_ts"].max()) if len(ev) else None

    def add(self, jobs: pd.DataFrame) -> int:
        """Add finished jobs (canonical rows); rows not ended or already present are skipped.

        Returns the number of jobs added. Per-key state is updated in place, one job at a time in
        (end_ts, job_id) order.
        """
        new = ended_events(jobs)
        new = new.loc[~new["job_id"].isin(self._ids)].drop_duplicates("job_id")
        if new.empty:
            return 0
        new = new.sort_values(["end_ts", "job_id"], kind="stable").reset_index(drop=True)
        self._pending.append(new)
        self._ids.update(new["job_id"])
        if self._state is not None:
            for row in new.itertuples(index=False):
                for kind in KEY_KINDS:
                    key = getattr(row, kind)
                    if key is not None and key == key:
                        self._update(kind, key, row)
        return len(new)

    # -- per-key state ----------------------------------------------------------------------
    def _build(self) -> None:
        """Seed the per-key state from the batch arrays (the last event of each key)."""
        events = self.events
        self._state, self._windows = {}, {}
        for kind in KEY_KINDS:
            ev, codes, labels = _sorted_events(events, kind)
            table: dict[str, np.ndarray] = {}
            windows: dict[str, _KeyWindow] = {}
            if len(ev):
                cums = _cumulative_states(ev, codes)
                last = np.r_[codes[1:] != codes[:-1], True]
                for code, row in zip(codes[last], cums[last], strict=True):
                    table[labels[code]] = row.copy()
                has_d = np.isfinite(ev["duration_s"].to_numpy())
                tail = ev.loc[has_d, ["end_ts", "job_id", "logd", "duration_s"]]
                tail_codes = codes[has_d]
                rank_from_end = pd.Series(tail_codes[::-1]).groupby(tail_codes[::-1]).cumcount().to_numpy()[::-1]
                keep = rank_from_end < WINDOW
                for code, item in zip(tail_codes[keep], tail.loc[keep].itertuples(index=False), strict=True):
                    windows.setdefault(labels[code], _KeyWindow()).items.append(tuple(item))
            self._state[kind] = table
            self._windows[kind] = windows

    def _update(self, kind: str, key: str, row: object) -> None:
        """Fold one ended job into the state of one key (same arithmetic as the batch sums)."""
        s = self._state[kind].get(key)  # type: ignore[index]
        if s is None:
            s = _EMPTY_STATE.copy()
            self._state[kind][key] = s  # type: ignore[index]
        dur, logd, ratio, limit = row.duration_s, row.logd, row.log_ratio, row.time_limit_s  # type: ignore[attr-defined]
        s[_F["n_ended"]] += 1.0
        s[_F["n_fail"]] += float(row.failed)  # type: ignore[attr-defined]
        s[_F["gpu_hours"]] += row.gpu_hours  # type: ignore[attr-defined]
        s[_F["last_end_ts"]] = max(row.end_ts, s[_F["last_end_ts"]]) if s[_F["n_ended"]] > 1 else row.end_ts  # type: ignore[attr-defined]
        if np.isfinite(dur):
            s[_F["n_dur"]] += 1.0
            s[_F["sum_logd"]] += logd
            s[_F["sum_logd2"]] += logd * logd
            s[_F["sum_d"]] += dur
            win = self._windows[kind].setdefault(key, _KeyWindow())
            win.add(row.end_ts, row.job_id, logd, dur)  # type: ignore[attr-defined]
            logs = [it[2] for it in win.items]
            durs = [it[3] for it in win.items]
            s[_F["last1_logd"]] = logs[-1]
            s[_F["last2_logd"]] = (logs[-1] + logs[-2]) / 2.0 if len(logs) > 1 else logs[-1]
            s[_F["last2_d"]] = (durs[-1] + durs[-2]) / 2.0 if len(durs) > 1 else durs[-1]
            s[_F["median_logd"]] = float(np.median(logs))
        if np.isfinite(ratio):
            s[_F["n_ratio"]] += 1.0
            s[_F["sum_ratio"]] += ratio
            s[_F["last_ratio"]] = ratio
        if limit > 0:
            s[_F["last_limit_s"]] = limit

    def state_for(self, jobs: pd.DataFrame) -> HistoryState:
        """History state (as of now: everything in the store) for each job in ``jobs``."""
        if self._state is None:
            self._build()
        assert self._state is not None
        keys = history_keys(jobs)
        values = {}
        for kind in KEY_KINDS:
            table = self._state[kind]
            rows = [table.get(k, _EMPTY_STATE) if isinstance(k, str) else _EMPTY_STATE for k in keys[kind]]
            values[kind] = np.array(rows, dtype="float64").reshape(len(jobs), len(STATE_FIELDS))
        return HistoryState(values)

    def __getstate__(self) -> dict:
        return {"events": self.events}

    def __setstate__(self, state: dict) -> None:
        self._events = state["events"]
        self._pending = []
        self._ids = set(self._events["job_id"])
        self._state = None
        self._windows = {}


_EMPTY_JOBS = empty_jobs()


def merge_events(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate event tables, keeping the first row of each job id."""
    frames = [p for p in parts if len(p)]
    if not frames:
        return ended_events(_EMPTY_JOBS)
    return pd.concat(frames, ignore_index=True).drop_duplicates("job_id", keep="first").reset_index(drop=True)
