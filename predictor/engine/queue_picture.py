"""The tracked queue as the rules layer reads it: pending and running jobs as arrays, ready to snapshot.

A :class:`QueuePicture` is built from the store's rows after every change (and when another worker's
change arrives) and kept by the engine, so scoring a job is: append its row to the pending arrays,
snapshot, decide. No per-request database read, no per-request object graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from features.errors import InputError
from features.schema import BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS, STRING_COLUMNS
from models.prediction import SLOWDOWN_COLUMNS
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs, RunningJobs

__all__ = ["Names", "Vocabulary", "RunningJob", "QueuePicture", "pending_arrays", "canonical_frame",
           "canonical_columns", "frame_of"]


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value).strip()
    return text or None


def _number(value: Any) -> float:
    if value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


_KIND: dict[str, type] = {**{c: float for c in FLOAT_COLUMNS}, **{c: str for c in STRING_COLUMNS},
                          **{c: bool for c in BOOL_COLUMNS}}


def canonical_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Canonical job records as a table with ``features.schema.conform``'s columns and values.

    The serving path's version of ``conform(pd.DataFrame.from_records(records))``, built column by
    column from Python values (several times faster on the few rows a request carries). Strings are
    object columns holding ``str`` or None rather than pandas' string dtype: the same values, cheaper
    to read back as arrays (a test checks both against ``conform``). Only canonical columns are kept.
    """
    return frame_of(canonical_columns(records))


_COLUMN_INDEX = pd.Index(COLUMNS)


def frame_of(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The table of ``canonical_columns``, sharing their arrays.

    Built with pandas' array constructor without re-validating arrays we just typed: ten times
    cheaper than ``pd.DataFrame(dict)`` for one row, and strings stay object columns (the dict
    constructor would turn all-string columns into Arrow strings, which are slow to read back row by
    row). Falls back to the public constructor if pandas lacks it.
    """
    arrays = [columns[col] for col in COLUMNS]
    n = len(arrays[0])
    try:
        return pd.DataFrame._from_arrays(arrays, columns=_COLUMN_INDEX, index=pd.RangeIndex(n),
                                         verify_integrity=False)
    except (AttributeError, TypeError):  # pragma: no cover - a pandas without it
        return pd.DataFrame(dict(zip(COLUMNS, arrays, strict=True)), copy=False)


def canonical_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """One array per canonical column (float64, object strings with None, bool); see ``canonical_frame``."""
    n = len(records)
    data: dict[str, np.ndarray] = {}
    for col in COLUMNS:
        kind = _KIND[col]
        data[col] = (np.full(n, np.nan) if kind is float else np.full(n, None, dtype=object) if kind is str
                     else np.zeros(n, dtype=bool))
    for i, record in enumerate(records):  # one pass over what each record holds
        for key, value in record.items():
            kind = _KIND.get(key)
            if kind is float:
                data[key][i] = _number(value)
            elif kind is str:
                data[key][i] = _text(value)
            elif kind is bool:
                data[key][i] = bool(value)
    return data


@dataclass(frozen=True)
class Names:
    """Interned names: ``names[code]``; ``code_of`` maps back (-1 for none)."""

    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(self.names)})

    def code_of(self, name: object) -> int:
        return self._index.get(name, -1) if isinstance(name, str) else -1  # type: ignore[attr-defined]

    def codes(self, values: np.ndarray) -> np.ndarray:
        idx = self._index  # type: ignore[attr-defined]
        return np.fromiter((idx.get(v, -1) if isinstance(v, str) else -1 for v in values), dtype=np.int64,
                           count=len(values))

    def with_names(self, values: np.ndarray) -> Names:
        new = [v for v in dict.fromkeys(values.tolist()) if isinstance(v, str) and v not in self._index]  # type: ignore[attr-defined]
        return self if not new else Names(self.names + tuple(new))


@dataclass(frozen=True)
class Vocabulary:
    """The snapshot's team, tier and queue names."""

    teams: Names = Names()
    tiers: Names = Names()
    queues: Names = Names()

    def extended(self, jobs: pd.DataFrame | Mapping[str, np.ndarray]) -> Vocabulary:
        """This vocabulary plus the names ``jobs`` (canonical records) use."""
        teams = self.teams.with_names(_strings(jobs, "team"))
        tiers = self.tiers.with_names(_strings(jobs, "tier"))
        queues = self.queues.with_names(_strings(jobs, "queue"))
        if teams is self.teams and tiers is self.tiers and queues is self.queues:
            return self
        return Vocabulary(teams, tiers, queues)


Columns = pd.DataFrame | Mapping[str, np.ndarray]


def _length(table: Columns) -> int:
    return len(table) if isinstance(table, pd.DataFrame) else len(next(iter(table.values())))


def _strings(table: Columns, col: str) -> np.ndarray:
    """A string column as objects (None for null); all None when absent."""
    if col not in table:
        return np.full(_length(table), None, dtype=object)
    values = table[col]
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=object, na_value=None)
    return values.astype(object) if values.dtype != object else values


