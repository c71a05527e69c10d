"""The scheduler that keeps what it may between cycles: ``IncrementalScheduler``.

Same input as ``decide()`` (a :class:`~predictor.policy.snapshot.ClusterSnapshot`), same decisions:
a caller deciding again and again on a slowly changing cluster (the replay; the service's queue)
keeps one and calls :meth:`IncrementalScheduler.plan` each cycle. What it keeps, and why the result
equals a full ``decide()``:

*Sizing, per job* (:class:`JobSizing`). Sizing a job (``capacity.sizing.size_jobs``) is a function
of that job's row alone (GPU count, share, predicted peak memory, requested types) given the layout
and the policy's ``sizing`` section. The caller sizes its whole job table once (the replay: the
trace, at the start), sizes a row again when its inputs change (memory learnt from a crash) and
passes the queued rows' sizing each cycle: ``size_jobs`` on the snapshot, row for row.

*Gang searches and free maxima* (``capacity.placement.GangMemo``). ``find_gang`` is a pure function of
the usable mask, the gang size, the class limit and the strategy (and, for one GPU share, the free
shares of the usable GPUs); the memo answers a search asked again on an unchanged capacity picture
(cycle after cycle while nothing started or ended) with the first answer. ``best_class_now``'s free
maxima per type and class, a function of the free shares, are kept the same way.

*The thin walk* (``Admission(thin_after=THIN_AFTER)``). Once only starts and preemptions are left in a
cycle (no reservation left to give), it walks only the jobs that may still act: those that fit now by an
exact count (GPUs of an allowed type with the job's share free and unreserved until its predicted end:
necessary for a start, and false for the rest of the walk once false, as capacity only shrinks) and
those that may preempt (an over-estimate) and would pass the walk's cheap test of rule *preemption
trigger* (a deadline, or an earliest start in any placement more than ``trigger_wait_s`` away,
computed on arrays; the walk passes over the others without a side effect); it finds them again after
each start or preemption. The
full walk passes over every other job, or considers it only to leave it waiting (a GPU share that fits
in its count of partly free GPUs); the failure memos such a job would have fed only ever skip
attempts that fail. When it switches to the starts-only walk it starts that from the job after the
last one walked, as the full walk would. Over a long queue it reads the per-job columns as arrays
instead of converting them to lists (it looks up a few jobs only).

*No Decisions unless asked.* The cycle's outcomes become :class:`~predictor.policy.light_plan.Act`
records (GPUs, class, times, victims, priority); ``LightPlan.full()`` writes the SchedulePlan of a
full ``decide()`` on the same snapshot when a caller wants Decisions.

Everything else (ordering, starvation guard, admission walk, reservations, preemption) runs as in
``decide()`` on this cycle's snapshot: the order of ``ours`` moves with fair-share usage (open runs
are charged continuously), free capacity (topology factor) and time, so it is recomputed each cycle.

Who holds one: the replay (``predictor.sim.rules.PolicyRules``: the thin walk on, the trace sized
once, acts only) and the engine (``predictor.engine.engine.Engine.plan``: one per scoring thread and
policy, so the service, ``predictor sync`` and ``predictor policy decide`` keep the gang memo between
requests; the thin walk off (``thin_after=None``), because they write a Decision for jobs the thin
walk passes over, and those Decisions' wait reasons come from the full walk; sizing computed each
cycle, because sizing one candidate costs what sizing a short tracked queue does: ``size_jobs`` is a
few array operations whatever the rows). :meth:`IncrementalScheduler.cycle` is the cycle both call;
``scheduler.write_plan`` writes the Decisions from it, ``LightPlan`` the acts.
"""

from __future__ import annotations

import numpy as np

from predictor.capacity.layout import ClusterLayout
from predictor.capacity.placement import GangMemo
from predictor.capacity.sizing import SizingConfig, SizingOutcome, size_jobs
from predictor.policy.config import PolicyConfig
from predictor.policy.light_plan import LightPlan, light_plan
from predictor.policy.scheduler import CycleResult, run_cycle
from predictor.policy.snapshot import ClusterSnapshot

__all__ = ["IncrementalScheduler", "JobSizing", "THIN_AFTER"]

#: Walk only the jobs that may still act once only starts and preemptions are left (``Admission``),
#: when more than this many jobs remain.
THIN_AFTER = 64

_COLS = ("allowed", "flavor", "need_mib", "too_small", "wasteful", "fits_nowhere", "requested_missing")


