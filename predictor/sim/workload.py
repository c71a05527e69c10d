"""The replayed workload: a canonical job table turned into arrays, with the ground truth a replay
needs and the rows it cannot replay set aside with a reason.

Ground truth, per job
---------------------
*Work* (``work_s``): the run time on the best placement. For an ended run it is the observed
``duration_s`` divided by the true slowdown of the placement class it ran on (when
``placement_class`` is known; a run that failed or was cancelled after some time is replayed for that
much work). With ground truth (``true_duration_s``, the synthetic generator's), a job whose outcome
the log does not show (out of memory, preempted, still running or never started when the log
ended) gets its true duration. Without ground truth a right-censored row is replayed with its observed lower bound
and counted in ``JobTable.censored``, and a row that never started is skipped.

*Slowdown per placement class* (``slowdown``, shape ``(n_jobs, len(PLACEMENT_CLASSES))``): the
run-time multiplier a placement of that class causes. From ``true_slowdown_<class>`` columns when
present (synthetic ground truth), else from :func:`default_slowdowns`, which applies
:data:`DEFAULT_SLOWDOWN_BY_CLASS` to multi-GPU jobs and 1.0 to single-GPU jobs (a single GPU has no
link to cross). Real traces do not record how placement slowed their jobs, so that table is an
assumption, stated in every report.

*GPU shares*: a single-GPU job keeps its ``gpu_milli`` (openb's GPU sharing); a gang of several
GPUs is replayed on whole GPUs (no trace here asks for shares of several GPUs).

*Peak GPU memory* (``peak_vram_mib``): ``true_peak_vram_mib`` (ground truth) when present, else the
measured label, else NaN (no out-of-memory crash is simulated for that job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from features.errors import InputError
from features.gpu_types import split_request
from features.schema import PLACEMENT_CLASSES, conform
from predictor.capacity.inventory import Inventory

__all__ = [
    "DEFAULT_SLOWDOWN_BY_CLASS",
    "JobTable",
    "SkippedJobs",
    "default_slowdowns",
    "load_workload",
]

#: Assumed run-time multiplier per placement class for multi-GPU jobs when the trace carries no
#: ground truth: data-parallel training with an all-reduce per step loses little inside an NVLink
#: island and progressively more as gradients cross PCIe, the CPU interconnect and the network.
DEFAULT_SLOWDOWN_BY_CLASS: dict[str, float] = {
    "nvlink": 1.0,
    "pcie_same_numa": 1.08,
    "cross_numa": 1.15,
    "cross_node_same_rack": 1.25,
    "cross_rack": 1.4,
}

TRUE_SLOWDOWN_COLUMNS: tuple[str, ...] = tuple(f"true_slowdown_{c}" for c in PLACEMENT_CLASSES)
_CLASS_INDEX = {c: i for i, c in enumerate(PLACEMENT_CLASSES)}
NO_TEAM = "(no team)"


@dataclass(frozen=True)
class SkippedJobs:
    """Rows of the input that were not replayed, with one reason each."""

    job_ids: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.job_ids)

    def counts(self) -> dict[str, int]:
        """Number of skipped rows per reason."""
        out: dict[str, int] = {}
        for r in self.reasons:
            out[r] = out.get(r, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True, eq=False)
class JobTable:
    """The jobs a replay submits, sorted by submit time (row ``i`` is job ``i`` everywhere).

    Attributes
    ----------
    frame : DataFrame of shape (n_jobs, n_columns)
        The canonical rows that are replayed (what prediction sources and snapshots read).
    submit_s : ndarray of float64
        Submit time, seconds since the first submission of the table.
    work_s : ndarray of float64
        True run time on the best placement (see the module docstring).
    num_gpus : ndarray of int64
        GPUs in the gang (at least 1).
    gpu_milli : ndarray of int64
        Thousandths of each GPU the job uses (1000 for whole GPUs).
    slowdown : ndarray of float64, shape (n_jobs, n_placement_classes)
        True run-time multiplier per placement class.
    peak_vram_mib : ndarray of float64
        True peak GPU memory per GPU (NaN when unknown).
    checkpoint_s : ndarray of float64
        Checkpoint interval in seconds of run time (NaN: never checkpoints).
    deadline_s : ndarray of float64
        SLA deadline relative to the origin (NaN: no deadline).
    team_code : ndarray of int64
        Index into ``teams``.
    teams : tuple of str
        Team names (``"(no team)"`` for rows without one).
    origin_ts : float
        Epoch seconds of ``submit_s == 0``.
    censored : int
        How many replayed rows carry a right-censored (lower-bound) duration.
    skipped : SkippedJobs
        Input rows not replayed and why.
    """

    frame: pd.DataFrame
    submit_s: np.ndarray
    work_s: np.ndarray
    num_gpus: np.ndarray
    gpu_milli: np.ndarray
    slowdown: np.ndarray
    peak_vram_mib: np.ndarray
    checkpoint_s: np.ndarray
    deadline_s: np.ndarray
    team_code: np.ndarray
    teams: tuple[str, ...]
    origin_ts: float
    censored: int = 0
    skipped: SkippedJobs = field(default_factory=SkippedJobs)

    def __len__(self) -> int:
        return len(self.submit_s)

    @cached_property
    def time_limit_s(self) -> np.ndarray:
        """Each job's time limit in seconds (NaN: none); the replay ends a run at it (TIMEOUT)."""
        if "time_limit_s" not in self.frame.columns:
            return np.full(len(self), np.nan)
        limit = self.frame["time_limit_s"].to_numpy(dtype="float64", na_value=np.nan)
        return np.where(limit > 0, limit, np.nan)

    @cached_property
    def job_ids(self) -> np.ndarray:
        """Job ids as an object array of str (computed once)."""
        return self.frame["job_id"].astype(str).to_numpy(dtype=object)

    @cached_property
    def milli_demand(self) -> np.ndarray:
        """Total thousandths of a GPU each job holds while running (num_gpus x gpu_milli)."""
        return self.num_gpus * self.gpu_milli

    def take(self, rows: np.ndarray) -> JobTable:
        """The table of the jobs at ``rows`` (ascending positions: the submit order is kept); ``teams``
        and ``origin_ts`` are kept, so team codes and times mean the same in both tables."""
        rows = np.asarray(rows, dtype=np.int64)
        return JobTable(
            frame=self.frame.iloc[rows].reset_index(drop=True), submit_s=self.submit_s[rows],
            work_s=self.work_s[rows], num_gpus=self.num_gpus[rows], gpu_milli=self.gpu_milli[rows],
            slowdown=self.slowdown[rows], peak_vram_mib=self.peak_vram_mib[rows],
            checkpoint_s=self.checkpoint_s[rows], deadline_s=self.deadline_s[rows],
            team_code=self.team_code[rows], teams=self.teams, origin_ts=self.origin_ts)

    def class_index(self, placement_class: str) -> int:
        """Column of ``slowdown`` for a placement class; ``InputError`` for an unknown one."""
        try:
            return _CLASS_INDEX[placement_class]
        except KeyError:
            raise InputError(f"unknown placement class {placement_class!r}; expected one of {PLACEMENT_CLASSES}") from None


