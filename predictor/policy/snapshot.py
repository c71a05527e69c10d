"""The frozen input of one scheduling cycle: ``ClusterSnapshot`` (Kueue's "snapshot" phase).

Everything is a struct of arrays (one numpy array per field, row ``i`` = job ``i``) so a caller that
keeps its own arrays (the replay keeps the whole trace in arrays; the service keeps its queue) builds
a snapshot with a few fancy-index operations, never thousands of objects per cycle. Names are
interned: ``team``/``tier``/``queue`` hold integer codes into the snapshot's ``teams``/``tiers``/
``queues`` tuples (``-1`` = none), shared by pending and running jobs.

Units: seconds and epoch seconds (``*_s``, ``*_ts``), MiB, thousandths of a GPU (``gpu_milli``).
Unknown numbers are NaN (never 0 or -1). GPU indices are the global indices of
``predictor.capacity.layout.ClusterLayout`` (node-contiguous, inventory order).

Builders that start from records or DataFrames live in ``tests.builders``.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

import numpy as np

from features.job_conventions import CHECKPOINT_KINDS
from features.schema import PLACEMENT_CLASSES
from predictor.capacity.layout import MILLI, ClusterLayout

__all__ = ["PendingJobs", "RunningJobs", "ClusterSnapshot", "CHECKPOINT_KIND_CODES", "checkpoint_kind_codes"]

N_CLASSES = len(PLACEMENT_CLASSES)
#: ``RunningJobs.checkpoint_kind`` code of each kind (``features.job_conventions.CHECKPOINT_KINDS``).
CHECKPOINT_KIND_CODES: dict[str, int] = {k: i for i, k in enumerate(CHECKPOINT_KINDS)}


def checkpoint_kind_codes(values: object) -> np.ndarray:
    """Codes of checkpoint kind names (int codes pass through; unknown or null -> -1)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int8)
    return np.fromiter((CHECKPOINT_KIND_CODES.get(v, -1) if isinstance(v, str) else -1 for v in arr.tolist()),
                       dtype=np.int8, count=len(arr))


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _unchecked(cls: type, kw: dict):
    """An instance of the frozen dataclass ``cls`` from ``kw`` (absent fields take their defaults)
    without ``__post_init__``'s row-count checks."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = {f.name: f.default for f in fields(cls)}  # type: ignore[arg-type]
    obj = object.__new__(cls)
    for name, default in defaults.items():
        if name in kw:
            object.__setattr__(obj, name, kw[name])
        elif default is MISSING:
            raise TypeError(f"{cls.__name__} needs {name}")
        else:
            object.__setattr__(obj, name, default)
    return obj


_DEFAULTS: dict[type, dict[str, object]] = {}


def _check_len(obj: object, n: int, skip: tuple[str, ...] = ()) -> None:
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))  # type: ignore[arg-type]
    for name in names:
        if name in skip:
            continue
        v = getattr(obj, name)
        if isinstance(v, np.ndarray) and v.shape[:1] != (n,):
            raise ValueError(f"{type(obj).__name__}.{name} has {v.shape[0]} rows, expected {n}")


@dataclass(frozen=True, eq=False)
class PendingJobs:
    """Jobs waiting to run, one row each.

    Attributes
    ----------
    job_id : ndarray of object (str)
    team, tier, queue : ndarray of int64
        Codes into the snapshot's ``teams``, ``tiers`` (the job's own tier name; the policy resolves
        aliases and the default tier) and ``queues``; ``-1`` = none.
    submit_ts : ndarray of float64
    num_gpus : ndarray of int64
        Gang size (>= 1).
    gpu_milli : ndarray of int64
        Share of each GPU, 1..1000 (1000 = whole GPUs).
    requested_types : ndarray of bool, shape (n_jobs, n_types) or None
        GPU types (layout codes) the job accepts; None = any type.
    gpu_request : ndarray of object or None
        The request as written (``"V100M16|V100M32"``), for messages about types the cluster lacks.
    constraint : ndarray of object or None
        The job's own placement constraint (canonical text, ``features.constraints``; a
        ``data_class=`` term for its data class), None where it has none; the policy's residency
        rules are added per cycle (docs/residency.md). None: no job has one.
    deadline_ts, time_limit_s : ndarray of float64
        NaN when none.
    p10_s, p50_s, p90_s : ndarray of float64
        Predicted duration quantiles on the best placement; NaN when unknown.
    peak_vram_upper_mib : ndarray of float64
        Predicted upper bound of peak memory per GPU; NaN when unknown.
    peak_vram_mib : ndarray of float64 or None
        Predicted peak memory per GPU (the point estimate; rule *start below the bound*); None: not
        given (no job starts below its bound).
    slowdown : ndarray of float64, shape (n_jobs, 5)
        Predicted run-time multiplier per placement class.
    attained_gpu_s : ndarray of float64
        GPU-seconds of service received in earlier attempts (2D-LAS); 0 for a fresh job.
    fallback : ndarray of bool
        True when the prediction came from a fallback.
    model_version : ndarray of object
    """

    job_id: np.ndarray
    team: np.ndarray
    tier: np.ndarray
    queue: np.ndarray
    submit_ts: np.ndarray
    num_gpus: np.ndarray
    gpu_milli: np.ndarray
    deadline_ts: np.ndarray
    time_limit_s: np.ndarray
    p10_s: np.ndarray
    p50_s: np.ndarray
    p90_s: np.ndarray
    peak_vram_upper_mib: np.ndarray
    slowdown: np.ndarray
    attained_gpu_s: np.ndarray
    fallback: np.ndarray
    model_version: np.ndarray
    requested_types: np.ndarray | None = None
    gpu_request: np.ndarray | None = None
    constraint: np.ndarray | None = None  # residency (docs/residency.md)
    peak_vram_mib: np.ndarray | None = None  # rule *start below the bound* (predictor.capacity.sizing)

    def __post_init__(self) -> None:
        _check_len(self, len(self.job_id), skip=())

    def __len__(self) -> int:
        return len(self.job_id)

    @classmethod
    def unchecked(cls, **columns) -> PendingJobs:
        """The same object as ``PendingJobs(**columns)`` without the row-count checks: for a caller whose
        columns are gathers of the same rows (the replay's seam, every cycle)."""
        return _unchecked(cls, columns)

    def take(self, rows: np.ndarray) -> PendingJobs:
        """The subset ``rows`` (an index array or boolean mask), in that order."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v[rows] if isinstance(v, np.ndarray) else v
        return PendingJobs(**kw)

    @classmethod
    def empty(cls) -> PendingJobs:
        return cls.from_columns(job_id=np.zeros(0, dtype=object))

    @classmethod
    def from_columns(cls, *, job_id, submit_ts=None, num_gpus=None, gpu_milli=None, team=None, tier=None,
                     queue=None, deadline_ts=None, time_limit_s=None, p10_s=None, p50_s=None, p90_s=None,
                     peak_vram_upper_mib=None, slowdown=None, attained_gpu_s=None, fallback=None,
                     model_version=None, requested_types=None, gpu_request=None,
                     constraint=None, peak_vram_mib=None) -> PendingJobs:
        """Build from arrays, filling absent columns with their "unknown" value (NaN, -1, 1.0...)."""
        job_id = np.asarray(job_id, dtype=object)
        n = len(job_id)

        def f64(v, fill=np.nan):
            return np.full(n, fill, dtype=np.float64) if v is None else np.asarray(v, dtype=np.float64)

        def i64(v, fill):
            return np.full(n, fill, dtype=np.int64) if v is None else np.asarray(v, dtype=np.int64)

        p50 = f64(p50_s)
        return cls(
            job_id=job_id,
            team=i64(team, -1), tier=i64(tier, -1), queue=i64(queue, -1),
            submit_ts=f64(submit_ts, 0.0),
            num_gpus=i64(num_gpus, 1), gpu_milli=i64(gpu_milli, MILLI),
            deadline_ts=f64(deadline_ts), time_limit_s=f64(time_limit_s),
            p10_s=f64(p10_s) if p10_s is not None else p50.copy(), p50_s=p50,
            p90_s=f64(p90_s) if p90_s is not None else p50.copy(),
            peak_vram_upper_mib=f64(peak_vram_upper_mib),
            slowdown=np.ones((n, N_CLASSES)) if slowdown is None else np.asarray(slowdown, dtype=np.float64),
            attained_gpu_s=f64(attained_gpu_s, 0.0),
            fallback=np.zeros(n, dtype=bool) if fallback is None else np.asarray(fallback, dtype=bool),
            model_version=np.full(n, "fallback", dtype=object) if model_version is None
            else np.asarray(model_version, dtype=object),
            requested_types=None if requested_types is None else np.asarray(requested_types, dtype=bool),
            gpu_request=None if gpu_request is None else np.asarray(gpu_request, dtype=object),
            constraint=None if constraint is None else np.asarray(constraint, dtype=object),
            peak_vram_mib=None if peak_vram_mib is None else np.asarray(peak_vram_mib, dtype=np.float64),
        )


@dataclass(frozen=True, eq=False)
class RunningJobs:
    """Jobs holding GPUs, one row each, with their allocation in CSR form.

    Job ``i`` holds ``gpu_milli[i]`` of each GPU in ``alloc_gpus[alloc_offsets[i]:alloc_offsets[i+1]]``.
    ``predicted_end_ts`` is the start plus the predicted p90 run time on the placement it got (NaN
    when unknown); ``priority`` the integer priority it was started with (the scale of
    ``Decision.priority``); ``last_checkpoint_ts`` / ``checkpoint_interval_s`` NaN when unknown;
    ``submit_ts`` the job's original submission (FIFO position under LAS; None: its start time);
    ``attained_gpu_s`` the GPU-seconds of service it has received up to ``now``, earlier attempts and
    the current run included (2D-LAS; NaN: the current run only, ``(now - start) x GPUs x share``).
    ``checkpoint_kind`` codes into ``CHECKPOINT_KIND_CODES`` (-1 unknown) and ``checkpoint_size_gb``
    (NaN unknown) feed rule *preemption cost* (``predictor.policy.preemption``); None: all unknown.
    """

    job_id: np.ndarray
    team: np.ndarray
    tier: np.ndarray
    queue: np.ndarray
    num_gpus: np.ndarray
    gpu_milli: np.ndarray
    start_ts: np.ndarray
    predicted_end_ts: np.ndarray
    last_checkpoint_ts: np.ndarray
    checkpoint_interval_s: np.ndarray
    priority: np.ndarray
    attained_gpu_s: np.ndarray
    alloc_offsets: np.ndarray = field(repr=False)
    alloc_gpus: np.ndarray = field(repr=False)
    submit_ts: np.ndarray | None = None
    checkpoint_kind: np.ndarray | None = None  # int8 codes into CHECKPOINT_KIND_CODES, -1 unknown
    checkpoint_size_gb: np.ndarray | None = None

    def __post_init__(self, check: bool = True) -> None:
        n = len(self.job_id)
        if self.submit_ts is None:
            object.__setattr__(self, "submit_ts", self.start_ts.copy())
        if self.checkpoint_kind is None:
            object.__setattr__(self, "checkpoint_kind", np.full(n, -1, dtype=np.int8))
        if self.checkpoint_size_gb is None:
            object.__setattr__(self, "checkpoint_size_gb", np.full(n, np.nan))
        if not check:
            return
        _check_len(self, n, skip=("alloc_offsets", "alloc_gpus"))
        if self.alloc_offsets.shape != (n + 1,) or self.alloc_offsets[-1] != len(self.alloc_gpus):
            raise ValueError("RunningJobs.alloc_offsets must have n_jobs + 1 entries ending at len(alloc_gpus)")

    def __len__(self) -> int:
        return len(self.job_id)

    @classmethod
    def unchecked(cls, **columns) -> RunningJobs:
        """The same object as ``RunningJobs(**columns)`` (defaults filled in) without the row-count and
        CSR checks: for a caller whose columns are gathers of the same rows (the replay's seam)."""
        obj = _unchecked(cls, columns)
        obj.__post_init__(check=False)
        return obj

    def gpus_of(self, i: int) -> np.ndarray:
        return self.alloc_gpus[self.alloc_offsets[i]:self.alloc_offsets[i + 1]]

    @property
    def alloc_job(self) -> np.ndarray:
        """Job row of every entry of ``alloc_gpus``."""
        return np.repeat(np.arange(len(self)), np.diff(self.alloc_offsets))

    @classmethod
    def empty(cls) -> RunningJobs:
        return cls.from_columns(job_id=np.zeros(0, dtype=object), gpus=[])

    @classmethod
    def from_columns(cls, *, job_id, gpus, start_ts=None, gpu_milli=None, team=None, tier=None, queue=None,
                     predicted_end_ts=None, last_checkpoint_ts=None, checkpoint_interval_s=None,
                     priority=None, attained_gpu_s=None, submit_ts=None, checkpoint_kind=None,
                     checkpoint_size_gb=None) -> RunningJobs:
        """Build from arrays plus ``gpus``: one sequence of global GPU indices per job."""
        job_id = np.asarray(job_id, dtype=object)
        n = len(job_id)
        counts = np.array([len(g) for g in gpus], dtype=np.int64)
        if len(counts) != n:
            raise ValueError(f"{len(counts)} allocations for {n} running jobs")
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        flat = np.concatenate([np.asarray(g, dtype=np.int64) for g in gpus]) if n else np.zeros(0, np.int64)

        def f64(v, fill=np.nan):
            return np.full(n, fill, dtype=np.float64) if v is None else np.asarray(v, dtype=np.float64)

        def i64(v, fill):
            return np.full(n, fill, dtype=np.int64) if v is None else np.asarray(v, dtype=np.int64)

        return cls(
            job_id=job_id, team=i64(team, -1), tier=i64(tier, -1), queue=i64(queue, -1),
            num_gpus=counts, gpu_milli=i64(gpu_milli, MILLI), start_ts=f64(start_ts, 0.0),
            predicted_end_ts=f64(predicted_end_ts), last_checkpoint_ts=f64(last_checkpoint_ts),
            checkpoint_interval_s=f64(checkpoint_interval_s), priority=i64(priority, 0),
            attained_gpu_s=f64(attained_gpu_s), alloc_offsets=offsets, alloc_gpus=flat,
            submit_ts=None if submit_ts is None else np.where(np.isfinite(f64(submit_ts)), f64(submit_ts),
                                                              f64(start_ts, 0.0)),
            checkpoint_kind=None if checkpoint_kind is None else checkpoint_kind_codes(checkpoint_kind),
            checkpoint_size_gb=None if checkpoint_size_gb is None else f64(checkpoint_size_gb),
        )


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    """Everything ``decide()`` reads, at one instant.

    Attributes
    ----------
    now : float
        Epoch seconds (virtual clock in a replay, wall clock in the service).
    layout : ClusterLayout
        The compiled inventory (``ClusterLayout.of(inventory)``).
    pending, running : PendingJobs, RunningJobs
    teams, tiers, queues : tuple of str
        Vocabularies of the integer codes.
    team_usage_gpu_s : ndarray of float64, shape (n_teams,)
        Decayed GPU-second usage of each team at ``now`` (``FairShareLedger.usage_at``).
    free_milli : ndarray of int64, shape (n_gpus,)
        Free thousandths of each GPU. Derived from the running allocations when not given; a
        caller that maintains it incrementally passes it (it must equal 1000 - allocated).
    """

    now: float
    layout: ClusterLayout
    pending: PendingJobs
    running: RunningJobs
    teams: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    team_usage_gpu_s: np.ndarray | None = None
    free_milli: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.team_usage_gpu_s is None:
            object.__setattr__(self, "team_usage_gpu_s", np.zeros(len(self.teams)))
        elif len(self.team_usage_gpu_s) != len(self.teams):
            raise ValueError(f"team_usage_gpu_s has {len(self.team_usage_gpu_s)} entries for {len(self.teams)} teams")
        if self.free_milli is None:
            free = np.full(self.layout.n_gpus, MILLI, dtype=np.int64)
            if len(self.running.alloc_gpus):
                milli = np.repeat(self.running.gpu_milli, np.diff(self.running.alloc_offsets))
                np.subtract.at(free, self.running.alloc_gpus, milli)
            object.__setattr__(self, "free_milli", free)
        elif self.free_milli.shape != (self.layout.n_gpus,):
            raise ValueError(f"free_milli has shape {self.free_milli.shape}, expected ({self.layout.n_gpus},)")

    def validate(self) -> ClusterSnapshot:
        """Check every invariant (codes in range, shares 1..1000, no GPU over-allocated); return self.

        O(n_jobs + n_gpus); the builders call it, the hot path of a replay need not.
        """
        p, r, lay = self.pending, self.running, self.layout
        problems: list[str] = []
        for name, jobs in (("pending", p), ("running", r)):
            if len(jobs) and (jobs.num_gpus < 1).any():
                problems.append(f"{name} job {jobs.job_id[np.argmax(jobs.num_gpus < 1)]} has no GPU")
            bad = (jobs.gpu_milli < 1) | (jobs.gpu_milli > MILLI)
            if bad.any():
                problems.append(f"{name} job {jobs.job_id[np.argmax(bad)]}: gpu_milli outside 1..1000")
            for attr, vocab in (("team", self.teams), ("tier", self.tiers), ("queue", self.queues)):
                codes = getattr(jobs, attr)
                if len(codes) and ((codes < -1) | (codes >= len(vocab))).any():
                    problems.append(f"{name} {attr} codes outside the {attr} vocabulary")
        if len(p) and not np.isfinite(p.submit_ts).all():
            problems.append("pending submit_ts must be finite")
        if len(p) and p.slowdown.shape != (len(p), N_CLASSES):
            problems.append(f"pending slowdown must have shape (n, {N_CLASSES})")
        if p.requested_types is not None and p.requested_types.shape != (len(p), lay.n_types):
            problems.append(f"pending requested_types must have shape (n, {lay.n_types})")
        if len(r.alloc_gpus) and ((r.alloc_gpus < 0) | (r.alloc_gpus >= lay.n_gpus)).any():
            problems.append("running allocation names a GPU outside the inventory")
        if (self.free_milli < 0).any():
            g = int(np.argmax(self.free_milli < 0))
            problems.append(f"GPU {lay.gpu_indices_by_node(np.array([g]))} is over-allocated")
        if len(set(p.job_id.tolist()) | set(r.job_id.tolist())) != len(p) + len(r):
            problems.append("a job id appears twice among pending and running jobs")
        if problems:
            raise ValueError("invalid snapshot: " + "; ".join(problems))
        return self
