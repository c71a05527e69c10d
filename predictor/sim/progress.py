"""Job progress: how much work each job has left, and what a preemption or a crash costs it.

Rules (the physics of a replay, documented once here)
-----------------------------------------------------
- A job's *work* is its run time on the best placement. Placed with true slowdown ``s`` it makes
  progress at rate ``1 / s``: remaining work ``w`` takes ``w * s`` seconds of wall time.
- A job checkpoints every ``C`` seconds of wall time since it (re)started (``checkpoint_s``; a job
  without one uses ``SimConfig.default_checkpoint_s``, and ``inf`` means it never checkpoints).
  Checkpoints are not events: the last one before time ``t`` is ``floor((t - start) / C) * C``
  after the start, computed when needed.
- Evicted at ``t`` after running ``e = t - start`` seconds, a job keeps the work up to its last
  checkpoint, ``floor(e / C) * C / s``, and loses the rest: ``e - floor(e / C) * C`` wall seconds on
  all its GPUs (``gpu_hours_lost``). It goes back to the queue with the work it kept.
- Checkpoint kinds (``checkpoint_kind``): ``application`` (or unknown) follows the rule above;
  ``none`` never checkpoints; a ``system`` snapshot (CRIU with GPU support) keeps all the work and
  loses the time to write and restore it, ``checkpoint_size_gb / SNAPSHOT_BANDWIDTH_GB_S`` each (the
  size estimated from its GPU and host memory when not declared, as the intake does); the restore
  is added to the work its restart must do.
- A job whose true peak GPU memory exceeds the memory of the GPUs it was placed on crashes
  (out of memory) ``SimConfig.oom_after_s`` into its run (or at its end, if sooner), losing the whole
  run; it is resubmitted at once, its true peak memory now known, up to ``SimConfig.max_oom_retries``
  times, after which it ends in state OUT_OF_MEMORY.
- A job with a time limit ``L`` (``time_limit_s``) whose run would take longer is ended by the
  scheduler ``L`` after that run started, in state TIMEOUT (Slurm's TIMEOUT, Kueue's
  ``maximumExecutionTimeSeconds``): it holds its GPUs until then and its work is not done. A run
  restarted after a preemption or a crash gets the whole limit again (Slurm requeues with it).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from predictor.policy.intake import checkpoint_columns
from predictor.policy.snapshot import CHECKPOINT_KIND_CODES
from predictor.sim.workload import JobTable

__all__ = ["JobStatus", "JobProgress", "ENDED", "SNAPSHOT_BANDWIDTH_GB_S"]

#: Storage bandwidth a replayed system snapshot is written and restored at (the policy's default
#: ``preemption.checkpoint_bandwidth_gb_s``).
SNAPSHOT_BANDWIDTH_GB_S = 1.0


class JobStatus(IntEnum):
    FUTURE = 0  # not submitted yet
    PENDING = 1  # in the queue
    RUNNING = 2
    DONE = 3  # finished its work
    REJECTED = 4  # the rules layer said it can never run here, or nothing could ever place it
    FAILED = 5  # out of memory too many times
    TIMEOUT = 6  # ended by the scheduler at its time limit, work not done

#: States in which a job has ended and occupies nothing (its completion time is known).
ENDED = (JobStatus.DONE, JobStatus.TIMEOUT)


class JobProgress:
    """Mutable per-job state of a replay, as arrays indexed like the :class:`JobTable`.

    Parameters
    ----------
    jobs : JobTable
        The workload.
    default_checkpoint_s : float
        Checkpoint interval of jobs whose row has none (``inf``: never checkpoints).
    """

    def __init__(self, jobs: JobTable, default_checkpoint_s: float) -> None:
        n = len(jobs)
        self.jobs = jobs
        self.status = np.zeros(n, dtype=np.int8)
        self.epoch = np.zeros(n, dtype=np.int64)
        self.remaining = jobs.work_s.astype("float64").copy()
        ckpt = jobs.checkpoint_s.astype("float64")
        self.checkpoint_s = np.where(np.isfinite(ckpt) & (ckpt > 0), ckpt, default_checkpoint_s)
        # checkpoint kinds (rule *preemption cost*, docs/rules-layer.md): ``none`` never resumes; a
        # ``system`` snapshot keeps all progress and costs its write plus its restore (wall seconds)
        kind, size = checkpoint_columns(jobs.frame, jobs.peak_vram_mib * jobs.num_gpus * jobs.gpu_milli / 1000.0)
        self.checkpoint_kind = kind
        self.checkpoint_s = np.where(kind == CHECKPOINT_KIND_CODES["none"], np.inf, self.checkpoint_s)
        self.snapshot_s = np.where(kind == CHECKPOINT_KIND_CODES["system"],
                                   np.nan_to_num(size, nan=0.0) / SNAPSHOT_BANDWIDTH_GB_S, np.nan)
        self.run_start = np.full(n, np.nan)
        self.run_slowdown = np.ones(n)
        self.first_start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.queued_since = jobs.submit_s.astype("float64").copy()
        self.wait_s = np.zeros(n)  # time spent queued, summed over queue visits
        self.run_s = np.zeros(n)  # wall time spent holding GPUs, summed over runs
        self.attained_gpu_s = np.zeros(n)  # GPU-seconds received in finished runs (LAS input)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.lost_s = np.zeros(n)  # wall seconds of run lost to preemption / crashes
        self.oom_failures = np.zeros(n, dtype=np.int64)
        self.memory_known = np.zeros(n, dtype=bool)  # true peak memory learnt from a crash
        self.placement_class = np.full(n, -1, dtype=np.int64)  # class index of the current / last run

    # -- transitions ---------------------------------------------------------------------------
    def submit(self, j: int, now: float) -> None:
        self.status[j] = JobStatus.PENDING
        self.queued_since[j] = now

    def start(self, j: int, now: float, slowdown: float, class_index: int) -> float:
        """Mark job ``j`` running with true ``slowdown``; return the wall time its work takes."""
        self.status[j] = JobStatus.RUNNING
        self.epoch[j] += 1
        self.wait_s[j] += now - self.queued_since[j]
        if np.isnan(self.first_start[j]):
            self.first_start[j] = now
        self.run_start[j] = now
        self.run_slowdown[j] = slowdown
        self.placement_class[j] = class_index
        return float(self.remaining[j] * slowdown)

    def _stop(self, j: int, now: float) -> float:
        elapsed = max(now - self.run_start[j], 0.0)  # 0 when stopped before its run began
        self.run_s[j] += elapsed
        self.attained_gpu_s[j] += elapsed * self.jobs.milli_demand[j] / 1000.0
        self.epoch[j] += 1
        return float(elapsed)

    def complete(self, j: int, now: float) -> None:
        self._stop(j, now)
        self.remaining[j] = 0.0
        self.status[j] = JobStatus.DONE
        self.end[j] = now

    def time_out(self, j: int, now: float) -> None:
        """The scheduler ended job ``j`` at its time limit (``now``); its remaining work stays undone."""
        elapsed = self._stop(j, now)
        self.remaining[j] = max(self.remaining[j] - elapsed / self.run_slowdown[j], 0.0)
        self.status[j] = JobStatus.TIMEOUT
        self.end[j] = now

    def evict(self, j: int, now: float) -> float:
        """Preempt a running job at ``now``; return the wall seconds of run it lost."""
        elapsed = self._stop(j, now)
        c = self.checkpoint_s[j]
        kept_wall = np.floor(elapsed / c) * c if np.isfinite(c) else 0.0
        kept_wall = min(kept_wall, elapsed)
        self.remaining[j] = max(self.remaining[j] - kept_wall / self.run_slowdown[j], 0.0)
        lost = elapsed - kept_wall
        if np.isfinite(self.snapshot_s[j]):  # system snapshot: all kept; writing it and restoring it is lost
            self.remaining[j] = max(self.remaining[j] - (elapsed - kept_wall) / self.run_slowdown[j], 0.0)
            self.remaining[j] += self.snapshot_s[j]  # the restart restores before it progresses
            lost = 2.0 * self.snapshot_s[j]
        self.lost_s[j] += lost
        self.preemptions[j] += 1
        self.status[j] = JobStatus.PENDING
        self.queued_since[j] = now
        return float(lost)

    def crash_oom(self, j: int, now: float, max_retries: int) -> tuple[float, bool]:
        """A run ended out of memory at ``now``: the run is lost. Returns (lost seconds, resubmitted)."""
        lost = self._stop(j, now)
        self.lost_s[j] += lost
        self.oom_failures[j] += 1
        self.memory_known[j] = True
        if self.oom_failures[j] > max_retries:
            self.status[j] = JobStatus.FAILED
            self.end[j] = now
            return lost, False
        self.status[j] = JobStatus.PENDING
        self.queued_since[j] = now
        return lost, True

    def reject(self, j: int, now: float) -> None:
        self.status[j] = JobStatus.REJECTED
        self.epoch[j] += 1
        self.wait_s[j] += now - self.queued_since[j]

    # -- reads ---------------------------------------------------------------------------------
    def attained_at(self, rows: np.ndarray, now: float) -> np.ndarray:
        """GPU-seconds received so far by ``rows``, the current run included (LAS's attained service)."""
        out = self.attained_gpu_s[rows].copy()
        running = self.status[rows] == JobStatus.RUNNING
        if running.any():
            r = rows[running]
            out[running] += np.maximum(now - self.run_start[r], 0.0) * self.jobs.milli_demand[r] / 1000.0
        return out

    def last_checkpoint_at(self, rows: np.ndarray, now: float) -> np.ndarray:
        """Time of each running job's last checkpoint (its run start when it has none yet)."""
        start = self.run_start[rows]
        c = self.checkpoint_s[rows]
        done = np.where(np.isfinite(c), np.floor((now - start) / np.where(np.isfinite(c), c, 1.0)) * c, 0.0)
        return start + done
