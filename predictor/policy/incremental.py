"""The scheduler that keeps what it may between cycles: ``IncrementalScheduler``.

Same input as ``decide()`` (a :class:`~predictor.policy.snapshot.ClusterSnapshot`), same decisions:
a caller deciding again and again on a slowly changing cluster (the replay; the service's queue)
keeps one and calls :meth:`IncrementalScheduler.plan` each cycle. What it keeps, and why the result
equals a full ``decide()``:

*Sizing, per job* (:class:`SizingMemo`). Sizing a job (``capacity.sizing.size_jobs``) is a function
of that job's row alone (GPU count, share, predicted peak memory, requested types) given the layout
and the policy's ``sizing`` section. The memo stores each job's inputs and outcome under a stable
integer key the caller gives (``job_keys``: the replay's trace row; a service's own job number);
each cycle it compares the stored inputs with the snapshot's, vectorised, and sizes again only the
rows that are new or changed (a requeued job whose memory was learnt from a crash). Equal inputs
give equal outcomes, so the gathered outcome is ``size_jobs`` on the snapshot row for row.

*No Decisions unless asked.* The cycle's outcomes become :class:`~predictor.policy.light_plan.Act`
records (GPUs, class, times, victims, priority); ``LightPlan.full()`` writes the SchedulePlan of a
full ``decide()`` on the same snapshot when a caller wants Decisions.

Everything else (ordering, starvation guard, admission walk, reservations, preemption) runs as in
``decide()`` on this cycle's snapshot: the order of ``ours`` moves with fair-share usage (open runs
are charged continuously), free capacity (topology factor) and time, so it is recomputed each cycle.

How the engine adopts it: hold one ``IncrementalScheduler`` per policy next to its queue picture,
pass its integer job numbers as ``job_keys`` (or none: sizing then runs in full, still correct), and
call ``plan(...).full()`` where it needs Decisions (``/v1/jobs`` answers), ``plan(...).acts`` where it
only acts (``sync``).
"""

from __future__ import annotations

import numpy as np

from predictor.capacity.layout import ClusterLayout
from predictor.capacity.sizing import SizingConfig, SizingOutcome, size_jobs
from predictor.policy.config import PolicyConfig
from predictor.policy.light_plan import LightPlan, light_plan
from predictor.policy.scheduler import run_cycle
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs

__all__ = ["IncrementalScheduler", "SizingMemo"]

_OUT = ("flavor", "need_mib", "too_small", "wasteful", "fits_nowhere", "requested_missing")


class SizingMemo:
    """Per-job sizing kept under integer keys (see the module docstring)."""

    def __init__(self, layout: ClusterLayout, cfg: SizingConfig) -> None:
        self.layout, self.cfg = layout, cfg
        self.size = 0
        self._grow(1024)

    def _grow(self, n: int) -> None:
        t = self.layout.n_types
        old = self.size
        new = {
            "known": np.zeros(n, dtype=bool), "num_gpus": np.zeros(n, dtype=np.int64),
            "gpu_milli": np.zeros(n, dtype=np.int64), "peak": np.zeros(n), "any_type": np.zeros(n, dtype=bool),
            "requested": np.zeros((n, t), dtype=bool), "allowed": np.zeros((n, t), dtype=bool),
            "flavor": np.zeros(n, dtype=np.int64), "need_mib": np.zeros(n), "too_small": np.zeros(n, dtype=bool),
            "wasteful": np.zeros(n, dtype=bool), "fits_nowhere": np.zeros(n, dtype=bool),
            "requested_missing": np.zeros(n, dtype=bool),
        }
        if old:
            for k, v in new.items():
                v[:old] = getattr(self, k)[:old]
        for k, v in new.items():
            setattr(self, k, v)
        self.size = n

    def sizing(self, keys: np.ndarray, pend: PendingJobs) -> SizingOutcome:
        """``size_jobs`` of ``pend``, row ``i`` kept under ``keys[i]`` (non-negative, unique)."""
        if len(keys) and int(keys.max()) >= self.size:
            self._grow(max(2 * self.size, int(keys.max()) + 1))
        req = pend.requested_types
        peak = pend.peak_vram_upper_mib
        old_peak = self.peak[keys]
        same = (self.known[keys] & (self.num_gpus[keys] == pend.num_gpus) & (self.gpu_milli[keys] == pend.gpu_milli)
                & ((old_peak == peak) | (np.isnan(old_peak) & np.isnan(peak))))
        if req is None:
            same &= self.any_type[keys]
        else:
            same &= ~self.any_type[keys] & (self.requested[keys] == req).all(axis=1)
        if not same.all():
            redo = np.flatnonzero(~same)
            k = keys[redo]
            fresh = size_jobs(self.layout, self.cfg, num_gpus=pend.num_gpus[redo], gpu_milli=pend.gpu_milli[redo],
                              peak_upper_mib=peak[redo], requested_types=None if req is None else req[redo])
            self.known[k] = True
            self.num_gpus[k], self.gpu_milli[k], self.peak[k] = pend.num_gpus[redo], pend.gpu_milli[redo], peak[redo]
            self.any_type[k] = req is None
            if req is not None:
                self.requested[k] = req[redo]
            self.allowed[k] = fresh.allowed
            for name in _OUT:
                getattr(self, name)[k] = getattr(fresh, name)
        return SizingOutcome(allowed=self.allowed[keys], **{name: getattr(self, name)[keys] for name in _OUT})


class IncrementalScheduler:
    """``decide()`` for one policy, called cycle after cycle (see the module docstring).

    Parameters
    ----------
    policy : PolicyConfig
    """

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy
        self._sizing: SizingMemo | None = None

    def plan(self, snapshot: ClusterSnapshot, *, job_keys: np.ndarray | None = None,
             explain: bool = False) -> LightPlan:
        """One cycle on ``snapshot``: the acts of ``decide(snapshot, policy)``.

        ``job_keys`` (int64, one per pending row, non-negative and unique) names each pending job across
        cycles; without it nothing is kept. ``explain`` is what ``LightPlan.full()`` writes.
        """
        sizing = None
        if job_keys is not None and len(job_keys):
            memo = self._sizing
            if memo is None or memo.layout is not snapshot.layout:
                memo = self._sizing = SizingMemo(snapshot.layout, self.policy.sizing)
            sizing = memo.sizing(np.asarray(job_keys, dtype=np.int64), snapshot.pending)
        return light_plan(run_cycle(snapshot, self.policy, sizing), self.policy, explain=explain)
