"""The tracked queue as the rules layer reads it: pending and running jobs as arrays, ready to snapshot.

A :class:`QueuePicture` is built from the store's rows after every change (and when another worker's
change arrives) and kept by the engine, so scoring a job is: append its row to the pending arrays,
snapshot, decide. No per-request database read, no per-request object graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from features.errors import InputError
from features.schema import BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS, STRING_COLUMNS
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.policy import intake
from predictor.policy.intake import Columns, Names, Vocabulary
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs, RunningJobs

__all__ = ["QueuePicture", "CanonicalColumns", "canonical_frame", "canonical_columns", "frame_of"]


def _text(value: Any) -> str | None:
    if value.__class__ is str:  # what a request carries: the common case first
        return value.strip() or None
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value).strip()
    return text or None


def _number(value: Any) -> float:
    if value.__class__ is float:
        return value
    if value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


_KIND: dict[str, type] = {**{c: float for c in FLOAT_COLUMNS}, **{c: str for c in STRING_COLUMNS},
                          **{c: bool for c in BOOL_COLUMNS}}
_FLOATS, _STRINGS, _BOOLS = ({c: i for i, c in enumerate(c for c in COLUMNS if _KIND[c] is kind)}
                              for kind in (float, str, bool))
_KIND_ROWS = (_FLOATS, _STRINGS, _BOOLS)
_PLACEMENTS = tuple(np.array([COLUMNS.index(c) for c in rows], dtype=np.intp) for rows in _KIND_ROWS)


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
    """The table of ``canonical_columns``, sharing their arrays (not a copy: nothing writes into it).

    Built with pandas' array constructor without re-validating arrays we just typed: ten times
    cheaper than ``pd.DataFrame(dict)`` for one row, and strings stay object columns (the dict
    constructor would turn all-string columns into Arrow strings, which are slow to read back row by
    row). Falls back to the public constructor if pandas lacks it.
    """
    blocks = _blocks_of(columns)
    if blocks is not None:  # as canonical_columns built them: three blocks, no copy (seven times cheaper)
        return pd.api.internals.create_dataframe_from_blocks(blocks, index=pd.RangeIndex(blocks[0][0].shape[1]),
                                                             columns=_COLUMN_INDEX)
    arrays = [columns[col] for col in COLUMNS]
    n = len(arrays[0])
    try:
        return pd.DataFrame._from_arrays(arrays, columns=_COLUMN_INDEX, index=pd.RangeIndex(n),
                                         verify_integrity=False)
    except (AttributeError, TypeError):  # pragma: no cover - a pandas without it
        return pd.DataFrame(dict(zip(COLUMNS, arrays, strict=True)), copy=False)


class CanonicalColumns(dict):
    """What ``canonical_columns`` returns: one array per column, each a row of one of three per-kind
    blocks, which it remembers (``blocks``, and ``views``: the arrays as it made them) so that
    ``frame_of`` can hand the blocks to pandas after checking, by identity, that no column was
    replaced."""

    __slots__ = ("blocks", "views")


def _blocks_of(columns: Mapping[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``canonical_columns``' per-kind blocks with each block's column positions, when every canonical
    column is still the row of its block that ``canonical_columns`` made it (None otherwise)."""
    if not hasattr(pd.api, "internals") or not hasattr(pd.api.internals, "create_dataframe_from_blocks"):
        return None  # pragma: no cover - a pandas before 3.0
    views = getattr(columns, "views", None)
    if views is None:
        return None
    get = columns.get
    for col, view in views.items():
        if get(col) is not view:
            return None
    return [(block, placement) for block, placement in zip(columns.blocks, _PLACEMENTS, strict=True)]


def _blank_columns(n: int) -> CanonicalColumns:
    """Every canonical column of ``n`` jobs, absent (NaN, None, False): one block per kind, each column
    a contiguous row of it (three allocations, not one per column)."""
    floats, strings, bools = np.full((len(_FLOATS), n), np.nan), np.full((len(_STRINGS), n), None, dtype=object), \
        np.zeros((len(_BOOLS), n), dtype=bool)
    data = CanonicalColumns()
    for col in COLUMNS:
        kind = _KIND[col]
        data[col] = (floats[_FLOATS[col]] if kind is float else strings[_STRINGS[col]] if kind is str
                     else bools[_BOOLS[col]])
    data.blocks, data.views = (floats, strings, bools), dict(data)
    return data


_CONVERT: dict[type, Callable[[Any], Any]] = {float: _number, str: _text, bool: bool}


def canonical_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """One array per canonical column (float64, object strings with None, bool); see ``canonical_frame``."""
    data = _blank_columns(len(records))
    setters = {col: (data[col], _CONVERT[_KIND[col]]) for col in COLUMNS}  # column -> (array, conversion)
    get = setters.get
    for i, record in enumerate(records):  # one pass over what each record holds
        for key, value in record.items():
            setter = get(key)
            if setter is not None:
                setter[0][i] = setter[1](value)
    return data


