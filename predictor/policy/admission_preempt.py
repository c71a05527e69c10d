"""The preemption steps of the admission walk (``admission.Admission`` inherits them).

Rules (stated in docs/rules-layer.md, *One cycle* and *Preemption*): *preemption trigger*, *preemption
worth it* (``preemption.max_loss_ratio``), *victim choice* (``preemption.choose_victims``), *snapshot
grace* and *eviction hand-over*. The walk calls ``_may_try_preempt`` (a cheap gate), then ``_preempt``;
both read and update the walk's state (book, quota, evicted rows, attempts left, remembered failures).
"""

from __future__ import annotations

import math

import numpy as np

from predictor.capacity.layout import MILLI
from predictor.policy.plan import Outcome
from predictor.policy.preemption import choose_victims, eviction_grace_s, milli_of

__all__ = ["PreemptionSteps"]


class PreemptionSteps:
    """Rule *preemption trigger* to *eviction hand-over*, as methods of the admission walk."""

    def _may_try_preempt(self, i: int, g: int, m: int, types: list[int], ends: np.ndarray) -> bool:
        """Cheap gate: preemption on, attempts left, tier allowed, and no failure that implies this one."""
        pc = self.pol.preemption
        if self.preempt_left <= 0:
            return False
        tier = int(self.ctx.tier_index[i])
        if pc.scope == "tier_rules" and not self.preemptor_tiers[tier]:
            return False
        key = self._preempt_key(i, m)
        prio = int(self.priority[i])
        failed = self.preempt_fail.get(key, ())
        return not any(g >= fg and prio <= fp and ends[0] >= fe for fg, fp, fe in failed)

    def _preempt_key(self, i: int, m: int) -> tuple[int, int, int]:
        scope = self.pol.preemption.scope
        tier = int(self.ctx.tier_index[i]) if scope == "tier_rules" else -1
        team = int(self.ctx.pending.team[i]) if scope == "kueue" else -1
        return tier, team, m, self.book.scope  # residency: failures hold per constraint

    def _should_preempt(self, i: int, wait_s: float, run_s: float) -> bool:
        """Rule *preemption trigger*: the wait exceeds ``trigger_wait_s``, or the deadline would be
        missed (not for a job already at risk: preempting cannot save it)."""
        if wait_s > self.pol.preemption.trigger_wait_s:
            return True
        deadline = float(self.ctx.deadline[i])
        return bool(math.isfinite(deadline) and not self.ctx.at_risk[i] and self.now + wait_s + run_s > deadline)

    def _preempt(self, i: int, types: list[int], g: int, m: int, d90: float, slow: np.ndarray,
                 wait_s: float = math.inf) -> bool:
        ctx, r, pc = self.ctx, self.ctx.snapshot.running, self.pol.preemption
        ran = self.now - r.start_ts
        cand = (self.run_prio < self.priority[i]) & ~self.evicted
        if pc.scope == "tier_rules":
            cand &= self.may_preempt[ctx.tier_index[i]][ctx.running_tier_index]
        elif pc.scope == "kueue":
            team = int(ctx.pending.team[i])
            borrowing = self.quota.borrowing_teams() if self.quota is not None else np.zeros(len(ctx.snapshot.teams), bool)
            cand &= (r.team == team) | np.append(borrowing, False)[r.team]
        young = cand & (ran < pc.min_runtime_s)
        if young.any():
            self.revisit = min(self.revisit, float((r.start_ts[young] + pc.min_runtime_s).min()))
        cand &= ~young
        ends = self.now + pc.grace_s + d90 * slow
        if not cand.any():
            self.preempt_fail.setdefault(self._preempt_key(i, m), []).append(
                (g, int(self.priority[i]), float(ends[-1])))
            return False
        ratio = pc.max_loss_ratio
        for t in types:
            if ratio is not None:
                # cheap lower bound of rule *preemption worth it*: the victims hold at least the GPUs missing
                missing = max(g - int(self.book.whole_free_by_type[t]), 1) if m >= MILLI else m / MILLI
                if missing * (float(ends[0]) - self.now) > ratio * max(wait_s - pc.grace_s, 0.0) * g * m / MILLI:
                    continue
            v = choose_victims(self.book, r, cand, self.lost_gpu_s, type_code=t, num_gpus=g, milli=m,
                               end_by_class=ends)
            if v is None:
                continue
            if ratio is not None:
                # rule *preemption worth it*: the victims lose their work since their checkpoints and then
                # wait at least the preemptor's run out; that must not outweigh the wait it saves
                run = float(ends[v.placement.placement_class]) - self.now
                held = float((r.num_gpus[v.rows] * r.gpu_milli[v.rows]).sum()) / MILLI
                if v.work_lost_gpu_s + held * run > ratio * max(wait_s - pc.grace_s, 0.0) * g * m / MILLI:
                    continue
            c = v.placement.placement_class
            # rule *snapshot grace*: the victims' system snapshots are written before the kill
            grace = eviction_grace_s(r, v.rows, pc.grace_s, pc.checkpoint_bandwidth_gb_s)
            end = float(ends[c]) if grace <= pc.grace_s else float(self.now + grace + d90 * slow[c])
            if end > ends[c] and self.book.any_reserved and (self.book.reserved_from[v.placement.gpus] < end).any():
                continue
            self._hand_over(v.rows, v.placement.gpus, m, end, self.now + grace)
            self.evicted[v.rows] = True
            if self.quota is not None:
                for row in v.rows.tolist():
                    self.quota.remove(int(r.team[row]), r.num_gpus[row] * r.gpu_milli[row] / MILLI)
                self.quota.add(int(ctx.pending.team[i]), g * m / MILLI)
            self.preempt_left -= 1
            self.fail.clear()
            self.preempt_fail.clear()
            self.outcomes[i] = Outcome("preempt", type_code=t, gpus=v.placement.gpus, placement_class=c,
                                       start_ts=self.now + grace, end_ts=end, victims=v.rows,
                                       lost_gpu_s=v.work_lost_gpu_s)
            return True
        self.preempt_fail.setdefault(self._preempt_key(i, m), []).append((g, int(self.priority[i]), float(ends[-1])))
        return False

    def _hand_over(self, victims: np.ndarray, gpus: np.ndarray, m: int, end: float, grace_end: float) -> None:
        """Rule *eviction hand-over*: the preemptor gets its GPUs after the grace period; the rest of the
        victims' shares stay held until then (no job of this cycle may start on them now)."""
        book = self.book
        freed_gpus, shares = milli_of(self.ctx.snapshot.running, victims)
        before = book.free_milli.copy()
        book.give_back(freed_gpus, shares)
        book.take(gpus, m, end)
        uniq = np.unique(freed_gpus)
        freed = np.bincount(freed_gpus, weights=shares, minlength=book.layout.n_gpus)[uniq]
        taken = np.zeros(book.layout.n_gpus)
        taken[gpus] = m
        from_freed = np.maximum(taken[uniq] - before[uniq], 0.0)
        hold = np.minimum(freed - from_freed, book.free_milli[uniq]).astype(np.int64)
        if (hold > 0).any():
            book.take(uniq[hold > 0], hold[hold > 0], grace_end)