def default_slowdowns(num_gpus: np.ndarray) -> np.ndarray:
    """The assumed slowdown table for jobs without ground truth: 1.0 for one GPU, the table otherwise."""
    table = np.array([DEFAULT_SLOWDOWN_BY_CLASS[c] for c in PLACEMENT_CLASSES])
    out = np.ones((len(num_gpus), len(PLACEMENT_CLASSES)))
    multi = np.asarray(num_gpus) > 1
    out[multi] = table
    return out


def _true_slowdowns(frame: pd.DataFrame, num_gpus: np.ndarray) -> tuple[np.ndarray, bool]:
    if all(c in frame.columns for c in TRUE_SLOWDOWN_COLUMNS):
        s = frame[list(TRUE_SLOWDOWN_COLUMNS)].to_numpy(dtype="float64")
        fallback = default_slowdowns(num_gpus)
        s = np.where(np.isfinite(s) & (s >= 1.0), s, fallback)
        return np.maximum.accumulate(s, axis=1), True
    return default_slowdowns(num_gpus), False


def _observed_work_rows(frame: pd.DataFrame) -> pd.Series:
    """Rows whose work comes from the observed ``duration_s`` (see the module docstring)."""
    if "true_duration_s" not in frame.columns:
        return frame["duration_s"].notna()
    unseen = frame["censored"] | frame["state"].isin(["OUT_OF_MEMORY", "PREEMPTED", "PENDING", "RUNNING"])
    return frame["duration_s"].notna() & ~unseen & frame["true_duration_s"].notna()


def _work_s(frame: pd.DataFrame) -> pd.Series:
    """Work before the placement correction: observed duration, or the truth where it is unseen."""
    observed = frame["duration_s"].astype("float64")
    if "true_duration_s" not in frame.columns:
        return observed
    truth = frame["true_duration_s"].astype("float64")
    return observed.where(_observed_work_rows(frame), truth)