def columns_from_lists(values: Mapping[str, Sequence[Any]], n: int) -> dict[str, np.ndarray]:
    """``canonical_columns`` of ``n`` records given column by column: ``values[col][i]`` is record
    ``i``'s value of ``col``, None where it has none (a column left out: none has it). The same arrays
    for the same values; a column is converted in one numpy assignment instead of one per value (a
    batch's job specs: several times cheaper). Keys that are not canonical columns are ignored."""
    data = _blank_columns(n)
    for col, given in values.items():
        kind = _KIND.get(col)
        if kind is None:
            continue
        if len(given) != n:
            raise ValueError(f"column {col!r} has {len(given)} values for {n} records")
        target = data[col]
        if kind is str:
            target[:] = [None if v is None else _text(v) for v in given]
            continue
        try:  # numpy converts None to NaN (float) / False (bool) as _number / bool do
            target[:] = given
        except (TypeError, ValueError):  # a value numpy does not convert: one by one, as canonical_columns does
            convert = _CONVERT[kind]
            target[:] = [convert(v) for v in given]
    return data


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


@dataclass(frozen=True, eq=False)
class QueuePicture:
    """Tracked pending and running jobs, as arrays with a shared vocabulary."""

    layout: ClusterLayout
    vocab: Vocabulary
    pending: PendingJobs
    running: RunningJobs
    seq: int = 0  # the stream seq this picture reflects
    unplaced: tuple[str, ...] = ()  # running jobs that hold nothing here (they run outside the inventory)

    @classmethod
    def empty(cls, layout: ClusterLayout) -> QueuePicture:
        return cls(layout, Vocabulary(), PendingJobs.empty(), RunningJobs.empty())

    @classmethod
    def build(cls, layout: ClusterLayout, *, pending_jobs: Columns, pending_preds: Columns,
              running_jobs: Columns | None = None, running_preds: Columns | None = None,
              running_gpus: Sequence[Sequence[int] | None] | None = None,
              pending_attained: Sequence[float] | None = None, running_state: Mapping[str, np.ndarray] | None = None,
              team_names: Sequence[str] = (), now: float, seq: int = 0) -> QueuePicture:
        """A picture from canonical records and predictions of the pending and running jobs, through
        the intake (``predictor.policy.intake``).

        ``running_gpus``: the GPUs each running job holds where known (else placed by the intake's
        rule); ``running_state``: ``priority``, ``attained_gpu_s``, ``last_checkpoint_ts`` arrays of
        the running jobs where the caller tracks them. Running jobs that cannot be placed are left
        out and listed in ``unplaced``.
        """
        vocab = Vocabulary(Names(tuple(dict.fromkeys(team_names)))).extended(pending_jobs)
        running_jobs = {"job_id": np.zeros(0, dtype=object)} if running_jobs is None else running_jobs
        running_preds = {} if running_preds is None else running_preds
        vocab = vocab.extended(running_jobs)
        pend = intake.pending_jobs(pending_jobs, pending_preds, vocab, layout, now,
                                   attained_gpu_s=None if pending_attained is None
                                   else np.asarray(pending_attained, dtype=np.float64))
        state = running_state or {}
        run = intake.running_jobs(running_jobs, running_preds, vocab, layout, now, gpus=running_gpus,
                                  priority=state.get("priority"), attained_gpu_s=state.get("attained_gpu_s"),
                                  last_checkpoint_ts=state.get("last_checkpoint_ts"))
        return cls(layout, vocab, pend, run.running, seq, run.unplaced)

    def with_candidates(self, candidates: PendingJobs, vocab: Vocabulary) -> QueuePicture:
        """This picture with ``candidates`` appended to the pending jobs (replacing tracked pending jobs
        with the same id); ``vocab`` must extend this picture's vocabulary."""
        # id look-ups through Python sets: np.isin on object arrays sorts them (tens of us a request)
        new_ids = candidates.job_id.tolist()
        wanted = set(new_ids)
        tracked = self.pending.job_id.tolist()
        keep = np.fromiter((j not in wanted for j in tracked), dtype=bool, count=len(tracked))
        base = self.pending.take(np.flatnonzero(keep)) if not keep.all() else self.pending
        if len(self.running):
            running = set(self.running.job_id.tolist())
            dup = next((j for j in new_ids if j in running), None)
            if dup is not None:
                raise InputError(f"job {dup} is already running; score a new job id")
        pending = _concat_pending(base, candidates) if len(base) else candidates
        return QueuePicture(self.layout, vocab, pending, self.running, self.seq, self.unplaced)

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
