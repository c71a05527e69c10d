"""``decide(snapshot, policy) -> SchedulePlan``: the one scheduling function production and replay call.

One cycle, top to bottom (after Kueue's scheduler; rules are named in the module docstrings of
``predictor.capacity.book``, ``placement``, ``sizing``, ``predictor.policy.preemption``, ``ordering``):

1. **snapshot**  open a capacity book: free shares now, when each GPU frees up (running jobs' p90).
2. **nominate**  size every pending job: the GPU types it may use (flavor from predicted memory).
3. **order**     the policy's ordering ranks the jobs (vectorised), starvation guard on top.
4. **admit**     walk the queue in priority order (``predictor.policy.admission``), for each job:
   a. *reject* it if it can never run here; *wait* if a strict head blocks its queue or its team's
      quota is spent;
   b. *start* it now on the best placement free (not on GPUs reserved before its p90 end), unless
      waiting for a better placement class finishes earlier (then *reserve* that);
   c. else, if it may preempt and waiting would take too long (or miss its deadline): *preempt*
      the cheapest set of lower-priority victims;
   d. else *reserve* the earliest GPUs that fit (while reservation depth lasts), or *wait*.
   The walk stops early once nothing is free, no reservation is left to give and no job may preempt.
   *Scheduling depth*: at most ``queueing.scheduling_depth`` jobs that cannot start in the free GPUs
   are tested for c./d. per cycle; jobs that fit are always tried.
5. **plan**      freeze the decisions, reservations and eviction plans.

Nothing is performed: the snapshot is not modified and no I/O happens. The same snapshot and policy
always give the same plan.

Cost per cycle, P pending, R running, G GPUs: O(P log P) for sizing, factors and the sort (numpy);
O(G) per placement attempt for at most (jobs started + a few per blocked job until the cluster is
full); O(G log G) per reservation, at most ``reservation.depth`` of them; preemption O(R + G) per
candidate set, at most ``preemption.max_preemptors_per_cycle`` of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from predictor.capacity.book import CapacityBook, predicted_busy_until
from predictor.capacity.placement import GangMemo
from predictor.capacity.sizing import SizingOutcome, size_jobs
from predictor.policy.admission import Admission
from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext
from predictor.policy.ordering import ORDERINGS, Ordering, OrderKeys, order_pending
from predictor.policy.plan import DecisionWriter, SchedulePlan
from predictor.policy.preemption import tier_preemption
from predictor.policy.residency import cycle_eligibility
from predictor.policy.snapshot import ClusterSnapshot

__all__ = ["decide", "open_cycle", "run_cycle", "write_plan", "CycleResult"]

_COMPILED: dict[int, tuple[PolicyConfig, Ordering, np.ndarray]] = {}


def _compile(policy: PolicyConfig) -> tuple[Ordering, np.ndarray]:
    hit = _COMPILED.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1], hit[2]
    ordering = ORDERINGS[policy.ordering](policy)
    may = tier_preemption(policy)
    if len(_COMPILED) > 64:
        _COMPILED.clear()
    _COMPILED[id(policy)] = (policy, ordering, may)
    return ordering, may


def open_cycle(snapshot: ClusterSnapshot, policy: PolicyConfig, sizing: SizingOutcome | None = None,
               gang_memo: GangMemo | None = None) -> CycleContext:
    """Phases 1-2: open the capacity book and size the pending jobs (unless ``sizing`` is given);
    the context factors read. ``gang_memo`` remembers gang searches across cycles (same answers)."""
    lay, now, pend, run = snapshot.layout, float(snapshot.now), snapshot.pending, snapshot.running
    rcfg = policy.reservation
    busy = predicted_busy_until(lay.n_gpus, now, run.alloc_gpus, run.alloc_offsets, run.start_ts,
                                run.predicted_end_ts, overrun_extension_s=rcfg.overrun_extension_s,
                                overrun_growth=rcfg.overrun_growth,
                                unknown_duration_s=rcfg.unknown_duration_s)
    # residency (docs/residency.md): each pending job's eligible nodes, from its constraint and the policy
    eligibility = cycle_eligibility(lay, pend, snapshot.teams, policy.residency, snapshot.queues)
    book = CapacityBook(lay, now, snapshot.free_milli, busy, strategy=policy.placement.strategy,
                        eligibility=eligibility, gang_memo=gang_memo)
    if sizing is None or eligibility is not None:
        # a caller's per-job sizing (predictor.policy.incremental) knows no constraints: with any
        # constrained job pending, size this cycle's rows here (rule *node eligibility*)
        sizing = size_jobs(lay, policy.sizing, num_gpus=pend.num_gpus, gpu_milli=pend.gpu_milli,
                           peak_upper_mib=pend.peak_vram_upper_mib, requested_types=pend.requested_types,
                           eligibility=eligibility, peak_point_mib=pend.peak_vram_mib)
    return CycleContext(snapshot, policy, sizing, book)


@dataclass(frozen=True, eq=False, slots=True)
class CycleResult:
    """Phases 1-4 of one cycle, before any Decision is written (what ``decide()`` and the light
    plan of ``predictor.policy.light_plan`` both build on)."""

    ctx: CycleContext
    ordering: Ordering
    keys: OrderKeys
    order: np.ndarray
    priority: np.ndarray
    guarded: np.ndarray
    run_prio: np.ndarray
    walk: Admission
    seconds: dict

    def ranked_outcomes(self) -> list[int]:
        """Pending rows with an outcome, in priority order."""
        rank = np.empty(len(self.order), dtype=np.int64)
        rank[self.order] = np.arange(len(self.order))
        return sorted(self.walk.outcomes, key=rank.__getitem__)


def run_cycle(snapshot: ClusterSnapshot, policy: PolicyConfig, sizing: SizingOutcome | None = None,
              gang_memo: GangMemo | None = None, thin_after: int | None = None) -> CycleResult:
    """Phases 1-4 of ``decide()`` (snapshot, nominate, order, admit). ``sizing``: the pending jobs'
    sizing when the caller already has it (it must equal ``size_jobs`` on the snapshot's rows);
    ``gang_memo``: see :func:`open_cycle`; ``thin_after``: see ``Admission`` (None: the reference walk)."""
    clock = time.perf_counter
    t0 = clock()
    ordering, may_preempt = _compile(policy)
    run = snapshot.running
    ctx = open_cycle(snapshot, policy, sizing, gang_memo)  # 1. snapshot, 2. nominate
    t1 = clock()
    # 3. order
    keys = ordering.keys(ctx)
    order, priority, guarded = order_pending(ctx, keys, policy.aging)
    run_prio = ordering.running_priority(ctx)
    run_prio = run.priority if run_prio is None else run_prio
    t2 = clock()
    # 4. admit
    walk = Admission(ctx, ctx.book, priority, run_prio, may_preempt, thin_after=thin_after, guarded=guarded)
    walk.run(order)
    t3 = clock()
    return CycleResult(ctx, ordering, keys, order, priority, guarded, run_prio, walk,
                       {"nominate": t1 - t0, "order": t2 - t1, "admit": t3 - t2})


def decide(snapshot: ClusterSnapshot, policy: PolicyConfig, *, explain: bool = True,
           write_rows: np.ndarray | None = None) -> SchedulePlan:
    """Run one scheduling cycle on ``snapshot`` under ``policy`` (see the module docstring).

    Parameters
    ----------
    snapshot : ClusterSnapshot
        The cluster at ``snapshot.now``: inventory, free capacity, running and pending jobs.
    policy : PolicyConfig
        A validated policy (``predictor.policy.presets.load_policy``).
    explain : bool
        Write the readable parts of each Decision (factor details, reason sentence, warnings). A
        replay that only acts on the plan passes False: same decisions, factor values and weights,
        a terse reason. ``plan.queue()`` honours the same setting.
    write_rows : array of int, optional
        Pending rows whose Decisions to write now (default: every row acted on). A caller that reads
        a few (the scoring API: the candidates) skips writing the others: ``decisions``,
        ``reservations`` and ``evictions`` then hold those rows only, while ``action``,
        ``assignments`` and ``stats`` cover every row and ``decision_for`` writes any row on request.

    Returns
    -------
    SchedulePlan
    """
    return write_plan(run_cycle(snapshot, policy), policy, explain=explain, write_rows=write_rows)


def write_plan(cycle: CycleResult, policy: PolicyConfig, *, explain: bool = True,
               write_rows: np.ndarray | None = None) -> SchedulePlan:
    """Phase 5: freeze the cycle's outcomes into a :class:`SchedulePlan` with a Decision per job acted on
    (``write_rows``: only those rows' Decisions, see :func:`decide`)."""
    t3 = time.perf_counter()
    ctx, walk, order, priority = cycle.ctx, cycle.walk, cycle.order, cycle.priority
    snapshot = ctx.snapshot
    now, pend, run = float(snapshot.now), snapshot.pending, snapshot.running
    writer = DecisionWriter(ctx, cycle.ordering, cycle.keys, priority, cycle.guarded, cycle.run_prio, explain=explain)
    wanted = None if write_rows is None else set(np.asarray(write_rows).tolist())
    written: list[int] = []
    started: list[int] = []  # rows that start (or preempt to start), in priority order: the assignments
    for i in cycle.ranked_outcomes():
        o = walk.outcomes[i]
        if o.action == "wait":
            continue
        if wanted is None or i in wanted:
            written.append(i)
        if o.action in ("start", "preempt") and o.gpus is not None:
            started.append(i)
    decisions = writer.write_rows(written, [walk.outcomes[i] for i in written], walk.lost_s)
    action = np.full(len(pend), "wait", dtype=object)
    for i, o in walk.outcomes.items():
        action[i] = o.action
    starts = [r.start_ts for d in decisions if (r := d.reservation) is not None and r.start_ts > now]
    revisit = min([*starts, walk.revisit], default=math.inf)
    stats = {"pending": len(pend), "running": len(run), "considered": walk.considered, "beyond_depth": walk.beyond_depth,
             "placement_attempts": walk.attempts, "started": int((action == "start").sum()),
             "reserved": int((action == "reserve").sum()), "preempting": int((action == "preempt").sum()),
             "rejected": int((action == "reject").sum()),
             "seconds": {**cycle.seconds, "plan": time.perf_counter() - t3}}
    return SchedulePlan(
        now=now, policy_name=policy.name, order=order, priority=priority, action=action,
        decisions=tuple(decisions), started_rows=tuple(started),
        reservations=tuple(d.reservation for d in decisions if d.reservation is not None),
        evictions=tuple(d.eviction for d in decisions if d.eviction is not None),
        revisit_at_ts=revisit if math.isfinite(revisit) else None, stats=stats,
        _writer=writer, _outcomes=walk.outcomes,
    )