def _floats(table: Columns, col: str, fill: float = np.nan) -> np.ndarray:
    """A float column; missing and non-finite values (an overflowing prediction) become ``fill``."""
    if col not in table:
        return np.full(_length(table), fill, dtype=np.float64)
    values = table[col]
    values = (values.to_numpy(dtype=np.float64, na_value=fill) if isinstance(values, pd.Series)
              else np.asarray(values, dtype=np.float64))
    return np.where(np.isfinite(values), values, fill)


def pending_arrays(jobs: Columns, preds: Columns, vocab: Vocabulary, layout: ClusterLayout,
                   now: float, *, attained_gpu_s: np.ndarray | None = None) -> PendingJobs:
    """Pending-job arrays from canonical records and their predictions (same row order; each a
    DataFrame or a mapping of column name to array).

    Raises
    ------
    InputError
        A job asks for no GPU (the rules layer schedules GPU jobs only).
    """
    n = _length(jobs)
    ids = _strings(jobs, "job_id")
    num = _floats(jobs, "num_gpus", 1.0)
    if n and not (num >= 1).all():
        bad = ids[int(np.argmax(~(num >= 1)))]
        raise InputError(f"job {bad}: num_gpus must be at least 1 to be scheduled")
    submit = _floats(jobs, "submit_ts")
    milli = _floats(jobs, "gpu_milli", float(MILLI))
    requested = request = None
    types = _strings(jobs, "gpu_type")
    if any(t is not None for t in types):
        request = types
        requested = np.ones((n, layout.n_types), dtype=bool)
        for i, t in enumerate(types):
            if t is not None:
                wanted = [s.strip() for s in t.replace("|", ",").split(",") if s.strip()]
                requested[i] = [name in wanted for name in layout.gpu_types]
    slowdown = np.column_stack([_floats(preds, c, 1.0) for c in SLOWDOWN_COLUMNS]).reshape(n, len(SLOWDOWN_COLUMNS))
    fallback = (np.asarray(_floats(preds, "fallback", 0.0), dtype=np.float64) != 0) if "fallback" in preds \
        else np.zeros(n, bool)
    return PendingJobs.from_columns(
        job_id=ids,
        submit_ts=np.where(np.isfinite(submit), submit, now),
        num_gpus=np.ceil(num).astype(np.int64),
        gpu_milli=np.clip(np.where(np.isfinite(milli), milli, MILLI), 1, MILLI).astype(np.int64),
        team=vocab.teams.codes(_strings(jobs, "team")),
        tier=vocab.tiers.codes(_strings(jobs, "tier")),
        queue=vocab.queues.codes(_strings(jobs, "queue")),
        deadline_ts=_floats(jobs, "deadline_ts"), time_limit_s=_floats(jobs, "time_limit_s"),
        p10_s=_floats(preds, "duration_p10_s"), p50_s=_floats(preds, "duration_p50_s"),
        p90_s=_floats(preds, "duration_p90_s"), peak_vram_upper_mib=_floats(preds, "peak_vram_upper_mib"),
        slowdown=slowdown, attained_gpu_s=attained_gpu_s, fallback=fallback,
        model_version=_strings(preds, "model_version") if "model_version" in preds else None,
        requested_types=requested, gpu_request=request,
    )


def _absent(like: np.ndarray, n: int) -> np.ndarray:
    """The value of an optional column for ``n`` jobs that do not give it: any GPU type (all True) for
    type masks, None for object columns."""
    if like.dtype == bool:
        return np.ones((n, *like.shape[1:]), dtype=bool)
    return np.full((n, *like.shape[1:]), None, dtype=like.dtype)


