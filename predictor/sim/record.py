"""What a replay leaves behind: per-job outcomes, run segments, the queue over time and counters.

The loop appends to compact ``array.array`` buffers while it runs (no per-event dicts); metrics and
reports read the finished :class:`ReplayRecord` as numpy arrays.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from predictor.sim.progress import JobProgress, JobStatus
from predictor.sim.workload import JobTable

__all__ = ["SegmentEnd", "ReplayRecorder", "ReplayRecord"]


class SegmentEnd:
    """How a run segment ended (values stored in ``ReplayRecord.seg_end_kind``)."""

    COMPLETED = 0
    PREEMPTED = 1
    OOM = 2
    TIMEOUT = 3  # ended at its time limit


class ReplayRecorder:
    """Append-only buffers filled by the replay loop."""

    def __init__(self) -> None:
        self.seg_job = array("q")
        self.seg_start = array("d")
        self.seg_end = array("d")
        self.seg_kind = array("b")
        self.seg_lost_s = array("d")
        self.seg_class = array("b")
        self.queue_t = array("d")
        self.queue_len = array("q")
        self.decide_calls = 0
        self.decide_s = 0.0
        self.steps = 0
        self.reservations_made = 0
        self.reservation_starts = 0  # jobs started on the placement their reservation held
        self.rejected_by_rules: dict[int, str] = {}

    def segment(self, job: int, start: float, end: float, kind: int, lost_s: float = 0.0,
                placement_class: int = 0) -> None:
        self.seg_class.append(placement_class)
        self.seg_job.append(job)
        self.seg_start.append(start)
        self.seg_end.append(end)
        self.seg_kind.append(kind)
        self.seg_lost_s.append(lost_s)

    def queue(self, now: float, pending: int) -> None:
        if self.queue_t and self.queue_t[-1] == now:
            self.queue_len[-1] = pending
        else:
            self.queue_t.append(now)
            self.queue_len.append(pending)


@dataclass(frozen=True)
class ReplayRecord:
    """The outcome of one policy's replay.

    Per-job arrays are indexed like the :class:`JobTable`; times are seconds since its origin.
    """

    policy: str
    jobs: JobTable
    status: np.ndarray
    first_start: np.ndarray
    end: np.ndarray
    wait_s: np.ndarray
    queued_since: np.ndarray
    run_s: np.ndarray
    preemptions: np.ndarray
    lost_s: np.ndarray
    oom_failures: np.ndarray
    placement_class: np.ndarray
    seg_job: np.ndarray
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_kind: np.ndarray
    seg_lost_s: np.ndarray
    seg_class: np.ndarray  # placement class index of the run
    queue_t: np.ndarray
    queue_len: np.ndarray
    total_gpus: int
    end_time: float
    events: int
    steps: int
    decide_calls: int
    decide_s: float
    wall_s: float
    reservations_made: int = 0
    reservation_starts: int = 0
    rejected_reasons: dict[int, str] = field(default_factory=dict)
    team_shares: dict[str, float] = field(default_factory=dict)  # configured entitlement weights
    notes: tuple[str, ...] = ()
    pred_p50_s: np.ndarray | None = None  # the p50 run time the policy was told at submit (NaN: none)

    @classmethod
    def build(cls, *, policy: str, jobs: JobTable, progress: JobProgress, recorder: ReplayRecorder,
              total_gpus: int, end_time: float, events: int, wall_s: float,
              team_shares: dict[str, float] | None = None, notes: tuple[str, ...] = (),
              pred_p50_s: np.ndarray | None = None) -> ReplayRecord:
        r = recorder
        return cls(
            policy=policy,
            jobs=jobs,
            status=progress.status.copy(),
            first_start=progress.first_start.copy(),
            end=progress.end.copy(),
            wait_s=progress.wait_s.copy(),
            queued_since=progress.queued_since.copy(),
            run_s=progress.run_s.copy(),
            preemptions=progress.preemptions.copy(),
            lost_s=progress.lost_s.copy(),
            oom_failures=progress.oom_failures.copy(),
            placement_class=progress.placement_class.copy(),
            seg_job=np.frombuffer(r.seg_job, dtype=np.int64).copy(),
            seg_start=np.frombuffer(r.seg_start, dtype=np.float64).copy(),
            seg_end=np.frombuffer(r.seg_end, dtype=np.float64).copy(),
            seg_kind=np.frombuffer(r.seg_kind, dtype=np.int8).copy(),
            seg_lost_s=np.frombuffer(r.seg_lost_s, dtype=np.float64).copy(),
            seg_class=np.frombuffer(r.seg_class, dtype=np.int8).astype(np.int64),
            queue_t=np.frombuffer(r.queue_t, dtype=np.float64).copy(),
            queue_len=np.frombuffer(r.queue_len, dtype=np.int64).copy(),
            total_gpus=total_gpus,
            end_time=end_time,
            events=events,
            steps=r.steps,
            decide_calls=r.decide_calls,
            decide_s=r.decide_s,
            wall_s=wall_s,
            reservations_made=r.reservations_made,
            reservation_starts=r.reservation_starts,
            rejected_reasons=dict(r.rejected_by_rules),
            team_shares=dict(team_shares or {}),
            notes=notes,
            pred_p50_s=None if pred_p50_s is None else np.asarray(pred_p50_s, dtype=np.float64).copy(),
        )

    def restricted(self, rows: np.ndarray) -> ReplayRecord:
        """The same replay seen through the jobs at ``rows`` only (ascending positions): their per-job
        outcomes and their run segments (renumbered), for metrics over part of a window. The cluster,
        the queue series and the replay's counters are the whole replay's."""
        rows = np.asarray(rows, dtype=np.int64)
        renumber = np.full(len(self.jobs), -1, dtype=np.int64)
        renumber[rows] = np.arange(len(rows), dtype=np.int64)
        seg = renumber[self.seg_job] >= 0
        per_job = {name: getattr(self, name)[rows] for name in (
            "status", "first_start", "end", "wait_s", "queued_since", "run_s", "preemptions", "lost_s",
            "oom_failures", "placement_class")}
        return replace(
            self, jobs=self.jobs.take(rows), **per_job,
            seg_job=renumber[self.seg_job[seg]], seg_start=self.seg_start[seg], seg_end=self.seg_end[seg],
            seg_kind=self.seg_kind[seg], seg_lost_s=self.seg_lost_s[seg], seg_class=self.seg_class[seg],
            rejected_reasons={int(renumber[j]): r for j, r in self.rejected_reasons.items() if renumber[j] >= 0},
            pred_p50_s=None if self.pred_p50_s is None else self.pred_p50_s[rows])

    def jobs_frame(self) -> pd.DataFrame:
        """One row per replayed job: ``job_id``, ``policy``, ``team``, ``num_gpus``, ``gpu_type``,
        ``submit_ts``, ``start_ts`` (first start), ``end_ts``, ``state`` (COMPLETED, TIMEOUT,
        OUT_OF_MEMORY, REJECTED, or PENDING / RUNNING when the replay ended first), ``wait_s``,
        ``time_limit_s``, ``pred_p50_s`` (what the policy was told at submit); times in epoch seconds."""
        jobs, origin = self.jobs, self.jobs.origin_ts
        n = len(jobs)
        states = np.array(["PENDING"] * n, dtype=object)
        for status, name in _STATE_NAMES.items():
            states[self.status == status] = name
        frame = jobs.frame
        return pd.DataFrame({
            "job_id": jobs.job_ids.astype(str),
            "policy": self.policy,
            "team": [jobs.teams[c] for c in jobs.team_code],
            "num_gpus": jobs.num_gpus.astype(np.int64),
            "gpu_type": frame["gpu_type"].astype("string").to_numpy() if "gpu_type" in frame else None,
            "submit_ts": jobs.submit_s + origin,
            "start_ts": self.first_start + origin,
            "end_ts": self.end + origin,
            "state": states,
            "wait_s": self.wait_s,
            "time_limit_s": jobs.time_limit_s,
            "pred_p50_s": np.full(n, np.nan) if self.pred_p50_s is None else self.pred_p50_s,
        })


_STATE_NAMES = {JobStatus.PENDING: "PENDING", JobStatus.RUNNING: "RUNNING", JobStatus.DONE: "COMPLETED",
                JobStatus.TIMEOUT: "TIMEOUT", JobStatus.REJECTED: "REJECTED", JobStatus.FAILED: "OUT_OF_MEMORY",
                JobStatus.FUTURE: "PENDING"}
