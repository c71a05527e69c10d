"""Start-time estimates for pending jobs, with an interval (p10/p50/p90), from one scheduling plan.

Rule *start estimate* (the issue's "when will it start"): walk the pending jobs in the plan's
priority order and book each on a free-GPU profile of its GPU types, at the earliest time its gang
is free for its whole predicted run (conservative backfilling: a job never delays one ahead of it,
and a small short job may land in a hole before a big one). The profile starts from the running
jobs' predicted ends; jobs the plan starts now (or after a preemption's grace) are booked first on
the GPUs the plan gave them; in the p90 walk a job the plan reserved for starts no earlier than its
reservation (rule *reservation floor*: the plan sees placement classes and topology, the walk does
not); and a job the plan does not start now starts no earlier than the first running job's end
(rule *no start before a change*), and a gang it holds no earlier than one node (or whole nodes)
has its GPUs free of the jobs holding them now (rule *gang on nodes*). The walk is run three times, every duration at its 10th, 50th and 90th
percentile (the running jobs' remaining times and the pending jobs' run times alike): the p10 and p90
starts bound the interval, the p50 start is the estimate.

Rule *backfill window* (the p10 end): the walk never lets a job start ahead of one before it, but
the policy protects only the jobs it reserved for (``reservation.depth``) and backfills the rest past
each other, EASY-like. So in the p10 walk each held job is also fitted, booking nothing, on an *open*
profile that holds only the running jobs, this plan's starts and the reserved jobs (where the walk
books them), with the same floors; its p10 start lies ``BACKFILL_WEIGHT`` of the way from the walk's
p10 start to that earliest fit. Not under strict queueing (the head blocks), nor for the deep-queue
fluid. The p50 and p90 starts are the walk's.

``time_limit`` mode plans on the jobs' time limits instead (what ``squeue --start`` shows): running
jobs end at start + limit, pending jobs hold their GPUs for their limit.

Rule *deep queue*: past the first ``DETAILED_JOBS`` jobs of the order, jobs are not booked one by
one: each type's remaining free capacity after those bookings is treated as a fluid, and a job starts
when the GPU-seconds of the deep jobs ahead of it on its flavor (GPUs x run time) have flowed
through. This keeps a 10,000-job estimate in tens of milliseconds.

What is left out (and so is in the error the replay measures): jobs that arrive later and overtake
(the interval does not widen for them), priorities moving with age, quotas and strict-FIFO heads,
node topology beyond rule *gang on nodes* (GPU shares count as whole GPUs).

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
_CHECKPOINT_EVERY = 64
#: Jobs booked one by one on the profiles, highest priority first; the rest of the queue is estimated
#: as a fluid (rule *deep queue*, see ``_Walk``).
DETAILED_JOBS = 512
#: Rule *backfill window*: the p10 start lies this fraction of the way from the p10 walk's start to the
#: earliest start the job could be backfilled at (only reserved jobs protected).
BACKFILL_WEIGHT = 1.0


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

    def _split(self, t: float) -> None:
        j = np.searchsorted(self.times, t, side="right")
        if self.times[j - 1] != t:
            self.times = np.insert(self.times, j, t)
            self.free = np.insert(self.free, j, self.free[j - 1])

    def earliest(self, k: int, duration: float, not_before: float = -math.inf) -> float:
        """Earliest time, at a step start or ``not_before``, from which ``k`` GPUs stay free for
        ``duration``; inf if never."""
        if k > self.total:
            return math.inf
        if not_before > self.times[0]:
            self._split(not_before)
        times, free = self.times, self.free
        bad = np.concatenate([[0], np.cumsum(free < k)])
        last = np.searchsorted(times, times + max(duration, 0.0), side="left")  # first step not covered
        ok = (bad[np.maximum(last, np.arange(len(times)) + 1)] - bad[:-1]) == 0
        if not_before > times[0]:
            ok &= times >= not_before
        hit = np.flatnonzero(ok)
        return float(times[hit[0]]) if len(hit) else math.inf

    def book(self, start: float, k: int, duration: float) -> None:
        """Take ``k`` GPUs from ``start`` for ``duration``."""
        end = start + max(duration, 0.0)
        self._split(start)
        self._split(end)
        a = np.searchsorted(self.times, start, side="left")
        b = np.searchsorted(self.times, end, side="left")
        self.free[a:b] -= k


_Z90 = 1.2815515655446004  # standard normal 90th percentile


def running_quantile_ends(start_ts: np.ndarray, durations: Sequence[np.ndarray], now: float,
                          overrun_s: float) -> list[np.ndarray]:
    """Predicted end of each running job per quantile (p10, p50, p90), given that it is still running.

    Rule *remaining time*: a job's run time is taken as log-normal through its predicted p10/p50/p90
    (on its placement); having run ``e = now - start`` seconds, its remaining time at quantile ``q`` is
    the conditional quantile ``F^-1(F(e) + q (1 - F(e))) - e``. A job with one known quantile only (or
    a degenerate spread) ends at that duration, and one past it ``overrun_s`` from now (the rules
    layer's ``reservation.overrun_extension_s``). Unknown durations end ``overrun_s`` from now.
    """
    from scipy.special import ndtr, ndtri

    d10, d50, d90 = (np.asarray(d, dtype=np.float64) for d in durations)
    start = np.asarray(start_ts, dtype=np.float64)
    elapsed = np.maximum(now - start, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.log(d50)
        sigma = (np.log(d90) - np.log(d10)) / (2 * _Z90)
        spread = np.isfinite(sigma) & (sigma > 1e-6) & np.isfinite(mu)
        f = np.where(spread, ndtr((np.log(elapsed) - mu) / np.where(spread, sigma, 1.0)), 0.0)
    out = []
    for q, point in zip((0.1, 0.5, 0.9), (d10, d50, d90), strict=True):
        u = np.clip(f + q * (1.0 - f), 1e-9, 1 - 1e-9)
        with np.errstate(over="ignore", invalid="ignore"):
            cond = start + np.exp(mu + np.where(spread, sigma, 0.0) * ndtri(u))
        plain = start + point
        plain = np.where(plain > now, plain, now + overrun_s)
        end = np.where(spread, np.maximum(cond, now), plain)
        out.append(np.where(np.isfinite(end), end, now + overrun_s))
    for q in range(1, len(out)):
        out[q] = np.maximum(out[q], out[q - 1])
    return out


@dataclass(frozen=True, eq=False)
class StartEstimates:
    """Estimated start (epoch seconds) of every pending row of a plan's snapshot, per quantile.

    ``p10_ts``/``p50_ts``/``p90_ts``: NaN for a job that can never run here (rejected, no type fits);
    ``basis``: ``"starts now"``, ``"preempts"``, ``"planned"`` per row; ``time_limit_ts``: the same
    walk on time limits (None when not asked for); ``interval``: how rule *calibrated interval*
    rescaled p10/p90 (``StartCalibration.doc``; None: the walk's interval as it is).
    """

    now: float
    job_id: np.ndarray
    p10_ts: np.ndarray
    p50_ts: np.ndarray
    p90_ts: np.ndarray
    basis: np.ndarray
    time_limit_ts: np.ndarray | None = None
    backfill_ts: np.ndarray | None = None
    interval: dict | None = None
    _walks: tuple[_Walk, ...] = field(default=(), repr=False)

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
        if self.interval is not None:
            doc["interval"] = self.interval
        return doc

    def start_with(self, i: int, *, allowed: np.ndarray | None = None, position: int | None = None,
                   num_gpus: int | None = None, duration: float | None = None, quantile: int = 1,
                   scope: int | None = None) -> float:
        """Start of row ``i`` (at quantile ``QUANTILES[quantile]``, p50 by default) if it asked for other
        GPU types (``allowed``), another GPU count, ran ``duration`` seconds, or sat at another
        ``position`` of the priority order (what-if; the jobs ahead are booked as planned). ``i = -1``:
        a job not in the plan (``allowed``, ``position``, ``num_gpus`` and ``duration`` required).
        ``scope``: another strict-FIFO scope (queue code) for it."""
        if not self._walks:
            raise RuntimeError("estimate made without what-if support (estimate_starts(what_if=True))")
        return self._walks[quantile].what_if(i, allowed=allowed, position=position, num_gpus=num_gpus,
                                             duration=duration, scope=scope)


def _node_free_times(lay, busy: np.ndarray, t: int) -> np.ndarray:  # noqa: ANN001
    """Type ``t``'s nodes x their GPUs: when each GPU is free, ascending per node (inf: no such GPU)."""
    nodes = np.flatnonzero(lay.node_type == t)
    if len(nodes) == 0:
        return np.zeros((0, 0))
    row = np.full(len(lay.node_type), -1, dtype=np.int64)
    row[nodes] = np.arange(len(nodes))
    gpus = np.flatnonzero(lay.gpu_type == t)
    out = np.full((len(nodes), int(lay.node_gpus[nodes].max())), np.inf)
    out[row[lay.gpu_node[gpus]], lay.gpu_local[gpus]] = busy[gpus]
    out.sort(axis=1)
    return out


class _Walk:
    """One walk of the priority order on per-type free profiles (see the module docstring)."""

    def __init__(self, ctx: CycleContext, plan: SchedulePlan, durations: np.ndarray, run_end: np.ndarray,
                 grace_s: float, *, checkpoints: bool = False, reservations_bind: bool = False,
                 backfill: bool = False) -> None:
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
        # rule *reservation floor*: the plan reserved capacity from its p90 picture of the cluster (with
        # placement classes and topology the walk does not see); in the p90 walk a reserved job starts
        # no earlier than its reservation
        # rule *no start before a change*: a job the plan does not start now cannot start before the
        # cluster changes, the first running job's end (at this walk's quantile)
        later = run_end[run_end > now] if len(run_end) else run_end
        self.next_change = float(later.min()) if len(later) else now
        self.reserved_from: dict[int, float] = {}
        if reservations_bind:
            for d in plan.decisions:
                if d.reservation is not None:
                    self.reserved_from[int(d.extra["pending_row"])] = float(d.reservation.start_ts)
        self.types = [np.flatnonzero(lay.gpu_type == t) for t in range(lay.n_types)]
        self.profiles = [FreeProfile(now, len(g), busy[g]) for g in self.types]
        self._nodes = [_node_free_times(lay, busy, t) for t in range(lay.n_types)]
        self._gang_floors: dict[tuple[int, int], float] = {}
        self.allowed = ctx.sizing.allowed
        self.order = plan.order
        self.checks: list[tuple[list[FreeProfile], dict[int, float]]] = []
        self.check_every = _CHECKPOINT_EVERY if checkpoints else 0
        q = ctx.policy.queueing
        self.strict = q.strategy == "strict"
        p = ctx.pending
        # what a strict head blocks: everything (scope cluster) or its queue (its team where it names none)
        self.scope = (np.zeros(len(p), dtype=np.int64) if q.scope == "cluster"
                      else np.where(p.queue >= 0, p.queue, -2 - p.team))
        self.floor: dict[int, float] = {}
        # rule *backfill window*: the policy protects only the jobs it reserved for (reservation.depth);
        # any other held job may be backfilled ahead of earlier-ordered ones. ``early[i]``: the earliest
        # start of row i on a profile holding only what runs now, this plan's starts and the reserved
        # jobs (booked where this walk books them); not under strict queueing (the head blocks).
        self.backfill = backfill and not self.strict
        self.early = np.full(len(snap.pending), np.nan)
        self.protected = {int(d.extra["pending_row"]) for d in plan.decisions if d.reservation is not None}
        self.open_profiles = [p.copy() for p in self.profiles] if self.backfill else []
        if self.check_every:
            self.checks.append(([p.copy() for p in self.profiles], {}))

    def place(self, i: int, profiles: list[FreeProfile], floor: dict[int, float],
              allowed: np.ndarray | None = None, k: int | None = None, duration: float | None = None,
              scope: int | None = None, as_planned: bool = True) -> float:
        """Book row ``i`` at its earliest start; under strict queueing no earlier than the jobs ahead of
        it in its scope (rule *strict FIFO*: the head blocks the rest)."""
        allowed = self.allowed[i] if allowed is None else allowed
        k = int(self.ctx.pending.num_gpus[i]) if k is None else k
        d = float(self.dur[i]) if duration is None else float(duration)
        if scope is None:
            scope = int(self.scope[i]) if i >= 0 else 0
        not_before = floor.get(scope, -math.inf) if self.strict else -math.inf
        if as_planned and i in self.reserved_from:
            not_before = max(not_before, self.reserved_from[i])
        held = as_planned and i >= 0 and self.plan.action[i] in ("wait", "reserve")
        if held:
            not_before = max(not_before, self.next_change)
        best, best_t = self._fit(profiles, allowed, k, d, not_before, held)
        if best_t >= 0:
            profiles[best_t].book(best, k, d)
        if self.strict:
            floor[scope] = max(floor.get(scope, -math.inf), best)
        if as_planned and self.backfill and profiles is self.profiles and i >= 0:
            if i in self.protected:  # a reserved job: booked on the open profile where the walk put it
                if best_t >= 0:
                    self.open_profiles[best_t].book(best, k, d)
                self.early[i] = best
            else:
                self.early[i] = min(self._fit(self.open_profiles, allowed, k, d, not_before, held)[0], best)
        return best

    def _fit(self, profiles: list[FreeProfile], allowed: np.ndarray, k: int, d: float, not_before: float,
             held: bool) -> tuple[float, int]:
        """Earliest start over the allowed types (and the type), booking nothing."""
        best, best_t = math.inf, -1
        for t in np.flatnonzero(allowed):
            s = profiles[t].earliest(k, d, max(not_before, self.gang_floor(int(t), k)) if held else not_before)
            if s < best:
                best, best_t = s, int(t)
        return best, best_t

    def gang_floor(self, t: int, k: int) -> float:
        """Rule *gang on nodes*: the earliest instant the GPUs held now (running jobs and this plan's
        starts) leave ``k`` GPUs of type ``t`` free on one node (``k`` up to a node's GPUs) or
        ``ceil(k / G)`` whole nodes of ``G`` GPUs free (larger gangs); -inf for one GPU. It binds a
        job the plan holds (wait, reserve): the plan saw free GPUs scattered over nodes and did not
        start it there; what-ifs and scored jobs are booked without it."""
        if k <= 1:
            return -math.inf
        key = (t, k)
        out = self._gang_floors.get(key)
        if out is None:
            nodes = self._nodes[t]  # (nodes of type t, G): each node's GPU free times, ascending
            if nodes.size == 0:
                out = math.inf
            elif k <= nodes.shape[1]:
                out = float(nodes[:, k - 1].min())
            else:
                whole = np.sort(nodes[:, -1])
                m = -(-k // nodes.shape[1])
                out = float(whole[m - 1]) if m <= len(whole) else math.inf
            self._gang_floors[key] = out
        return out

    def _skip(self, i: int) -> bool:
        a = self.plan.action[i]
        return (a in ("start", "preempt") and np.isfinite(self.start[i])) or a == "reject" \
            or int(self.ctx.sizing.flavor[i]) < 0

    def run(self, until: set[int] | None = None, detailed: int = DETAILED_JOBS) -> np.ndarray:
        left = None if until is None else set(until)
        order = self.order.tolist()
        self.detailed = min(detailed, len(order))
        for pos, i in enumerate(order[:self.detailed]):
            if self.check_every and pos and pos % self.check_every == 0:
                self.checks.append(([p.copy() for p in self.profiles], dict(self.floor)))
            if left is not None:
                if not left:
                    break
                left.discard(i)
            if not self._skip(i):
                self.start[i] = self.place(i, self.profiles, self.floor)
        if self.detailed < len(order) and (left is None or left):
            self._fluid(np.asarray(order[self.detailed:], dtype=np.int64))
        self.start[~np.isfinite(self.start)] = np.nan
        return self.start

    # ------------------------------------------------------------------ rule *deep queue*
    def _capacity(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Type ``t``'s profile as (step times, free GPUs, GPU-seconds free before each step)."""
        prof = self.profiles[t]
        cum = np.concatenate([[0.0], np.cumsum(prof.free[:-1] * np.diff(prof.times))])
        return prof.times, prof.free, cum

    def _when(self, t: int, work: np.ndarray) -> np.ndarray:
        """When ``work`` GPU-seconds have flowed through type ``t``'s free capacity."""
        times, free, cum = self._caps[t]
        j = np.clip(np.searchsorted(cum, work, side="right") - 1, 0, len(cum) - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = times[j] + (work - cum[j]) / free[j]
        return np.where(free[j] > 0, out, np.inf)

    def _fluid(self, rows: np.ndarray) -> None:
        p = self.ctx.pending
        keep = np.array([not self._skip(int(i)) for i in rows], dtype=bool) if len(rows) else np.zeros(0, bool)
        rows = rows[keep]
        self.fluid_rows = rows
        self.fluid_type = self.ctx.sizing.flavor[rows]
        self.fluid_work = p.num_gpus[rows] * np.where(np.isfinite(self.dur[rows]), self.dur[rows], 0.0)
        self._caps = {t: self._capacity(t) for t in range(len(self.profiles))}
        for t in np.unique(self.fluid_type):
            mine = self.fluid_type == t
            before = np.cumsum(self.fluid_work[mine]) - self.fluid_work[mine]
            self.start[rows[mine]] = np.maximum(self._when(int(t), before), self.now)

    def what_if(self, i: int, *, allowed: np.ndarray | None, position: int | None,
                num_gpus: int | None, duration: float | None, scope: int | None = None) -> float:
        order = self.order.tolist()
        if i < 0 and None in (allowed, position, num_gpus, duration):
            raise ValueError("a job not in the plan needs allowed, position, num_gpus and duration")
        pos = order.index(i) if position is None else min(int(position), len(order))
        if pos >= self.detailed and len(order) > self.detailed:
            return self._fluid_what_if(i, pos, allowed, num_gpus, duration)
        c = min(pos // self.check_every, len(self.checks) - 1)
        saved, saved_floor = self.checks[c]
        profiles, floor = [p.copy() for p in saved], dict(saved_floor)
        action = self.plan.action
        for j in order[c * self.check_every:pos]:
            if j == i or action[j] in ("start", "preempt", "reject") or int(self.ctx.sizing.flavor[j]) < 0:
                continue
            self.place(j, profiles, floor)
        # the changed job is not the job the plan decided on: neither its reservation nor its "wait" binds
        return max(self.place(i, profiles, floor, allowed=allowed, k=num_gpus, duration=duration, scope=scope,
                              as_planned=False), self.now)

    def _fluid_what_if(self, i: int, pos: int, allowed: np.ndarray | None, num_gpus: int | None,
                       duration: float | None) -> float:
        allowed = self.ctx.sizing.allowed[i] if allowed is None else allowed
        ahead = np.isin(self.fluid_rows, self.order[self.detailed:pos]) & (self.fluid_rows != i)
        best = math.inf
        for t in np.flatnonzero(allowed):
            if (num_gpus or int(self.ctx.pending.num_gpus[i])) > self.profiles[t].total:
                continue
            work = float(self.fluid_work[ahead & (self.fluid_type == t)].sum())
            best = min(best, float(self._when(int(t), np.array([work]))[0]))
        return max(best, self.now)


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
        Keep checkpoints of the walks for :meth:`StartEstimates.start_with`.
    """
    ctx = plan_context(plan)
    snap, policy = ctx.snapshot, ctx.policy
    now, run = float(snap.now), snap.running
    rcfg = policy.reservation
    if running_durations is None:
        d90 = np.where(np.isfinite(run.predicted_end_ts), run.predicted_end_ts - run.start_ts, rcfg.unknown_duration_s)
        ends = running_quantile_ends(run.start_ts, [d90, d90, d90], now, rcfg.overrun_extension_s)
    else:  # a run without a prediction: the rules layer's own p90 end (from its limit or the default)
        known = np.where(np.isfinite(run.predicted_end_ts), run.predicted_end_ts - run.start_ts, rcfg.unknown_duration_s)
        given = [np.asarray(d, dtype=np.float64) for d in running_durations]
        given = [np.where(np.isfinite(d), d, known) for d in given]
        ends = running_quantile_ends(run.start_ts, given, now, rcfg.overrun_extension_s)
    p = ctx.pending
    grace = float(policy.preemption.grace_s)
    until = None if rows is None else {int(r) for r in rows}
    starts, walks = [], []
    for q, name in enumerate(QUANTILES):
        dur = ctx._fallback_duration(getattr(p, f"{name}_s"))  # noqa: SLF001 - the rules layer's own fallback
        walk = _Walk(ctx, plan, dur, ends[q], grace, checkpoints=what_if, reservations_bind=name == "p90",
                     backfill=name == "p10")
        starts.append(walk.run(until))
        walks.append(walk)
    lo, mid, hi = starts
    mid = np.fmax(mid, lo)
    hi = np.fmax(hi, mid)
    early = walks[0].early
    early = np.where(np.isfinite(early) & np.isfinite(lo), np.minimum(early, lo), lo)
    lo = lo - BACKFILL_WEIGHT * (lo - early)  # rule *backfill window* (module docstring): p50/p90 unmoved
    limit_ts = None
    if running_time_limits is not None:
        lim = np.asarray(running_time_limits, dtype=np.float64)
        run_end = np.where(np.isfinite(lim), run.start_ts + lim, np.nan)
        run_end = np.where(np.isfinite(run_end), np.maximum(run_end, now), ends[-1])
        dur = np.where(np.isfinite(p.time_limit_s), p.time_limit_s, rcfg.unknown_duration_s)
        limit_ts = _Walk(ctx, plan, dur, run_end, grace).run(until)
    return StartEstimates(now=now, job_id=p.job_id, p10_ts=lo, p50_ts=mid, p90_ts=hi, basis=walks[1].basis,
                          time_limit_ts=limit_ts, backfill_ts=early, _walks=tuple(walks) if what_if else ())
