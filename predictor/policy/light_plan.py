"""The light plan: what one cycle starts, reserves, preempts and rejects, without Decisions.

``decide()`` writes a :class:`~predictor.policy.decision.Decision` for every job it acts on
(placement with node names, factor scores, a reason). A caller that only carries the plan out (the
replay) reads a handful of fields of each; writing the rest was ~13 % of a replay. A
:class:`LightPlan` holds one :class:`Act` per job acted on, with exactly what carrying it out needs:
the GPUs (global indices), the placement class, the priority, the victims, the reservation's start.
The same walk's outcomes fill both, so the acts are the Decisions' actions, GPUs and times to the
bit (``tests/predictor/sim/test_incremental_replay.py``); the full :class:`SchedulePlan` is written
from the snapshot on first ask (:meth:`LightPlan.full`, :meth:`LightPlan.queue`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from predictor.capacity.layout import ClusterLayout
from predictor.policy.config import PolicyConfig
from predictor.policy.decision import Decision, Placement
from predictor.policy.plan import SchedulePlan, placement_of
from predictor.policy.snapshot import ClusterSnapshot

__all__ = ["Act", "LightPlan", "light_plan"]


@dataclass(frozen=True, slots=True)
class Act:
    """One job's action in a :class:`LightPlan` (``wait`` never appears).

    Attributes
    ----------
    row : int
        Pending row of the snapshot.
    job_id : str
    action : {"start", "preempt", "reserve", "reject"}
    priority : int
        The integer priority the Decision would carry (``Decision.priority``).
    gpus : ndarray of int64 or None
        Global GPU indices (sorted) to start on, or held by the reservation.
    placement_class : int
        Index into ``PLACEMENT_CLASSES`` (-1 without GPUs).
    start_ts, end_ts : float
        Start (now, after the grace for a preemption, the reservation's start) and predicted p90 end.
    victim_ids : tuple of str
        Running jobs to evict first (``preempt``).
    grace_s : float
        Grace before the victims' GPUs are free (``preempt``).
    reason : str
        The terse reason ``decide(explain=False)`` writes (``action: note``).
    type_code, slowdown, layout
        GPU type (layout code), predicted slowdown of the class, and the layout: what
        :attr:`placement` is written from.
    """

    row: int
    job_id: str
    action: str
    priority: int
    gpus: np.ndarray | None
    placement_class: int
    start_ts: float
    end_ts: float
    victim_ids: tuple[str, ...] = ()
    grace_s: float = 0.0
    reason: str = ""
    type_code: int = -1
    slowdown: float = 1.0
    layout: ClusterLayout | None = field(default=None, repr=False, compare=False)

    @property
    def placement(self) -> Placement | None:
        """The Decision's placement (node names, local indices), written on ask."""
        if self.gpus is None or self.layout is None:
            return None
        return placement_of(self.layout, self.gpus, self.type_code, self.placement_class, self.slowdown)


@dataclass(frozen=True, eq=False)
class LightPlan:
    """A cycle's acts (see the module docstring); :meth:`full` writes the SchedulePlan on demand.

    Attributes
    ----------
    now : float
    acts : tuple of Act
        In priority order, like ``SchedulePlan.decisions``.
    revisit_at_ts : float or None
        As ``SchedulePlan.revisit_at_ts``.
    stats : dict
    """

    now: float
    acts: tuple[Act, ...]
    revisit_at_ts: float | None
    stats: dict
    snapshot: ClusterSnapshot = field(repr=False)
    policy: PolicyConfig = field(repr=False)
    explain: bool = False
    _cache: dict = field(default_factory=dict, repr=False)

    def full(self) -> SchedulePlan:
        """The SchedulePlan ``decide()`` gives on the same snapshot (written once, then cached)."""
        if "full" not in self._cache:
            from predictor.policy.scheduler import decide

            self._cache["full"] = decide(self.snapshot, self.policy, explain=self.explain)
        return self._cache["full"]

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self.full().decisions

    def queue(self) -> tuple[Decision, ...]:
        return self.full().queue()

    def decision_for(self, job_id: str) -> Decision:
        return self.full().decision_for(job_id)


def light_plan(cycle, policy: PolicyConfig, *, explain: bool = False) -> LightPlan:
    """Phase 5 without Decisions: the acts of a ``scheduler.CycleResult``."""
    ctx, walk, priority = cycle.ctx, cycle.walk, cycle.priority
    snap = ctx.snapshot
    now, pend, run = float(snap.now), snap.pending, snap.running
    grace = float(policy.preemption.grace_s)
    acts = []
    revisit = walk.revisit
    counts = {"start": 0, "reserve": 0, "preempt": 0, "reject": 0}
    job_id, slowdown, layout = pend.job_id, pend.slowdown, snap.layout
    for i in cycle.ranked_outcomes():
        o = walk.outcomes[i]
        a = o.action
        if a == "wait":
            continue
        counts[a] += 1
        if a == "reserve" and o.gpus is not None and o.start_ts > now:
            revisit = min(revisit, float(o.start_ts))
        victims = () if a != "preempt" or o.victims is None else tuple(str(run.job_id[r]) for r in o.victims)
        acts.append(Act(row=i, job_id=str(job_id[i]), action=a, priority=int(priority[i]), gpus=o.gpus,
                        placement_class=o.placement_class, start_ts=float(o.start_ts), end_ts=float(o.end_ts),
                        # rule *snapshot grace*, as the plan writer: victims' snapshots written first
                        victim_ids=victims, grace_s=max(grace, float(o.start_ts) - now) if a == "preempt" else grace,
                        reason=f"{a}: {o.note}" if o.note else a,
                        type_code=o.type_code, layout=layout,
                        slowdown=float(slowdown[i, o.placement_class]) if o.placement_class >= 0 else 1.0))
    stats = {"pending": len(pend), "running": len(run), "considered": walk.considered,
             "beyond_depth": walk.beyond_depth, "placement_attempts": walk.attempts, "started": counts["start"],
             "reserved": counts["reserve"], "preempting": counts["preempt"], "rejected": counts["reject"],
             "seconds": cycle.seconds}
    return LightPlan(now=now, acts=tuple(acts), revisit_at_ts=revisit if math.isfinite(revisit) else None,
                     stats=stats, snapshot=snap, policy=policy, explain=explain)
