"""Intake: the one path from canonical job columns to the rules layer's pending and running arrays.

Every caller that decides goes through here: the service (its tracked queue, ``POST /v1/score``), the
command line (``predictor policy decide``), ``predictor sync`` (both deciders) and the replay (which
takes its whole trace in once and then selects rows per cycle). So a job is read the same way
everywhere: its GPU request, its team/tier/queue codes, its limits and deadline, what was predicted
for it, and, for a running job, which GPUs it holds.

Rules (referred to by name elsewhere):

* *GPU request* (``predictor.capacity.requests``): ``gpu_type`` lists the acceptable types, any
  spelling; a known GPU model the cluster lacks allows nothing, a name that is no GPU model is an
  error naming the types. No ``gpu_type``: any type.
* *running placement*: a running job holds the GPUs given for it (the tracked queue knows them); else
  free GPUs of the type it runs on on the nodes it runs on (``nodes``: Slurm's host list), as many per
  node as its gang spreads over them; else the best free gang of its type. Jobs are placed in start
  order; one that cannot be placed (it runs outside the inventory) holds nothing and is reported.
* *predicted end* of a running job: its start plus the predicted p90 run time times the slowdown of
  the placement it holds (NaN when not predicted).
* *job constraint* (docs/residency.md): the job's ``constraints`` (``features.constraints``) and,
  for a ``data_class``, a ``data_class=<class>`` term, as one canonical text; the policy's residency
  rules (per team, per data class) are added when a cycle opens (``PolicyConfig.residency``). A
  malformed constraint is an error naming the job and the term. A running job placed by rule
  *running placement* is placed on the nodes its own constraint allows.
* *checkpoint kind* (rule *preemption cost*, ``predictor.policy.preemption``): the declared
  ``checkpoint_kind``; else ``application`` when the job declares a checkpoint interval (periodic
  saves are the application's); else unknown. *Checkpoint size*: the declared
  ``checkpoint_size_gb``; else for a system snapshot the GPU memory it holds (its measured peak per
  GPU, else the GPU's memory, times its share) plus its host memory (``mem_mib``); else for an
  application checkpoint 16 bytes per model parameter (weights and Adam moments) when
  ``model_params`` is known; else unknown.

Inputs are canonical job records (``features.schema``) as a DataFrame or a mapping of column name to
array, with predictions (``models.prediction.PREDICTION_COLUMNS``) in the same row order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.constraints import combine_constraints
from features.errors import InputError
from models.prediction import SLOWDOWN_COLUMNS
from predictor.capacity.eligibility import node_mask
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.placement import find_gang
from predictor.capacity.requests import requested_types
from predictor.policy.snapshot import CHECKPOINT_KIND_CODES, PendingJobs, RunningJobs, checkpoint_kind_codes

__all__ = ["Columns", "Names", "Vocabulary", "pending_jobs", "running_jobs", "RunningIntake", "job_constraints",
           "checkpoint_columns"]

Columns = pd.DataFrame | Mapping[str, np.ndarray]


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

    def extended(self, jobs: Columns) -> Vocabulary:
        """This vocabulary plus the names ``jobs`` (canonical records) use."""
        teams = self.teams.with_names(strings(jobs, "team"))
        tiers = self.tiers.with_names(strings(jobs, "tier"))
        queues = self.queues.with_names(strings(jobs, "queue"))
        if teams is self.teams and tiers is self.tiers and queues is self.queues:
            return self
        return Vocabulary(teams, tiers, queues)


def length(table: Columns) -> int:
    if isinstance(table, pd.DataFrame):
        return len(table)
    return len(next(iter(table.values()))) if len(table) else 0


def strings(table: Columns, col: str) -> np.ndarray:
    """A string column as objects (None for null); all None when absent."""
    if col not in table:
        return np.full(length(table), None, dtype=object)
    values = table[col]
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=object, na_value=None)
    values = np.asarray(values)
    return values.astype(object) if values.dtype != object else values


def floats(table: Columns, col: str, fill: float = np.nan, n: int | None = None) -> np.ndarray:
    """A float column; missing and non-finite values (an overflowing prediction) become ``fill``
    (``n`` rows of it when the table lacks the column: an empty prediction mapping)."""
    if col not in table:
        return np.full(length(table) if n is None else n, fill, dtype=np.float64)
    values = table[col]
    values = (values.to_numpy(dtype=np.float64, na_value=fill) if isinstance(values, pd.Series)
              else np.asarray(values, dtype=np.float64))
    return np.where(np.isfinite(values), values, fill)


def job_constraints(jobs: Columns, ids: np.ndarray | None = None) -> np.ndarray | None:
    """Rule *job constraint*: each job's own constraint text (None where none); None when no job has one.

    Raises
    ------
    InputError
        A constraint is malformed (the message names the job and the term).
    """
    own, data_class = strings(jobs, "constraints"), strings(jobs, "data_class")
    if not any(isinstance(v, str) for v in own) and not any(isinstance(v, str) for v in data_class):
        return None
    ids = strings(jobs, "job_id") if ids is None else ids
    cache: dict[tuple[object, object], str | None] = {}
    out = np.full(len(own), None, dtype=object)
    for i, key in enumerate(zip(own.tolist(), data_class.tolist(), strict=True)):
        if key == (None, None):
            continue
        hit = cache.get(key, "")
        if hit == "":
            text, cls = key
            try:
                hit = combine_constraints(text, f"data_class={cls.strip()}" if isinstance(cls, str) and cls.strip()
                                          else None)
            except ValueError as exc:
                raise InputError(f"job {ids[i]}: {exc}") from None
            cache[key] = hit
        out[i] = hit
    return out


_GB_PER_MIB = 1.0 / 1024.0
_BYTES_PER_PARAM = 16.0  # bf16 weights + fp32 master + two Adam moments (rule *checkpoint size*)


def checkpoint_columns(jobs: Columns, gpu_memory_mib: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rules *checkpoint kind* and *checkpoint size* of every row of ``jobs``: kind codes
    (``CHECKPOINT_KIND_CODES``, -1 unknown) and sizes in GB (NaN unknown). ``gpu_memory_mib`` is the
    GPU memory each job's snapshot holds (all its GPUs together; NaN where unknown)."""
    kind = checkpoint_kind_codes(strings(jobs, "checkpoint_kind"))
    interval = floats(jobs, "checkpoint_interval_s")
    kind = np.where((kind < 0) & np.isfinite(interval), CHECKPOINT_KIND_CODES["application"], kind).astype(np.int8)
    size = floats(jobs, "checkpoint_size_gb")
    system = (kind == CHECKPOINT_KIND_CODES["system"]) & ~np.isfinite(size)
    if system.any():
        host = np.nan_to_num(floats(jobs, "mem_mib"), nan=0.0)
        size = np.where(system, (np.asarray(gpu_memory_mib, dtype=np.float64) + host) * _GB_PER_MIB, size)
    app = (kind == CHECKPOINT_KIND_CODES["application"]) & ~np.isfinite(size)
    if app.any():
        size = np.where(app, floats(jobs, "model_params") * _BYTES_PER_PARAM / 1e9, size)
    return kind, size


