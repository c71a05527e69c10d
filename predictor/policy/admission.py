"""Phase 4 of ``decide()``: walk the queue in priority order and decide each job.

Rules (named here, stated in docs/rules-layer.md (*One cycle*) and in the modules they come from): *reject*
what can never run; *strict FIFO* blocking; *quota admission* (``quota``); *best-class placement*
and *backfill by p90* (``capacity.book``); *wait for a better placement*; *preemption trigger*,
*preemption worth it* (``preemption.max_loss_ratio``), *victim choice* (``preemption``) and
*eviction hand-over*; *earliest start* reservations up to ``reservation.depth`` (*reserve only the starving*:
``reservation.only_starving``); *scheduling depth*
(``queueing.scheduling_depth``: blocked jobs tested per cycle).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from features.schema import PLACEMENT_CLASSES as CLS
from predictor.capacity.book import CapacityBook
from predictor.capacity.eligibility import why_nowhere
from predictor.capacity.layout import MILLI
from predictor.capacity.placement import GangChoice
from predictor.policy.admission_preempt import PreemptionSteps
from predictor.policy.context import CycleContext
from predictor.policy.factors.base import hours
from predictor.policy.plan import Outcome
from predictor.policy.preemption import (
    preemption_cost_s,
    work_lost_s,
)
from predictor.policy.quota import QuotaBook

__all__ = ["Admission"]

#: A thin walk over a queue longer than this reads per-job columns as arrays, not lists.
_LIST_UP_TO = 512


class Admission(PreemptionSteps):
    """Phase 4: the walk over the queue (see the module docstring)."""

    def __init__(self, ctx: CycleContext, book: CapacityBook, priority: np.ndarray, run_prio: np.ndarray,
                 may_preempt: np.ndarray, *, thin_after: int | None = None, guarded: np.ndarray | None = None) -> None:
        self.ctx, self.book, self.priority, self.run_prio = ctx, book, priority, run_prio
        self.may_preempt = may_preempt
        pol = ctx.policy
        self.pol = pol
        self.now = ctx.now
        p, r = ctx.pending, ctx.snapshot.running
        self.outcomes: dict[int, Outcome] = {}
        self.reserve_left = pol.reservation.depth
        # rule *reserve only the starving* (reservation.only_starving): the guard band heads the order,
        # so no reservation is left once the walk reaches a job outside it
        self.guarded_only = None
        if pol.reservation.only_starving:
            self.guarded_only = (guarded if guarded is not None else np.zeros(len(p), dtype=bool)).tolist()
        pc = pol.preemption
        self.preempt_left = pc.max_preemptors_per_cycle if pc.enabled and len(r) else 0
        self.strict = pol.queueing.strategy == "strict"
        self.blocked_all = False
        self.blocked: set[int] = set()
        n_queues = len(ctx.snapshot.queues)
        self.scope = np.where(p.queue >= 0, p.queue, n_queues + 1 + p.team)
        self.quota = QuotaBook(pol, ctx.snapshot.teams, r.team, r.num_gpus * r.gpu_milli / MILLI,
                               ctx.layout.n_gpus) if pol.quotas.enabled else None
        self.evicted = np.zeros(len(r), dtype=bool)
        slow = np.where(np.isfinite(p.slowdown) & (p.slowdown >= 1.0), p.slowdown, 1.0)
        self.slow = np.maximum.accumulate(slow, axis=1) if len(p) else slow
        self.preemptor_tiers = may_preempt.any(axis=1)
        self.fail: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self.preempt_fail: dict[tuple[int, int, int], list[tuple[int, int, float]]] = {}
        self.revisit = math.inf
        self.considered = 0
        self.attempts = 0
        depth = pol.queueing.scheduling_depth
        self.test_left = math.inf if depth is None else depth  # blocked jobs still to test (scheduling depth)
        self.beyond_depth = 0
        # walk only the jobs that may still act once only starts and preemptions are left, when more
        # than this many jobs remain (None: walk every job, the reference walk); the same outcomes
        self.thin_after = thin_after
        self._preemptible = np.zeros(0, dtype=bool)

    @cached_property
    def end0(self) -> np.ndarray:
        """Each pending job's predicted (p90) end if it started now on its best placement class."""
        return self.now + self.ctx.p90 * self.slow[:, 0]

    @cached_property
    def milli_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct GPU shares asked for (ascending), and each pending job's index into them."""
        values, codes = np.unique(self.ctx.pending.gpu_milli, return_inverse=True)
        return values, codes.reshape(-1)

    @cached_property
    def lost_s(self) -> np.ndarray:
        """Seconds of work each running job would lose if evicted now (rule *work lost*)."""
        r = self.ctx.snapshot.running
        return work_lost_s(r, self.now, self.pol.preemption.assumed_checkpoint_interval_s)

    @cached_property
    def lost_gpu_s(self) -> np.ndarray:
        """GPU-seconds each eviction costs (rule *preemption cost*: lost work + checkpoint write + restore)."""
        r, pc = self.ctx.snapshot.running, self.pol.preemption
        cost_s = preemption_cost_s(r, self.now, pc.assumed_checkpoint_interval_s, pc.checkpoint_bandwidth_gb_s)
        return cost_s * r.num_gpus * r.gpu_milli / MILLI

    # ------------------------------------------------------------------ the walk
    def run(self, order: np.ndarray) -> None:
        """Walk the queue. Jobs that can neither start, reserve nor preempt are passed over in a few
        list look-ups; only jobs with something to do pay for placement searches."""
        ctx, book = self.ctx, self.book
        sizing = ctx.sizing
        for i in (sizing.flavor < 0).nonzero()[0].tolist():
            self.outcomes[i] = Outcome("reject", note=self._never_note(i))
        sizing_never = sizing.flavor < 0
        # per-job columns as lists for the walk's look-ups; a thin walk over a long queue looks up a
        # few jobs only, so it reads the arrays themselves (same values) instead of converting them
        as_seq = (lambda a: a.tolist()) if self.thin_after is None or len(order) <= _LIST_UP_TO else (lambda a: a)
        never = as_seq(sizing_never)
        g_of = as_seq(ctx.pending.num_gpus)
        share = as_seq(ctx.pending.gpu_milli < MILLI)
        single_type = ctx.layout.n_types == 1
        one_type = [0]
        allowed = None if single_type else [np.flatnonzero(row).tolist() for row in sizing.allowed]
        # rule *start below the bound*: the types a job may start on now, those that hold its bound first
        start_types = allowed if allowed is None or sizing.below is None else [
            a + np.flatnonzero(b).tolist() if b.any() else a for a, b in zip(allowed, sizing.below, strict=True)]
        whole, some = book.whole_free_by_type, book.any_free_by_type
        end0 = as_seq(self.end0)  # predicted end on the best placement
        preemptible = as_seq(self._preemption_possible())
        has_deadline = as_seq(np.isfinite(ctx.deadline)) if self.preempt_left > 0 else []
        trigger = self.pol.preemption.trigger_wait_s
        scope = as_seq(self.scope)
        strict = self.strict
        beyond = Outcome("wait", note="no capacity free now; beyond the scheduling depth this cycle "
                                      "(queueing.scheduling_depth)")
        rows, pos, fits_only = as_seq(order), 0, False
        thin_after = self.thin_after
        # the thin walk (thin_after given): ``where`` holds the positions in ``order`` of ``rows``, and
        # ``exact`` says that ``rows`` are the jobs that may still act, found again after each booking
        where: list[int] | np.ndarray | None = None
        exact = False

        def may_act(positions: np.ndarray, ok: np.ndarray | None = None) -> tuple[list[int] | np.ndarray, ...]:
            """The jobs at ``positions`` of ``order`` that may still act once no reservation is left:
            those fitting now by the exact count of ``_fit_now_mask`` (a start), or that may preempt.
            Any other job the full walk would pass over, or consider only to wait (no start: no GPU
            holds its share unreserved until its predicted end, and capacity only shrinks)."""
            rest = order[positions]
            keep = self._fit_now_mask(rest, exact=True)
            if self.preempt_left > 0:
                maybe = self._preemptible[rest] & ~keep
                if maybe.any():
                    keep[maybe] = self._trigger_may_fire(rest[maybe])
            if ok is not None:
                keep &= ok
            return as_seq(rest[keep]), as_seq(positions[keep])

        cur = -1  # position in ``order`` of the job being walked (until fits_only)
        while pos < len(rows):
            i = int(rows[pos])
            prev, cur = cur, (pos if where is None else int(where[pos]))
            pos += 1
            if self.guarded_only is not None and not self.guarded_only[i]:
                self.reserve_left = 0
            if strict and self.blocked_all:
                break  # strict order blocked everywhere: no later job may do anything this cycle
            if never[i] or (strict and scope[i] in self.blocked):
                continue
            if (self.reserve_left <= 0 and self.preempt_left <= 0 or self.test_left <= 0) and not some.any():
                break  # nothing free, and nothing to reserve, nobody may preempt or depth used: the rest waits
            if not fits_only and not strict and (self.test_left <= 0 or (self.reserve_left <= 0 and self.preempt_left <= 0)):
                # only starts are left: walk on over the jobs that fit in what is free now (capacity only
                # shrinks during the rest of the walk), found at once
                at = np.arange(prev + 1, len(order))  # from the job after the last one walked
                rest = order[at]
                ok = self._fit_now_mask(rest)
                if self.test_left <= 0:
                    passed = rest[~ok & ~sizing_never[rest]].tolist()
                    self.outcomes.update(dict.fromkeys(passed, beyond))
                    self.beyond_depth += len(passed)
                fits_only, pos = True, 0
                exact = thin_after is not None and self.reserve_left <= 0
                if exact:
                    rows, where = may_act(at, ok)
                else:
                    rows, where = as_seq(rest[ok]), None
                continue
            if (not exact and thin_after is not None and not fits_only and not strict and self.reserve_left <= 0
                    and len(order) - cur > thin_after):
                # only starts and preemptions are left (test_left > 0, preempt_left > 0 here): walk on
                # over the jobs that may still act only (``may_act``)
                rows, where = may_act(np.arange(cur, len(order)))
                pos, cur, exact = 0, cur - 1, True
                continue
            book.restrict(i)  # residency: this job's eligible GPUs only (rule *node eligibility*)
            g = g_of[i]
            if single_type:  # the same tests as below, without a generator per job
                types = one_type
                if share[i]:
                    fits = some[0] >= g
                else:
                    fits = whole[0] >= g and book.whole_free_until(0, end0[i]) >= g
            else:
                types = allowed[i]
                if share[i]:
                    fits = any(some[t] >= g for t in start_types[i])
                else:
                    fits = any(whole[t] >= g and book.whole_free_until(t, end0[i]) >= g for t in start_types[i])
            if not fits and self.test_left <= 0:
                self.outcomes[i] = beyond
                self.beyond_depth += 1
                if strict:
                    self._block(scope[i])
                continue
            if not fits and self.reserve_left <= 0:
                # only preemption is left: try it when possible at all and the wait would trigger it
                if not (preemptible[i] and self.preempt_left > 0) or (
                        not has_deadline[i] and (book.earliest_any(0, g) if single_type else
                                                 min(book.earliest_any(t, g) for t in types)) - self.now <= trigger):
                    if strict:
                        self._block(scope[i])
                    continue
            self.considered += 1
            if not fits:
                self.test_left -= 1
            if self.consider(i) in ("start", "preempted") and exact and pos < len(rows):
                # a booking shrank the capacity: the jobs that may still act, again
                rows, where = may_act(np.asarray(where[pos:], dtype=np.int64))
                pos = 0

    def _fit_now_mask(self, rows: np.ndarray, *, exact: bool = False) -> np.ndarray:
        """Per row, could its gang fit in the GPUs free now (counts only: an over-estimate)?

        The walk's own test counts the wholly free GPUs of a whole-GPU job's types and the partly
        free ones of a GPU share's. With ``exact`` it counts, per row, the GPUs with at least the
        job's share free that no reservation holds before its predicted end on the best placement:
        still a necessary condition of ``CapacityBook.place_now`` (topology and node eligibility
        ignored), and one that stays false for the rest of the cycle's walk (capacity only
        shrinks, reservations only grow)."""
        ctx, book, lay = self.ctx, self.book, self.ctx.layout
        g = ctx.pending.num_gpus[rows]
        milli = ctx.pending.gpu_milli[rows]
        share = milli < MILLI
        allowed = None if lay.n_types == 1 else ctx.sizing.allowed[rows]
        if allowed is not None and ctx.sizing.below is not None:  # rule *start below the bound*
            allowed = allowed | ctx.sizing.below[rows]

        def fits(count_by_type: np.ndarray, sel=slice(None)) -> np.ndarray:
            """``count_by_type``: (n_types,) or (rows, n_types) counts of usable GPUs."""
            if count_by_type.ndim == 1:
                count_by_type = count_by_type[None, :]
            if allowed is None:
                return count_by_type[:, 0] >= g[sel]
            return (allowed[sel] & (count_by_type >= g[sel, None])).any(axis=1)

        if not exact:
            ok = fits(book.whole_free_by_type)
            if share.any():
                ok = np.where(share, fits(book.any_free_by_type), ok)
            return ok & (ctx.sizing.flavor[rows] >= 0)
        ok = np.zeros(len(rows), dtype=bool)
        values, codes = self.milli_codes
        codes = codes[rows]
        end0 = self.end0[rows] if book.any_reserved else None
        for k, m in enumerate(values.tolist()):
            sel = np.flatnonzero(codes == k) if len(values) > 1 else np.arange(len(rows))
            if len(sel) == 0:
                continue
            free = book.free_milli >= m
            if allowed is None:  # one GPU type: every GPU
                if end0 is None:
                    ok[sel] = np.count_nonzero(free) >= g[sel]
                else:
                    held = np.sort(book.reserved_from[free])
                    ok[sel] = len(held) - np.searchsorted(held, end0[sel], side="left") >= g[sel]
                continue
            if end0 is None:
                ok[sel] = fits(np.bincount(lay.gpu_type[free], minlength=lay.n_types), sel)
                continue
            counts = np.zeros((len(sel), lay.n_types), dtype=np.int64)
            for t in range(lay.n_types):
                held = np.sort(book.reserved_from[free & lay.type_masks[t]])
                counts[:, t] = len(held) - np.searchsorted(held, end0[sel], side="left")
            ok[sel] = fits(counts, sel)
        return ok & (ctx.sizing.flavor[rows] >= 0)

    def _trigger_may_fire(self, rows: np.ndarray) -> np.ndarray:
        """For jobs that may preempt but do not fit by the exact count, whether the walk would go past
        rule *preemption trigger*'s cheap test once no reservation is left: True where the job fits
        by the walk's own count (a GPU share in partly free GPUs: it is considered), has a deadline,
        or waits longer than ``trigger_wait_s`` for its earliest start in any placement; the walk
        passes over the others without a side effect. The walk's test, on arrays; all True under
        node eligibility (the earliest start is per constraint there)."""
        book, p = self.book, self.ctx.pending
        if book.eligibility is not None:
            return np.ones(len(rows), dtype=bool)
        fire = (p.gpu_milli[rows] < MILLI) & self._fit_now_mask(rows)
        fire |= np.isfinite(self.ctx.deadline[rows])
        left = ~fire
        if not left.any():
            return fire
        g = p.num_gpus[rows[left]]
        if self.ctx.layout.n_types == 1:
            earliest = book.earliest_any_rows(0, g)
        else:
            allowed = self.ctx.sizing.allowed[rows[left]]
            earliest = np.full(len(g), np.inf)
            for t in range(self.ctx.layout.n_types):
                earliest = np.where(allowed[:, t], np.minimum(earliest, book.earliest_any_rows(t, g)), earliest)
        fire[left] = earliest - self.now > self.pol.preemption.trigger_wait_s
        return fire

    def _preemption_possible(self) -> np.ndarray:
        """Per job, a cheap over-estimate: could evicting lower-priority jobs it may preempt free enough
        GPUs? Also sets ``revisit`` to when a job now too young to be preempted stops being so."""
        ctx, pc = self.ctx, self.pol.preemption
        n = len(ctx.pending)
        r = ctx.snapshot.running
        if self.preempt_left <= 0 or n == 0:
            self._preemptible = np.zeros(n, dtype=bool)
            return self._preemptible
        old = (self.now - r.start_ts) >= pc.min_runtime_s
        held = r.num_gpus * r.gpu_milli / MILLI
        prio = self.priority
        possible = np.zeros(n, dtype=bool)
        young_wanted = np.zeros(len(r), dtype=bool)
        free = float(self.book.any_free_by_type.sum())
        if pc.scope == "tier_rules":
            groups = [(np.flatnonzero(ctx.tier_index == t), self.may_preempt[t][ctx.running_tier_index])
                      for t in np.flatnonzero(self.preemptor_tiers)]
        else:  # any lower priority (kueue's team and borrowing rules are checked exactly later)
            groups = [(np.arange(n), np.ones(len(r), dtype=bool))]
        for rows, victim_ok in groups:
            if len(rows) == 0:
                continue
            eligible = victim_ok & old
            order = np.argsort(self.run_prio[eligible], kind="stable")
            sorted_prio = self.run_prio[eligible][order]
            cum = np.concatenate([[0.0], np.cumsum(held[eligible][order])])
            below = cum[np.searchsorted(sorted_prio, prio[rows], side="left")]
            possible[rows] = (below > 0) & (below + free >= ctx.pending.num_gpus[rows])
            young_wanted |= victim_ok & ~old & (self.run_prio < prio[rows].max())
        if young_wanted.any():
            self.revisit = min(self.revisit, float((r.start_ts[young_wanted] + pc.min_runtime_s).min()))
        self._preemptible = possible
        return possible

    def consider(self, i: int) -> str:
        """Decide one job (steps a-d of the module docstring); returns the action taken."""
        ctx, book, p = self.ctx, self.book, self.ctx.pending
        book.restrict(i)  # residency: this job's eligible GPUs only (rule *node eligibility*)
        g, m = int(p.num_gpus[i]), int(p.gpu_milli[i])
        scope = int(self.scope[i])
        if self.strict and (self.blocked_all or scope in self.blocked):
            self.outcomes[i] = Outcome("wait", note="behind the blocked head of its queue (strict FIFO)")
            return "wait"
        team, demand = int(p.team[i]), g * m / MILLI
        if self.quota is not None and not self.quota.fits(team, demand):
            self.outcomes[i] = Outcome("wait", note=f"over quota ({self.quota.describe(team)}; needs {demand:g} more)")
            self._block(scope)
            return "wait"
        d50, d90, slow = float(ctx.p50[i]), float(ctx.p90[i]), self.slow[i]
        ends = self.now + d90 * slow
        types = np.flatnonzero(ctx.sizing.allowed[i]).tolist() if ctx.layout.n_types > 1 else [0]
        below = ctx.sizing.below
        under = np.flatnonzero(below[i]).tolist() if below is not None and ctx.layout.n_types > 1 else []
        # b. start now (or wait for a better placement); rule *start below the bound*: on a type that
        # holds only the point estimate when none that holds the bound has room now
        choice, t = self._place_now(types + under if under else types, g, m, ends)
        if choice is not None:
            c = choice.placement_class
            below_bound = bool(under) and t in under
            if not below_bound and self.pol.placement.wait_for_better and self.reserve_left > 0 and slow[c] > slow[0] + 1e-9:
                later = self._better_later(t, g, c, d50, slow, self.now + d50 * slow[c])
                if later is not None:
                    start, ch, note = later
                    self._reserve(i, t, ch, start, start + d90 * slow[ch.placement_class], note)
                    return "reserve"
            backfill = book.any_reserved and bool(np.isfinite(book.reserved_from[choice.gpus]).any())
            book.take(choice.gpus, m, float(ends[c]))
            if self.quota is not None:
                self.quota.add(team, demand)
            self.outcomes[i] = Outcome("start", type_code=t, gpus=choice.gpus, placement_class=c,
                                       start_ts=self.now, end_ts=float(ends[c]), backfill=backfill,
                                       note=self._below_note(i, t, m) if below_bound else "")
            return "start"
        # c./d. cannot start now
        res, wait = None, None
        if self.reserve_left > 0:
            res = self._earliest(types, g, d50, slow, better=self.pol.placement.wait_for_better)
            wait = res[0] - self.now if res is not None else math.inf
        if self._may_try_preempt(i, g, m, types, ends):
            if wait is None:  # the earliest start in any placement (cached between bookings)
                wait = min((self.book.earliest_any(t, g) for t in types), default=math.inf) - self.now
            start_class = res[2].placement_class if res is not None else 0
            # a deadline-triggered preemption is exempt from rule *preemption worth it* (wait = inf)
            saved = wait if wait > self.pol.preemption.trigger_wait_s else math.inf
            if self._should_preempt(i, wait, d90 * slow[start_class]) and self._preempt(i, types, g, m, d90, slow, saved):
                return "preempted"
        if res is not None and self.reserve_left > 0:
            start, t, ch, note = res
            self._reserve(i, t, ch, start, start + d90 * slow[ch.placement_class], note)
        else:
            why = "no reservation left this cycle (reservation.depth)" if self.reserve_left <= 0 \
                else "no placement for its gang even when running jobs end"
            self.outcomes[i] = Outcome("wait", note=f"no capacity free now; {why}")
        self._block(scope)
        return self.outcomes[i].action

    # ------------------------------------------------------------------ rules
    def _block(self, scope: int) -> None:
        if self.strict:
            if self.pol.queueing.scope == "cluster":
                self.blocked_all = True
            else:
                self.blocked.add(scope)

    def _place_now(self, types: list[int], g: int, m: int, ends: np.ndarray) -> tuple[GangChoice | None, int]:
        book = self.book
        for t in types:
            if not book.could_fit_now(t, g, m):
                continue
            failed = self.fail.get((t, m, book.scope))  # residency: failures hold per constraint
            if failed and any(g >= fg and (not book.any_reserved or ends[0] >= fe) for fg, fe in failed):
                continue
            self.attempts += 1
            choice = book.place_now(t, g, m, ends)
            if choice is not None:
                return choice, t
            self.fail.setdefault((t, m, book.scope), []).append((g, float(ends[-1])))
        return None, -1

    def _better_later(self, t: int, g: int, c: int, d50: float, slow: np.ndarray, done_base: float,
                      times: np.ndarray | None = None) -> tuple[float, GangChoice, str] | None:
        """Rule *wait for a better placement*: the better class whose predicted completion is earliest."""
        if times is None:
            times = self.book.earliest_by_class(t, g)
        done = times[:c] + d50 * slow[:c]
        if len(done) == 0:
            return None
        k = int(np.argmin(done))
        if not done[k] + self.pol.placement.wait_margin_s < done_base:
            return None
        found = self.book.earliest_start(t, g, max_class=k, times=times)
        if found is None:
            return None
        start, ch = found
        finish = start + d50 * slow[ch.placement_class]
        note = (f"Waits for {CLS[ch.placement_class]}: predicted to finish in {hours(finish - self.now)}, "
                f"earlier than {hours(done_base - self.now)} on {CLS[c]}.")
        return start, ch, note

    def _earliest(self, types: list[int], g: int, d50: float, slow: np.ndarray, *, better: bool
                  ) -> tuple[float, int, GangChoice, str] | None:
        book = self.book
        found = None
        for t in types:
            start = book.earliest_any(t, g)
            if np.isfinite(start) and (found is None or start < found[0]):
                found = (start, t)
        if found is None:
            return None
        t = found[1]
        res = book.earliest_start(t, g, times=np.full(5, found[0]))
        if res is None:
            return None
        start, ch = res
        note = "Cannot start now; the GPUs free up (running jobs' p90) then."
        c = ch.placement_class
        if better and c > 0 and slow[c] > slow[0] + 1e-9:
            later = self._better_later(t, g, c, d50, slow, start + d50 * slow[c])
            if later is not None:
                start, ch, note = later
        return start, t, ch, note

    def _below_note(self, i: int, t: int, m: int) -> str:
        lay, need = self.ctx.layout, float(self.ctx.sizing.need_mib[i])
        return (f"Below its predicted peak-memory bound ({need:,.0f} MiB per GPU with margin; "
                f"{lay.gpu_types[t]} holds {lay.type_memory_mib[t] * m / MILLI:,.0f}): no GPU of a type that "
                "holds the bound was free, and its point estimate fits (rule start below the bound; OOM risk).")

    def _reserve(self, i: int, t: int, ch: GangChoice, start: float, end: float, note: str) -> None:
        lend = self.pol.reservation.backfill == "p90" and not self.strict
        self.book.reserve(ch.gpus, start, end, lend=lend)
        self.reserve_left -= 1
        self.outcomes[i] = Outcome("reserve", note=note, type_code=t, gpus=ch.gpus,
                                   placement_class=ch.placement_class, start_ts=start, end_ts=end)

    def _never_note(self, i: int) -> str:
        p, lay, sizing = self.ctx.pending, self.ctx.layout, self.ctx.sizing
        g = int(p.num_gpus[i])
        if sizing.constrained is not None and sizing.constrained[i]:  # residency: name the constraint
            text = self.book.eligibility.text_of(i) if self.book.eligibility is not None else None
            req = None if p.requested_types is None else np.flatnonzero(p.requested_types[i]).tolist()
            return why_nowhere(lay, text or "", g, req)
        pools = lay.gpus_of_type()
        if sizing.requested_missing[i] and p.requested_types is not None and not p.requested_types[i].all():
            raw = p.gpu_request[i] if p.gpu_request is not None else None
            asked = raw or "/".join(lay.gpu_types[k] for k in np.flatnonzero(p.requested_types[i]))
            have = ", ".join(f"{int(pools[k])} x {lay.gpu_types[k]}" for k in np.flatnonzero(p.requested_types[i]))
            return f"needs {g} GPUs of type {asked or '(none known)'}; the cluster has {have or 'none of it'}"
        largest = int(pools.max()) if len(pools) else 0
        return f"needs {g} GPUs of one type; the largest pool here has {largest}"