def load_workload(jobs: pd.DataFrame) -> tuple[JobTable, bool]:
    """Turn a canonical job table into a :class:`JobTable` (sorted by submit time).

    Parameters
    ----------
    jobs : DataFrame of shape (n_rows, n_columns)
        Canonical rows (``features.schema``), e.g. the output of a reader or ``features.synth``.
        Extra ground-truth columns (``true_duration_s``, ``true_slowdown_<class>``) are used where
        present.

    Returns
    -------
    table : JobTable
        The replayable rows; the others are in ``table.skipped`` with a reason each: unknown run
        time (never started), no GPU requested, or a non-positive run time.
    has_slowdown_truth : bool
        True when slowdowns came from ground-truth columns rather than the assumed table.

    Raises
    ------
    InputError
        When the table is empty or has no replayable row.
    """
    if jobs is None or len(jobs) == 0:
        raise InputError("the job table is empty: nothing to replay")
    frame = conform(jobs)
    reasons = pd.Series(pd.NA, index=frame.index, dtype="string")

    def skip(mask: pd.Series, why: str) -> None:
        mask = mask.fillna(False).astype(bool) & reasons.isna()
        reasons[mask] = why

    work = _work_s(frame)
    skip(frame["job_id"].isna(), "missing job_id")
    skip(frame["submit_ts"].isna(), "missing submit time")
    skip(frame["num_gpus"].isna() | (frame["num_gpus"] <= 0), "no GPU requested (CPU-only job)")
    skip(work.isna(), "run time unknown (never started)")
    skip(work <= 0, "non-positive run time")
    skip(frame["job_id"].duplicated(keep="first"), "duplicate job_id")
    bad = reasons.notna()
    skipped = SkippedJobs(tuple(frame.loc[bad, "job_id"].astype(str)), tuple(reasons[bad].astype(str)))
    keep = frame.loc[~bad]
    work = work[~bad]
    if keep.empty:
        counts = ", ".join(f"{k}: {v}" for k, v in skipped.counts().items())
        raise InputError(f"no replayable job in the table ({len(frame)} rows skipped: {counts})")

    order = np.argsort(keep["submit_ts"].to_numpy(dtype="float64"), kind="stable")
    keep = keep.iloc[order].reset_index(drop=True)
    work = work.to_numpy(dtype="float64")[order]
    num_gpus = np.ceil(keep["num_gpus"].to_numpy(dtype="float64")).astype(np.int64)
    milli = keep["gpu_milli"].to_numpy(dtype="float64")
    milli = np.where(np.isfinite(milli) & (num_gpus == 1), milli, 1000.0).astype(np.int64)
    slowdown, truth = _true_slowdowns(keep, num_gpus)
    ran_on = keep["placement_class"].map(_CLASS_INDEX)
    observed = _observed_work_rows(keep).to_numpy()
    rows = np.flatnonzero(observed & ran_on.notna().to_numpy())
    work[rows] = work[rows] / slowdown[rows, ran_on.iloc[rows].astype(int).to_numpy()]
    peak = keep["true_peak_vram_mib"] if "true_peak_vram_mib" in keep.columns else keep["peak_vram_mib"]
    origin = float(keep["submit_ts"].iloc[0])
    teams_raw = keep["team"].fillna(NO_TEAM).astype(str)
    codes, uniques = pd.factorize(teams_raw, sort=True)
    table = JobTable(
        frame=keep,
        submit_s=keep["submit_ts"].to_numpy(dtype="float64") - origin,
        work_s=work,
        num_gpus=num_gpus,
        gpu_milli=milli,
        slowdown=slowdown,
        peak_vram_mib=peak.to_numpy(dtype="float64"),
        checkpoint_s=keep["checkpoint_interval_s"].to_numpy(dtype="float64"),
        deadline_s=keep["deadline_ts"].to_numpy(dtype="float64") - origin,
        team_code=codes.astype(np.int64),
        teams=tuple(str(u) for u in uniques),
        origin_ts=origin,
        censored=int(keep["censored"].sum()),
        skipped=skipped,
    )
    return table, truth


def requests_on_inventory(frame: pd.DataFrame, inventory: Inventory) -> tuple[pd.DataFrame, dict[str, int]]:
    """A trace's GPU requests as the replayed inventory names them (a what-if inventory may lack the
    types the trace's cluster had).

    Each request (``"A10|a100"``) keeps the names the inventory has a type for, spelt the inventory's
    way (``features.gpu_types``); a request naming none of the inventory's types becomes "any type"
    (null), and is counted per request in the returned mapping (``report.json`` says so). Canonical
    columns only are touched; rows are not reordered.
    """
    if "gpu_type" not in frame.columns or frame["gpu_type"].isna().all():
        return frame, {}
    vocab = inventory.vocabulary
    present = set(inventory.gpus_by_type())
    mapped: dict[str, str | None] = {}
    dropped: dict[str, int] = {}
    for request in frame["gpu_type"].dropna().unique().tolist():
        names = [t for part in split_request(str(request)) for t in vocab.matches(part) if t in present]
        mapped[request] = "|".join(dict.fromkeys(names)) or None
    out = frame.copy()
    values = out["gpu_type"].astype(object).where(out["gpu_type"].notna(), None)
    new = values.map(lambda v: mapped.get(v) if v is not None else None)
    lost = values.notna() & new.isna()
    for request, count in values[lost].value_counts().items():
        dropped[str(request)] = int(count)
    out["gpu_type"] = pd.array(new.tolist(), dtype="string")
    return out, dropped