def _concat_pending(a: PendingJobs, b: PendingJobs) -> PendingJobs:
    kw = {}
    for f in fields(PendingJobs):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x is None and y is None:
            kw[f.name] = None
            continue
        x = _absent(y, len(a)) if x is None else x
        y = _absent(x, len(b)) if y is None else y
        kw[f.name] = np.concatenate([x, y])
    return PendingJobs(**kw)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running tracked job: where it runs and what was predicted for it."""

    job_id: str
    team: str | None
    tier: str | None
    queue: str | None
    gpus: tuple[int, ...]  # global GPU indices (ClusterLayout)
    gpu_milli: int
    start_ts: float
    predicted_end_ts: float
    last_checkpoint_ts: float
    checkpoint_interval_s: float
    priority: int
    attained_gpu_s: float


@dataclass(frozen=True, eq=False)
class QueuePicture:
    """Tracked pending and running jobs, as arrays with a shared vocabulary."""

    layout: ClusterLayout
    vocab: Vocabulary
    pending: PendingJobs
    running: RunningJobs
    seq: int = 0  # the stream seq this picture reflects

    @classmethod
    def empty(cls, layout: ClusterLayout) -> QueuePicture:
        return cls(layout, Vocabulary(), PendingJobs.empty(), RunningJobs.empty())

    @classmethod
    def build(cls, layout: ClusterLayout, *, pending_jobs: pd.DataFrame, pending_preds: pd.DataFrame,
              pending_attained: Sequence[float], running: Sequence[RunningJob], team_names: Sequence[str],
              now: float, seq: int = 0) -> QueuePicture:
        """A picture from the pending jobs' records and predictions and the running jobs."""
        vocab = Vocabulary(Names(tuple(dict.fromkeys(team_names))))
        vocab = vocab.extended(pending_jobs)
        run_frame = pd.DataFrame({"team": [r.team for r in running], "tier": [r.tier for r in running],
                                  "queue": [r.queue for r in running]}, dtype=object)
        vocab = vocab.extended(run_frame)
        pend = pending_arrays(pending_jobs, pending_preds, vocab, layout, now,
                              attained_gpu_s=np.asarray(pending_attained, dtype=np.float64))
        run = RunningJobs.from_columns(
            job_id=[r.job_id for r in running], gpus=[r.gpus for r in running],
            start_ts=[r.start_ts for r in running], gpu_milli=[r.gpu_milli for r in running],
            team=vocab.teams.codes(_strings(run_frame, "team")), tier=vocab.tiers.codes(_strings(run_frame, "tier")),
            queue=vocab.queues.codes(_strings(run_frame, "queue")),
            predicted_end_ts=[r.predicted_end_ts for r in running],
            last_checkpoint_ts=[r.last_checkpoint_ts for r in running],
            checkpoint_interval_s=[r.checkpoint_interval_s for r in running],
            priority=[r.priority for r in running], attained_gpu_s=[r.attained_gpu_s for r in running])
        return cls(layout, vocab, pend, run, seq)

    def with_candidates(self, candidates: PendingJobs, vocab: Vocabulary) -> QueuePicture:
        """This picture with ``candidates`` appended to the pending jobs (replacing tracked pending jobs
        with the same id); ``vocab`` must extend this picture's vocabulary."""
        keep = ~np.isin(self.pending.job_id, candidates.job_id) if len(self.pending) else np.zeros(0, bool)
        base = self.pending.take(np.flatnonzero(keep)) if not keep.all() else self.pending
        if len(self.running) and np.isin(candidates.job_id, self.running.job_id).any():
            dup = candidates.job_id[np.isin(candidates.job_id, self.running.job_id)][0]
            raise InputError(f"job {dup} is already running; score a new job id")
        pending = _concat_pending(base, candidates) if len(base) else candidates
        return QueuePicture(self.layout, vocab, pending, self.running, self.seq)

    def free_milli(self) -> np.ndarray:
        """Free thousandths of each GPU (1000 minus what running jobs hold)."""
        free = np.full(self.layout.n_gpus, MILLI, dtype=np.int64)
        r = self.running
        if len(r.alloc_gpus):
            np.subtract.at(free, r.alloc_gpus, np.repeat(r.gpu_milli, np.diff(r.alloc_offsets)))
        return free

    def snapshot(self, now: float, usage_by_team: dict[str, float]) -> ClusterSnapshot:
        """The rules layer's input at ``now`` (teams with usage but no job are added to the vocabulary)."""
        teams = self.vocab.teams.with_names(np.array(list(usage_by_team), dtype=object))
        usage = np.array([usage_by_team.get(t, 0.0) for t in teams.names], dtype=np.float64)
        return ClusterSnapshot(now=float(now), layout=self.layout, pending=self.pending, running=self.running,
                               teams=teams.names, tiers=self.vocab.tiers.names, queues=self.vocab.queues.names,
                               team_usage_gpu_s=usage)