def _slowdown(preds: Columns, n: int) -> np.ndarray:
    return np.column_stack([floats(preds, c, 1.0, n) for c in SLOWDOWN_COLUMNS]).reshape(n, len(SLOWDOWN_COLUMNS))


def pending_jobs(jobs: Columns, preds: Columns, vocab: Vocabulary, layout: ClusterLayout, now: float, *,
                 attained_gpu_s: np.ndarray | None = None) -> PendingJobs:
    """The pending-job arrays of canonical records ``jobs`` and their predictions ``preds``.

    Raises
    ------
    InputError
        A job asks for no GPU (the rules layer schedules GPU jobs only), or names no GPU model.
    """
    n = length(jobs)
    ids = strings(jobs, "job_id")
    num = floats(jobs, "num_gpus", 1.0)
    if n and not (num >= 1).all():
        bad = ids[int(np.argmax(~(num >= 1)))]
        raise InputError(f"job {bad}: num_gpus must be at least 1 to be scheduled")
    submit = floats(jobs, "submit_ts")
    milli = floats(jobs, "gpu_milli", float(MILLI))
    requested, request = requested_types(strings(jobs, "gpu_type"), layout, ids)
    fallback = (floats(preds, "fallback", 0.0, n) != 0) if "fallback" in preds else np.zeros(n, bool)
    return PendingJobs.from_columns(
        job_id=ids,
        submit_ts=np.where(np.isfinite(submit), submit, now),
        num_gpus=np.ceil(num).astype(np.int64),
        gpu_milli=np.clip(np.where(np.isfinite(milli), milli, MILLI), 1, MILLI).astype(np.int64),
        team=vocab.teams.codes(strings(jobs, "team")),
        tier=vocab.tiers.codes(strings(jobs, "tier")),
        queue=vocab.queues.codes(strings(jobs, "queue")),
        deadline_ts=floats(jobs, "deadline_ts"), time_limit_s=floats(jobs, "time_limit_s"),
        p10_s=floats(preds, "duration_p10_s", n=n), p50_s=floats(preds, "duration_p50_s", n=n),
        p90_s=floats(preds, "duration_p90_s", n=n), peak_vram_upper_mib=floats(preds, "peak_vram_upper_mib", n=n),
        slowdown=_slowdown(preds, n), attained_gpu_s=attained_gpu_s, fallback=fallback,
        model_version=strings(preds, "model_version") if "model_version" in preds else None,
        requested_types=requested, gpu_request=request, constraint=job_constraints(jobs, ids),
        peak_vram_mib=floats(preds, "peak_vram_mib", n=n),  # rule *start below the bound*
    )


