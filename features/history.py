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

from bisect import insort
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import pandas as pd

from features.history_state import (
    _EMPTY_STATE,
    _F,
    _WINDOW_FIELDS,
    AT_LIMIT_SHARE,
    FAILURE_STATES,
    KEY_KINDS,
    LONG_WINDOW,
    RECENT_DECAY,
    SHORT_RUN_S,
    STATE_FIELDS,
    WINDOW,
    HistoryState,
    _cumulative_states,
    _sorted_events,
    _with_id_rank,
    ended_events,
    history_keys,
    history_state,
    merge_events,
    window_summary,
)
from features.job_keys import JobColumns, family_keys, numeric_column, object_column, request_keys
from features.schema import empty_jobs

__all__ = [
    "KEY_KINDS",
    "STATE_FIELDS",
    "WINDOW",
    "LONG_WINDOW",
    "RECENT_DECAY",
    "FAILURE_STATES",
    "SHORT_RUN_S",
    "AT_LIMIT_SHARE",
    "HistoryState",
    "HistoryStore",
    "family_keys",
    "request_keys",
    "history_keys",
    "ended_events",
    "history_state",
    "merge_events",
    "numeric_column",
    "object_column",
    "JobColumns",
]


#: Key types ``state_for`` looks up directly (None is no key of a table: the empty state).
_PLAIN_KEYS = frozenset({str, type(None)})


@dataclass
class _KeyWindow:
    """The last LONG_WINDOW ended jobs of one key that have a duration, oldest first."""

    items: list[tuple[float, str, float, float]] = field(default_factory=list)  # end, id, logd, dur

    def add(self, end_ts: float, job_id: str, logd: float, dur: float) -> None:
        insort(self.items, (end_ts, job_id, logd, dur))
        if len(self.items) > LONG_WINDOW:
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
        self._events = ended_events(jobs) if jobs is not None else ended_events(empty_jobs())
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
        events = _with_id_rank(self.events)
        state: dict[str, dict[str, np.ndarray]] = {}
        all_windows: dict[str, dict[str, _KeyWindow]] = {}
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
                keep = rank_from_end < LONG_WINDOW
                for code, item in zip(tail_codes[keep], tail.loc[keep].itertuples(index=False), strict=True):
                    windows.setdefault(labels[code], _KeyWindow()).items.append(tuple(item))
            state[kind] = table
            all_windows[kind] = windows
        # published whole: a reader in another thread sees no state or all of it, never a part
        self._windows, self._state = all_windows, state

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
            s[_F["n_short"]] += float(dur <= SHORT_RUN_S)
            win = self._windows[kind].setdefault(key, _KeyWindow())
            win.add(row.end_ts, row.job_id, logd, dur)  # type: ignore[attr-defined]
            lags = np.full((1, LONG_WINDOW), np.nan)
            lags_d = np.full((1, 2), np.nan)
            newest_first = win.items[::-1]
            lags[0, : len(newest_first)] = [it[2] for it in newest_first]
            lags_d[0, : min(2, len(newest_first))] = [it[3] for it in newest_first[:2]]
            for name, value in zip(_WINDOW_FIELDS, window_summary(lags, lags_d)[0], strict=True):
                s[_F[name]] = value
        if np.isfinite(ratio):
            s[_F["n_ratio"]] += 1.0
            s[_F["sum_ratio"]] += ratio
            s[_F["n_at_limit"]] += float(ratio >= np.log(AT_LIMIT_SHARE))
            s[_F["last_ratio"]] = ratio
        if limit > 0:
            s[_F["last_limit_s"]] = limit
        if np.isfinite(row.log_peak):  # type: ignore[attr-defined]
            s[_F["n_peak"]] += 1.0
            s[_F["sum_log_peak"]] += row.log_peak  # type: ignore[attr-defined]
            s[_F["last_log_peak"]] = row.log_peak  # type: ignore[attr-defined]
            s[_F["last_peak_gpus"]] = row.num_gpus  # type: ignore[attr-defined]
            s[_F["last_peak_log_tokens"]] = row.log_tokens  # type: ignore[attr-defined]

    def state_for(self, jobs: pd.DataFrame) -> HistoryState:
        """History state (as of now: everything in the store) for each job in ``jobs``."""
        if self._state is None:
            self._build()
        assert self._state is not None
        keys = history_keys(jobs)
        rows = []
        for kind in KEY_KINDS:  # kind-major, one array for all: (kinds, jobs, fields), views per kind
            table, wanted = self._state[kind], keys[kind]
            get = table.get
            if None not in table and _PLAIN_KEYS.issuperset(map(type, wanted)):  # no Python frame per job
                rows += map(get, wanted, repeat(_EMPTY_STATE, len(wanted)))
            else:
                rows += [get(k, _EMPTY_STATE) if isinstance(k, str) else _EMPTY_STATE for k in wanted]
        block = (np.concatenate(rows) if rows else np.empty(0)).reshape(len(KEY_KINDS), len(jobs), len(STATE_FIELDS))
        block = block.transpose(1, 0, 2)  # (jobs, kinds, fields)
        return HistoryState({kind: block[:, k, :] for k, kind in enumerate(KEY_KINDS)}, block)

    def __getstate__(self) -> dict:
        return {"events": self.events}

    def __setstate__(self, state: dict) -> None:
        self._events = state["events"]
        self._pending = []
        self._ids = set(self._events["job_id"])
        self._state = None
        self._windows = {}


