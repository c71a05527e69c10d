"""Start-time estimates for pending jobs, with an interval (p10/p50/p90), from one scheduling plan.

Rule *start estimate* (the issue's "when will it start"): walk the pending jobs in the plan's
priority order and book each on a free-GPU profile of its GPU types, at the earliest time its gang
is free for its whole predicted run (conservative backfilling: a job never delays one ahead of it,
and a small short job may land in a hole before a big one). The profile starts from the running
jobs' predicted ends; jobs the plan starts now (or after a preemption's grace) are booked first on
the GPUs the plan gave them. The walk is run three times, every duration at its 10th, 50th and 90th
percentile (the running jobs' remaining times and the pending jobs' run times alike): the p10 and p90
starts bound the interval, the p50 start is the estimate.

``time_limit`` mode plans on the jobs' time limits instead (what ``squeue --start`` shows): running
jobs end at start + limit, pending jobs hold their GPUs for their limit.

What is left out (and so is in the error the replay measures): jobs that arrive later and overtake
(the interval does not widen for them), priorities moving with age, quotas and strict-FIFO heads,
node topology (a gang may span nodes; GPU shares count as whole GPUs).

Cost: O(P x B) for P pending jobs and B profile steps (B <= 2P + R), vectorised per job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from predictor.policy.context import CycleContext
from predictor.policy.plan import SchedulePlan

__all__ = ["StartEstimates", "FreeProfile", "plan_context", "running_quantile_ends", "estimate_starts",
           "QUANTILES"]

QUANTILES: tuple[str, ...] = ("p10", "p50", "p90")
_CHECKPOINT_EVERY = 256


def plan_context(plan: SchedulePlan) -> CycleContext:
    """The cycle context a plan was decided in (snapshot, sizing, capacity book)."""
    return plan._writer.ctx  # noqa: SLF001 - the plan keeps its writer, whose context is what it read


class FreeProfile:
    """Free GPUs of one type over time: a step function ``free[j]`` on ``[times[j], times[j+1])``."""

    __slots__ = ("times", "free", "total")

    def __init__(self, now: float, total: int, busy_until: np.ndarray) -> None:
        self.total = int(total)
        ends = np.sort(busy_until[busy_until > now])
        if len(ends):
            times, counts = np.unique(ends, return_counts=True)
            self.times = np.concatenate([[now], times])
            self.free = (total - len(ends)) + np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        else:
            self.times = np.array([now])
            self.free = np.array([total], dtype=np.int64)

    def copy(self) -> FreeProfile:
        out = object.__new__(FreeProfile)
        out.times, out.free, out.total = self.times.copy(), self.free.copy(), self.total
        return out

    def earliest(self, k: int, duration: float) -> float:
        """Earliest step start where ``k`` GPUs stay free for ``duration``; inf if never."""
        if k > self.total:
            return math.inf
        times, free = self.times, self.free
        bad = np.concatenate([[0], np.cumsum(free < k)])
        last = np.searchsorted(times, times + max(duration, 0.0), side="left")  # first step not covered
        ok = (bad[np.maximum(last, np.arange(len(times)) + 1)] - bad[:-1]) == 0
        hit = np.flatnonzero(ok)
        return float(times[hit[0]]) if len(hit) else math.inf

    def book(self, start: float, k: int, duration: float) -> None:
        """Take ``k`` GPUs from ``start`` for ``duration``."""
        end = start + max(duration, 0.0)
        for t in (start, end):
            j = np.searchsorted(self.times, t, side="right")
            if self.times[j - 1] != t:
                self.times = np.insert(self.times, j, t)
                self.free = np.insert(self.free, j, self.free[j - 1])
        a = np.searchsorted(self.times, start, side="left")
        b = np.searchsorted(self.times, end, side="left")
        self.free[a:b] -= k


def running_quantile_ends(start_ts: np.ndarray, durations: Sequence[np.ndarray], now: float,
                          overrun_s: float) -> list[np.ndarray]:
    """Predicted end of each running job per quantile from its start and its predicted run time at that
    quantile (on its placement). A run past a quantile's end is taken to end now (p10, p50) or
    ``overrun_s`` from now (p90, the rules layer's ``reservation.overrun_extension_s``); unknown
    durations (NaN) end at the p90 end. Ends are kept in order (p10 <= p50 <= p90)."""
    out = []
    for q, d in enumerate(durations):
        end = start_ts + np.asarray(d, dtype=np.float64)
        floor = now + (overrun_s if q == len(durations) - 1 else 0.0)
        out.append(np.where(end > now, end, floor))
    fill = out[-1]
    out = [np.where(np.isfinite(e), e, fill) for e in out]
    for q in range(1, len(out)):
        out[q] = np.maximum(out[q], out[q - 1])
    return out


@dataclass(frozen=True, eq=False)
class StartEstimates:
    """Estimated start (epoch seconds) of every pending row of a plan's snapshot, per quantile.

    ``p10_ts``/``p50_ts``/``p90_ts``: NaN for a job that can never run here (rejected, no type fits);
    ``basis``: ``"starts now"``, ``"preempts"``, ``"planned"`` per row; ``time_limit_ts``: the same
    walk on time limits (None when not asked for).
    """

    now: float
    job_id: np.ndarray
    p10_ts: np.ndarray
    p50_ts: np.ndarray
    p90_ts: np.ndarray
    basis: np.ndarray
    time_limit_ts: np.ndarray | None = None
    _walk: _Walk | None = field(default=None, repr=False)

    def row_doc(self, i: int) -> dict:
        """The estimate of pending row ``i`` as a document (None values where it can never start)."""
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        p10, p50, p90 = (float(a[i]) for a in (self.p10_ts, self.p50_ts, self.p90_ts))
        doc = {"p10_ts": num(p10), "p50_ts": num(p50), "p90_ts": num(p90),
               "p50_wait_s": num(max(p50 - self.now, 0.0)), "basis": str(self.basis[i]),
               "rule": "start estimate (predictor.queue.start_estimate)"}
        if self.time_limit_ts is not None:
            doc["time_limit_ts"] = num(float(self.time_limit_ts[i]))
        return doc

    def start_with(self, i: int, *, allowed: np.ndarray | None = None, position: int | None = None,
                   num_gpus: int | None = None) -> float:
        """p50 start of row ``i`` if it asked for other GPU types (``allowed``), another GPU count, or
        sat at another ``position`` of the priority order (what-if; the jobs ahead are as planned)."""
        if self._walk is None:
            raise RuntimeError("estimate made without what-if support")
        return self._walk.what_if(i, allowed=allowed, position=position, num_gpus=num_gpus)


class _Walk:
    """One walk of the priority order on per-type free profiles (see the module docstring)."""

    def __init__(self, ctx: CycleContext, plan: SchedulePlan, durations: np.ndarray, run_end: np.ndarray,
                 grace_s: float, *, checkpoints: bool = False) -> None:
        self.ctx, self.plan, self.dur = ctx, plan, durations
        snap, lay = ctx.snapshot, ctx.layout
        now = self.now = float(snap.now)
        run = snap.running
        busy = np.full(lay.n_gpus, now)
        if len(run.alloc_gpus):
            np.maximum.at(busy, run.alloc_gpus, np.repeat(run_end, np.diff(run.alloc_offsets)))
        self.start = np.full(len(snap.pending), np.nan)
        self.basis = np.full(len(snap.pending), "planned", dtype=object)
        for a in plan.assignments:  # starts of this plan: on the GPUs the plan gave them
            begin = now + (grace_s if a.victims else 0.0)
            busy[a.gpus] = begin + durations[a.pending_row]
            self.start[a.pending_row] = begin
            self.basis[a.pending_row] = "preempts" if a.victims else "starts now"
        self.types = [np.flatnonzero(lay.gpu_type == t) for t in range(lay.n_types)]
        self.profiles = [FreeProfile(now, len(g), busy[g]) for g in self.types]
        self.allowed = ctx.sizing.allowed
        self.order = plan.order
        self.checks: list[list[FreeProfile]] = []
        self.check_every = _CHECKPOINT_EVERY if checkpoints else 0

    def place(self, i: int, profiles: list[FreeProfile], allowed: np.ndarray | None = None,
              k: int | None = None) -> float:
        allowed = self.allowed[i] if allowed is None else allowed
        k = int(self.ctx.pending.num_gpus[i]) if k is None else k
        d = float(self.dur[i])
        best, best_t = math.inf, -1
        for t in np.flatnonzero(allowed):
            s = profiles[t].earliest(k, d)
            if s < best:
                best, best_t = s, int(t)
        if best_t >= 0:
            profiles[best_t].book(best, k, d)
        return best

    def run(self, until: set[int] | None = None) -> np.ndarray:
        action = self.plan.action
        left = None if until is None else set(until)
        for pos, i in enumerate(self.order.tolist()):
            if self.check_every and pos % self.check_every == 0:
                self.checks.append([p.copy() for p in self.profiles])
            if left is not None:
                if not left:
                    break
                left.discard(i)
            if action[i] in ("start", "preempt") and np.isfinite(self.start[i]):
                continue
            if action[i] == "reject" or int(self.ctx.sizing.flavor[i]) < 0:
                continue
            self.start[i] = self.place(i, self.profiles)
        self.start[~np.isfinite(self.start)] = np.nan
        return self.start

    def what_if(self, i: int, *, allowed: np.ndarray | None, position: int | None,
                num_gpus: int | None) -> float:
        order = self.order.tolist()
        pos = order.index(i) if position is None else int(position)
        c = min(pos // self.check_every, len(self.checks) - 1)
        profiles = [p.copy() for p in self.checks[c]]
        action = self.plan.action
        for j in order[c * self.check_every:pos]:
            if j == i or action[j] in ("start", "preempt", "reject") or int(self.ctx.sizing.flavor[j]) < 0:
                continue
            self.place(j, profiles)
        return max(self.place(i, profiles, allowed=allowed, k=num_gpus), self.now)


def estimate_starts(plan: SchedulePlan, running_durations: Sequence[np.ndarray] | None = None, *,
                    running_time_limits: np.ndarray | None = None, rows: Sequence[int] | None = None,
                    what_if: bool = False) -> StartEstimates:
    """Start estimates for the pending jobs of ``plan`` (see the module docstring).

    Parameters
    ----------
    plan : SchedulePlan
        A plan from ``decide`` (its snapshot, sizing and priority order are read).
    running_durations : three arrays, optional
        The running jobs' predicted run times (p10, p50, p90, seconds, on their placement, aligned
        with ``snapshot.running``). Default: the p90 end the snapshot holds, for all three.
    running_time_limits : array, optional
        The running jobs' time limits (seconds, NaN: none): also plan on time limits.
    rows : sequence of int, optional
        Only these pending rows are needed (the walk stops once they are placed); others stay NaN.
    what_if : bool
        Keep checkpoints of the p50 walk for :meth:`StartEstimates.start_with`.
    """
    ctx = plan_context(plan)
    snap, policy = ctx.snapshot, ctx.policy
    now, run = float(snap.now), snap.running
    rcfg = policy.reservation
    if running_durations is None:
        ends = [np.where(np.isfinite(run.predicted_end_ts), run.predicted_end_ts, run.start_ts + rcfg.unknown_duration_s)
                for _ in QUANTILES]
        ends = running_quantile_ends(np.zeros(len(run)), ends, now, rcfg.overrun_extension_s)
    else:
        ends = running_quantile_ends(run.start_ts, running_durations, now, rcfg.overrun_extension_s)
    p = ctx.pending
    grace = float(policy.preemption.grace_s)
    until = None if rows is None else {int(r) for r in rows}
    starts, walks = [], []
    for q, name in enumerate(QUANTILES):
        dur = ctx._fallback_duration(getattr(p, f"{name}_s"))  # noqa: SLF001 - the rules layer's own fallback
        walk = _Walk(ctx, plan, dur, ends[q], grace, checkpoints=what_if and name == "p50")
        starts.append(walk.run(until))
        walks.append(walk)
    lo, mid, hi = starts
    mid = np.fmax(mid, lo)
    hi = np.fmax(hi, mid)
    limit_ts = None
    if running_time_limits is not None:
        lim = np.asarray(running_time_limits, dtype=np.float64)
        run_end = np.where(np.isfinite(lim), run.start_ts + lim, np.nan)
        run_end = np.where(np.isfinite(run_end), np.maximum(run_end, now), ends[-1])
        dur = np.where(np.isfinite(p.time_limit_s), p.time_limit_s, rcfg.unknown_duration_s)
        limit_ts = _Walk(ctx, plan, dur, run_end, grace).run(until)
    return StartEstimates(now=now, job_id=p.job_id, p10_ts=lo, p50_ts=mid, p90_ts=hi, basis=walks[1].basis,
                          time_limit_ts=limit_ts, _walk=walks[1] if what_if else None)