@dataclass(frozen=True)
class RunningIntake:
    """The running jobs as the rules layer reads them, and those that hold nothing here.

    ``unplaced`` names the running jobs that could not be placed on the inventory (no free GPUs of
    their type where they run: they run outside it, or the job table double-books); they are left
    out of ``running``.
    """

    running: RunningJobs
    unplaced: tuple[str, ...]
    rows: np.ndarray  # row of ``jobs`` each entry of ``running`` came from


def _place(layout: ClusterLayout, free: np.ndarray, num: int, milli: int, allowed: np.ndarray | None,
           nodes: str | None, constraint: str | None = None) -> np.ndarray | None:
    """Rule *running placement* for one job without known GPUs."""
    usable = free >= milli
    names = [n for n in (nodes or "").split(",") if n]
    if names:  # where it runs is a fact: its type is whatever those nodes carry
        idx = [layout.node_index.get(n) for n in names]
        if any(i is None for i in idx):
            return None
        per_node = -(-num // len(idx))
        chosen: list[int] = []
        for i in idx:
            first, count = layout.node_first_gpu[i], layout.node_gpus[i]
            local = np.flatnonzero(usable[first:first + count])[:min(per_node, num - len(chosen))]
            chosen.extend((first + local).tolist())
        return np.array(chosen, dtype=np.int64) if len(chosen) == num else None
    if constraint is not None:  # rule *job constraint*: only on the nodes it may run on
        usable = usable & node_mask(layout, constraint)[layout.gpu_node]
    for t in range(layout.n_types):
        if allowed is not None and not allowed[t]:
            continue
        choice = find_gang(layout, usable & layout.type_masks[t], num,
                           free_milli=free if milli < MILLI else None)
        if choice is not None:
            return choice.gpus
    return None


def running_jobs(jobs: Columns, preds: Columns, vocab: Vocabulary, layout: ClusterLayout, now: float, *,
                 gpus: Sequence[Sequence[int] | None] | None = None, priority: np.ndarray | None = None,
                 attained_gpu_s: np.ndarray | None = None,
                 last_checkpoint_ts: np.ndarray | None = None) -> RunningIntake:
    """The running-job arrays of canonical records ``jobs`` (rules *running placement* and
    *predicted end*).

    Parameters
    ----------
    gpus : sequence of (sequence of int or None), optional
        Global GPU indices each job holds, where known (None or empty: place it by the rule).
    priority, attained_gpu_s, last_checkpoint_ts : ndarray, optional
        What the caller knows of each job (the priority it was started with; service received so
        far, NaN: this run only; its last checkpoint).
    """
    n = length(jobs)
    ids = strings(jobs, "job_id")
    num = np.maximum(np.ceil(floats(jobs, "num_gpus", 1.0)), 1).astype(np.int64)
    milli = np.clip(np.where(np.isfinite(m := floats(jobs, "gpu_milli", float(MILLI))), m, MILLI), 1, MILLI
                    ).astype(np.int64)
    start = floats(jobs, "start_ts")
    start = np.where(np.isfinite(start), start, now)
    allowed, _ = requested_types(strings(jobs, "gpu_type"), layout, ids) if n else (None, None)
    nodes = strings(jobs, "nodes")
    constraint = job_constraints(jobs, ids) if n else None
    free = np.full(layout.n_gpus, MILLI, dtype=np.int64)
    held: list[np.ndarray | None] = [None] * n
    known = [bool(gpus is not None and gpus[i] is not None and len(gpus[i])) for i in range(n)]
    for i in range(n):  # known allocations first: they are facts
        if known[i]:
            held[i] = np.asarray(gpus[i], dtype=np.int64)  # type: ignore[index]
            free[held[i]] -= milli[i]
    for i in np.argsort(start, kind="stable"):
        if not known[i]:
            got = _place(layout, free, int(num[i]), int(milli[i]), None if allowed is None else allowed[i], nodes[i],
                         None if constraint is None else constraint[i])
            if got is not None:
                free[got] -= milli[i]
                held[i] = got
    rows = np.array([i for i in range(n) if held[i] is not None], dtype=np.int64)
    unplaced = tuple(str(ids[i]) for i in range(n) if held[i] is None)
    slow = _slowdown(preds, n)
    p90 = floats(preds, "duration_p90_s", n=n)
    cls = np.array([layout.placement_class(held[i]) for i in rows], dtype=np.int64)
    predicted_end = start[rows] + p90[rows] * (slow[rows, cls] if len(rows) else 1.0)

    def pick(values: np.ndarray | None, fill: float) -> np.ndarray:
        return np.full(len(rows), fill) if values is None else np.asarray(values, dtype=np.float64)[rows]

    peak = floats(jobs, "peak_vram_mib")
    held_mib = np.array([(peak[i] if np.isfinite(peak[i]) else
                          float(layout.type_memory_mib[layout.gpu_type[held[i]]].mean()) * milli[i] / MILLI)
                         * len(held[i]) if held[i] is not None and len(held[i]) else np.nan for i in range(n)])
    kind, size = checkpoint_columns(jobs, held_mib)
    kind, size = kind[rows], size[rows]
    running = RunningJobs.from_columns(
        job_id=ids[rows], gpus=[held[i] for i in rows], start_ts=start[rows], gpu_milli=milli[rows],
        team=vocab.teams.codes(strings(jobs, "team")[rows]), tier=vocab.tiers.codes(strings(jobs, "tier")[rows]),
        queue=vocab.queues.codes(strings(jobs, "queue")[rows]), predicted_end_ts=predicted_end,
        last_checkpoint_ts=pick(last_checkpoint_ts, np.nan),
        checkpoint_interval_s=floats(jobs, "checkpoint_interval_s")[rows],
        priority=np.zeros(len(rows), np.int64) if priority is None else np.asarray(priority, np.int64)[rows],
        attained_gpu_s=pick(attained_gpu_s, np.nan), submit_ts=floats(jobs, "submit_ts")[rows],
        checkpoint_kind=kind, checkpoint_size_gb=size,
    )
    return RunningIntake(running=running, unplaced=unplaced, rows=rows)