class JobSizing:
    """Sizing of a table of jobs (the replay's trace, a service's queue), kept row by row.

    ``size_jobs`` is a function of each job's row alone, so the rows of one call on the whole table
    equal a call on any subset of them: :meth:`take` gathers the queued rows' sizing instead of
    sizing them again each cycle. :meth:`update` sizes a row again when its inputs change (memory
    learnt from a crash).
    """

    def __init__(self, layout: ClusterLayout, cfg: SizingConfig, *, num_gpus: np.ndarray, gpu_milli: np.ndarray,
                 peak_upper_mib: np.ndarray, requested_types: np.ndarray | None,
                 peak_point_mib: np.ndarray | None = None) -> None:
        self.layout, self.cfg = layout, cfg
        self.num_gpus = np.asarray(num_gpus, dtype=np.int64)
        self.gpu_milli = np.asarray(gpu_milli, dtype=np.int64)
        self.peak = np.array(peak_upper_mib, dtype=np.float64, copy=True)
        self.point = None if peak_point_mib is None else np.array(peak_point_mib, dtype=np.float64, copy=True)
        self.requested = requested_types
        self._all = self._size(slice(None))
        self._cols = {name: np.array(getattr(self._all, name), copy=True) for name in _COLS}
        below = self._all.below  # rule *start below the bound* (None: no job has a type below it)
        self._cols["below"] = np.zeros_like(self._cols["allowed"]) if below is None else np.array(below, copy=True)

    def _size(self, rows) -> SizingOutcome:
        req = None if self.requested is None else self.requested[rows]
        return size_jobs(self.layout, self.cfg, num_gpus=self.num_gpus[rows], gpu_milli=self.gpu_milli[rows],
                         peak_upper_mib=self.peak[rows], requested_types=req,
                         peak_point_mib=None if self.point is None else self.point[rows])

    def update(self, row: int, *, peak_upper_mib: float) -> None:
        """Job ``row``'s peak memory is now known to be ``peak_upper_mib`` (a crash taught it): size
        it again by it, with no point estimate left to start below it on (rule *start below the
        bound*: the job is not tried below what it needed again)."""
        same = self.peak[row] == peak_upper_mib or (np.isnan(self.peak[row]) and np.isnan(peak_upper_mib))
        if same and (self.point is None or np.isnan(self.point[row])):
            return
        self.peak[row] = peak_upper_mib
        if self.point is not None:
            self.point[row] = np.nan
        fresh = self._size(np.array([row]))
        for name in _COLS:
            self._cols[name][row] = getattr(fresh, name)[0]
        self._cols["below"][row] = False if fresh.below is None else fresh.below[0]

    def take(self, rows: np.ndarray) -> SizingOutcome:
        """``size_jobs`` of the jobs ``rows``, in that order."""
        cols = {name: col[rows] for name, col in self._cols.items()}
        below = cols.get("below")
        if below is not None and not below.any():
            cols["below"] = None  # as size_jobs says it: none of these rows has a type below the bound
        return SizingOutcome(**cols)


class IncrementalScheduler:
    """``decide()`` for one policy, called cycle after cycle (see the module docstring).

    Parameters
    ----------
    policy : PolicyConfig
    thin_after : int or None
        Walk only the jobs that may still act past this many (``Admission``); None: the full walk,
        which callers writing Decisions for every job need.
    gang_memo : GangMemo, optional
        A memo to keep (another scheduler's on the same layout); a new one otherwise.
    """

    def __init__(self, policy: PolicyConfig, *, thin_after: int | None = THIN_AFTER,
                 gang_memo: GangMemo | None = None) -> None:
        self.policy = policy
        self.thin_after = thin_after
        self.gang_memo = gang_memo  # kept from another scheduler (its answers do not depend on the policy)

    def cycle(self, snapshot: ClusterSnapshot, *, sizing: SizingOutcome | None = None) -> CycleResult:
        """Phases 1-4 of ``decide(snapshot, policy)`` with what this scheduler keeps (the gang memo,
        the thin walk): what ``scheduler.write_plan`` turns into Decisions.

        ``sizing``: the pending rows' sizing when the caller keeps it (:meth:`JobSizing.take`); it must
        equal ``size_jobs`` on the snapshot."""
        memo = self.gang_memo
        if memo is None or memo.layout is not snapshot.layout:
            memo = self.gang_memo = GangMemo(snapshot.layout)
        return run_cycle(snapshot, self.policy, sizing, memo, self.thin_after)

    def plan(self, snapshot: ClusterSnapshot, *, sizing: SizingOutcome | None = None,
             explain: bool = False) -> LightPlan:
        """One cycle on ``snapshot``: the acts of ``decide(snapshot, policy)`` (``sizing``: see
        :meth:`cycle`). ``explain`` is what ``LightPlan.full()`` writes."""
        return light_plan(self.cycle(snapshot, sizing=sizing), self.policy, explain=explain)
