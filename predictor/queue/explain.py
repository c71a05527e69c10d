"""Why a pending job is not running: a chain of reasons a person reads, each naming its rule.

:func:`explain_job` reads one plan (``decide`` on the queue as it is) and its start estimates
(``predictor.queue.start_estimate``), and answers, in order:

1. **asks**          what the job asks for, and whether that is sensible (predicted memory against the
                     GPU type asked): rule *sizing* (``predictor.capacity.sizing``);
2. **could_run_on**  which GPU types and how many nodes could ever hold it (sizing);
3. **held_by**       what holds those GPUs now and until when: running jobs by predicted end (rule
                     *capacity book*: running jobs' p90 ends, ``predictor.capacity.book``);
4. **ahead**         who is ahead of it and why: its rank, and the factor breakdown of the jobs just
                     ahead beside its own (rule *ordering*: ``policy.ordering``, the starvation guard);
5. **reservation**   whether capacity is reserved for it, or for jobs ahead on its types (rule
                     *reservation*: ``reservation.depth``, backfill);
6. **limits**        quota, fair-share and scheduling-depth limits (rules *quota admission*,
                     *fairshare*, *scheduling depth*);
7. **decision**      the action and the rules layer's own sentence;
8. **start_estimate** p10/p50/p90 start (rule *start estimate*);
9. **what_if**       each change a user can make, evaluated on the same plan (the job booked with the
                     change, the jobs ahead as planned), and the one that starts it soonest.

Cost per call: O(P) array work on the plan plus what-ifs from checkpoints (a few ms at 10,000
pending); building the plan is the caller's (``ExplainCache`` keeps it while the queue is unchanged).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from predictor.capacity.layout import MILLI
from predictor.capacity.sizing import describe_sizing
from predictor.policy.decision import Decision
from predictor.policy.plan import SchedulePlan
from predictor.policy.quota import QuotaBook
from predictor.queue.start_estimate import StartEstimates, plan_context

__all__ = ["explain_job", "AHEAD_SHOWN", "HOLDERS_SHOWN"]

AHEAD_SHOWN = 5
HOLDERS_SHOWN = 8


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _factors(decision_factors) -> list[dict[str, Any]]:  # noqa: ANN001
    return [{"name": f.name, "value": f.value, "weight": f.weight, "contribution": f.contribution,
             "detail": f.detail} for f in decision_factors]


def _asks(plan: SchedulePlan, i: int, decision: Decision) -> dict[str, Any]:
    ctx = plan_context(plan)
    p, lay, sz = ctx.pending, ctx.layout, ctx.sizing
    req = None if p.requested_types is None else p.requested_types[i]
    asked = [lay.gpu_types[t] for t in np.flatnonzero(req)] if req is not None and not req.all() else []
    need = _num(sz.need_mib[i])
    flavor = int(sz.flavor[i])
    warnings = describe_sizing(lay, sz, i, num_gpus=int(p.num_gpus[i]), gpu_milli=int(p.gpu_milli[i]),
                               peak_upper_mib=float(p.peak_vram_upper_mib[i]), requested=req,
                               request_text=None if p.gpu_request is None else p.gpu_request[i])
    verdict = "sensible" if not warnings else "check the request"
    return {
        "num_gpus": int(p.num_gpus[i]), "gpu_share": float(p.gpu_milli[i]) / MILLI,
        "gpu_types_requested": asked or "any",
        "time_limit_s": _num(p.time_limit_s[i]),
        "predicted_duration_s": {"p10": _num(p.p10_s[i]), "p50": _num(p.p50_s[i]), "p90": _num(p.p90_s[i])},
        "predicted_peak_upper_mib": _num(p.peak_vram_upper_mib[i]), "memory_needed_mib": need,
        "flavor": lay.gpu_types[flavor] if flavor >= 0 else None,
        "flavor_memory_mib": _num(lay.type_memory_mib[flavor]) if flavor >= 0 else None,
        "suggested_time_limit_s": decision.time_limit_s, "verdict": verdict, "warnings": list(warnings),
        "rule": "sizing (predictor.capacity.sizing): flavor from predicted peak memory plus margin",
    }


def _could_run_on(plan: SchedulePlan, i: int) -> dict[str, Any]:
    ctx = plan_context(plan)
    lay, k = ctx.layout, int(ctx.pending.num_gpus[i])
    allowed = np.flatnonzero(ctx.sizing.allowed[i])
    counts = lay.gpus_of_type()
    types = []
    for t in allowed:
        nodes = np.flatnonzero(lay.node_type == t) if lay.n_nodes else np.zeros(0, np.int64)
        types.append({"gpu_type": lay.gpu_types[t], "gpus": int(counts[t]), "nodes": len(nodes),
                      "example_nodes": [lay.node_names[n] for n in nodes[:5]],
                      "enough_for_gang": bool(counts[t] >= k),
                      "nodes_holding_whole_gang": int((lay.node_gpus[nodes] >= k).sum())})
    ever = any(t["enough_for_gang"] for t in types)
    return {"types": types, "can_ever_run": ever,
            "rule": "sizing (allowed GPU types) and inventory: a gang needs that many GPUs of one type"}


def _job_ends(run, busy_until: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """Each running job's predicted end: the latest ``busy_until`` of the GPUs it holds (-inf: none)."""
    out = np.full(len(run), -np.inf)
    starts = run.alloc_offsets[:-1]
    nonempty = np.diff(run.alloc_offsets) > 0
    if nonempty.any():  # a job's segment runs to the next non-empty one's start: its own end
        out[nonempty] = np.maximum.reduceat(busy_until[run.alloc_gpus], starts[nonempty])
    return out


def _held_by(plan: SchedulePlan, i: int) -> dict[str, Any]:
    ctx = plan_context(plan)
    snap, lay = ctx.snapshot, ctx.layout
    allowed = ctx.sizing.allowed[i]
    on_types = allowed[lay.gpu_type]
    free = (snap.free_milli >= ctx.pending.gpu_milli[i]) & on_types
    run = snap.running
    holders: list[dict[str, Any]] = []
    n_holding = 0
    if len(run.alloc_gpus):
        hit = on_types[run.alloc_gpus]
        holding = np.zeros(len(run), dtype=bool)
        holding[run.alloc_job[hit]] = True
        rows = np.flatnonzero(holding)
        n_holding = len(rows)
        ends = _job_ends(run, ctx.book.busy_until)[rows]
        first = np.argsort(ends, kind="stable")[:HOLDERS_SHOWN]
        for r, end in zip(rows[first].tolist(), ends[first].tolist(), strict=True):
            team = int(run.team[r])
            holders.append({"job_id": str(run.job_id[r]), "team": snap.teams[team] if team >= 0 else None,
                            "gpus": int(run.num_gpus[r]), "started_ts": float(run.start_ts[r]),
                            "predicted_end_ts": float(end), "frees_in_s": max(float(end) - ctx.now, 0.0)})
    return {"free_gpus_now": int(free.sum()), "gpus_needed": int(ctx.pending.num_gpus[i]),
            "running_jobs_on_these_types": n_holding, "next_to_free": holders,
            "rule": "capacity book (predictor.capacity.book): running jobs' predicted p90 ends"}


def _ahead(plan: SchedulePlan, i: int, rank: np.ndarray, decision: Decision) -> dict[str, Any]:
    ctx = plan_context(plan)
    writer = plan._writer  # noqa: SLF001 - the plan's own decision writer writes the breakdowns
    r = int(rank[i])
    order = plan.order
    allowed = ctx.sizing.allowed
    ahead_rows = order[:r]
    same_types = (allowed[ahead_rows] & allowed[i]).any(axis=1) if r else np.zeros(0, dtype=bool)
    shown = []
    for j in ahead_rows[max(0, r - AHEAD_SHOWN):][::-1].tolist():
        team = int(ctx.pending.team[j])
        shown.append({"job_id": str(ctx.pending.job_id[j]), "rank": int(rank[j]) + 1,
                      "team": ctx.snapshot.teams[team] if team >= 0 else None,
                      "priority": int(plan.priority[j]), "action": str(plan.action[j]),
                      "factors": _factors(writer.factors(j))})
    return {"rank": r + 1, "pending": len(order), "ahead": r, "ahead_on_its_gpu_types": int(same_types.sum()),
            "priority": int(decision.priority), "factors": _factors(decision.factors), "just_ahead": shown,
            "rule": f"ordering {ctx.policy.ordering} (predictor.policy.ordering), starvation guard on top"}


def _reservation(plan: SchedulePlan, i: int, decision: Decision) -> dict[str, Any]:
    ctx = plan_context(plan)
    lay = ctx.layout
    mine = decision.reservation
    allowed = {lay.gpu_types[t] for t in np.flatnonzero(ctx.sizing.allowed[i])}
    others = [{"job_id": r.job_id, "start_ts": r.start_ts, "gpu_type": r.placement.gpu_type,
               "gpus": r.placement.num_gpus} for r in plan.reservations
              if r.job_id != decision.job_id and r.placement.gpu_type in allowed]
    return {"planned": mine is not None,
            "start_ts": None if mine is None else mine.start_ts,
            "expires_ts": None if mine is None else mine.expires_ts,
            "others_on_its_types": others, "depth": ctx.policy.reservation.depth,
            "rule": "reservation (predictor.policy.admission): the highest-priority blocked jobs, up to "
                    "reservation.depth per cycle, hold the earliest GPUs that fit; others may backfill "
                    "only if they end (p90) before it"}


def _limits(plan: SchedulePlan, i: int) -> dict[str, Any]:
    ctx = plan_context(plan)
    snap, policy, p = ctx.snapshot, ctx.policy, ctx.pending
    team = int(p.team[i])
    out: dict[str, Any] = {}
    if team >= 0:
        out["fairshare"] = {"team": snap.teams[team], "usage_fraction": float(ctx.team_usage_fraction[team]),
                            "share_fraction": float(ctx.team_share_fraction[team]),
                            "factor": float(ctx.team_fairshare[team]),
                            "rule": "fairshare (predictor.policy.factors.fairshare): F = 2^(-usage/share)"}
    if policy.quotas.enabled:
        run = snap.running
        book = QuotaBook(policy, snap.teams, run.team, run.num_gpus * run.gpu_milli / MILLI, ctx.layout.n_gpus)
        demand = float(p.num_gpus[i]) * float(p.gpu_milli[i]) / MILLI
        out["quota"] = {"fits": bool(book.fits(team, demand)), "detail": book.describe(team) if team >= 0 else "",
                        "rule": "quota admission (predictor.policy.quota)"}
    depth = policy.queueing.scheduling_depth
    considered = i in plan._outcomes  # noqa: SLF001 - which jobs the admission walk reached
    out["scheduling_depth"] = {"depth": depth, "considered_this_cycle": bool(considered),
                               "rule": "scheduling depth (queueing.scheduling_depth): jobs past it wait "
                                       "for a later cycle; the walk also stops once nothing is free, no "
                                       "reservation is left to give and no job may preempt"}
    if policy.queueing.strategy == "strict":
        out["strict_fifo"] = {"scope": policy.queueing.scope,
                              "rule": "strict FIFO (queueing.strategy): a blocked head blocks its scope"}
    return out


def _what_if(plan: SchedulePlan, est: StartEstimates, i: int, rank: np.ndarray,
             decision: Decision) -> dict[str, Any]:
    ctx = plan_context(plan)
    p, lay, sz = ctx.pending, ctx.layout, ctx.sizing
    base = float(est.p50_ts[i])
    options: list[dict[str, Any]] = []
    k = int(p.num_gpus[i])
    # another GPU type: every type the predicted memory fits (the request's restriction dropped)
    need = float(sz.need_mib[i])
    if math.isfinite(need):
        fits = lay.type_memory_mib * (p.gpu_milli[i] / MILLI) >= need
        wider = fits & (lay.gpus_of_type() >= k)
        extra = wider & ~sz.allowed[i]
        if extra.any():
            start = est.start_with(i, allowed=sz.allowed[i] | wider)
            options.append({"change": "accept GPU types " + ", ".join(lay.gpu_types[t] for t in np.flatnonzero(extra)),
                            "p50_start_ts": _num(start), "rule": "sizing: the predicted memory fits these types"})
        smaller = [t for t in np.flatnonzero(sz.allowed[i] & fits)
                   if lay.type_memory_mib[t] < lay.type_memory_mib[max(int(sz.flavor[i]), 0)]]
        if smaller:
            only = np.zeros(lay.n_types, dtype=bool)
            only[smaller] = True
            start = est.start_with(i, allowed=only)
            options.append({"change": "a smaller flavor that still fits: " + ", ".join(lay.gpu_types[t] for t in smaller),
                            "p50_start_ts": _num(start), "rule": "sizing"})
    # fewer GPUs: half the gang (a change of the job itself; said as such)
    if k > 1:
        start = est.start_with(i, num_gpus=k // 2)
        options.append({"change": f"ask for {k // 2} GPUs instead of {k} (needs the job to run on fewer)",
                        "p50_start_ts": _num(start), "rule": "start estimate: a smaller gang fits earlier holes"})
    # another queue: under strict FIFO per queue, a queue whose head does not block it
    q = ctx.policy.queueing
    if q.strategy == "strict" and q.scope == "queue":
        mine = int(p.queue[i])
        for code, name in enumerate(ctx.snapshot.queues):
            if code != mine:
                start = est.start_with(i, scope=code)
                options.append({"change": f"submit to queue {name}", "p50_start_ts": _num(start),
                                "rule": "strict FIFO per queue (queueing.strategy strict, scope queue)"})
    # a shorter time limit: what the time-limit plan (squeue --start's view) would say; the model's own
    # estimate plans on predictions, so a limit changes it only for a job without one
    limit, suggested = float(p.time_limit_s[i]), decision.time_limit_s
    if suggested is not None and math.isfinite(limit) and limit > suggested:
        start = base if ctx.has_prediction[i] else est.start_with(i, duration=suggested)
        options.append({"change": f"time limit {suggested:,.0f} s (predicted p90 plus margin) instead of {limit:,.0f} s",
                        "p50_start_ts": _num(start),
                        "rule": "time limit from p90 (time_limit.from_p90); the rules layer plans on predictions"})
    # gains against the same job re-booked unchanged (a what-if drops what the plan decided for the job
    # as it is, its reservation and its "wait"), so a gain is the change's own
    ref = est.start_with(i) if options else base
    for o in options:
        s = o["p50_start_ts"]
        o["gain_s"] = None if s is None or not math.isfinite(ref) else max(ref - s, 0.0)
    useful = [o for o in options if o["gain_s"]]
    best = max(useful, key=lambda o: o["gain_s"]) if useful else None
    return {"baseline_p50_start_ts": _num(base), "rebooked_p50_start_ts": _num(ref), "options": options, "best": best,
            "rule": "what-if: the job booked with the change on the same plan (jobs ahead as planned)"}


def explain_job(plan: SchedulePlan, estimates: StartEstimates, job_id: str,
                rank: np.ndarray | None = None) -> dict[str, Any]:
    """The explanation of pending job ``job_id`` (see the module docstring); KeyError if it is not
    pending in the plan's snapshot. ``rank``: each pending row's position in ``plan.order`` (computed
    when not given)."""
    decision = plan.decision_for(job_id)
    i = int(decision.extra["pending_row"])
    if rank is None:
        rank = np.empty(len(plan.order), dtype=np.int64)
        rank[plan.order] = np.arange(len(plan.order))
    chain = {
        "asks": _asks(plan, i, decision),
        "could_run_on": _could_run_on(plan, i),
        "held_by": _held_by(plan, i),
        "ahead": _ahead(plan, i, rank, decision),
        "reservation": _reservation(plan, i, decision),
        "limits": _limits(plan, i),
        "decision": {"action": decision.action, "reason": decision.reason, "warnings": list(decision.warnings),
                     "rule": "decide (predictor.policy.scheduler)"},
        "start_estimate": estimates.row_doc(i),
        "what_if": _what_if(plan, estimates, i, rank, decision),
    }
    return {"job_id": job_id, "as_of": plan.now, "summary": _summary(chain), "chain": chain}


def _summary(chain: dict[str, Any]) -> list[str]:
    """The chain as sentences, most telling first."""
    out = []
    d, ahead, held = chain["decision"], chain["ahead"], chain["held_by"]
    if not chain["could_run_on"]["can_ever_run"]:
        out.append("It can never run here: no GPU type it may use has enough GPUs for its gang (sizing).")
    if chain["asks"]["warnings"]:
        out.append("Its request: " + "; ".join(chain["asks"]["warnings"]) + " (sizing).")
    if d["action"] in ("start", "preempt"):
        out.append(f"It is starting now ({d['action']}).")
    elif chain["could_run_on"]["can_ever_run"]:  # else free GPUs, holders and rank do not bear on it
        out.append(f"{held['free_gpus_now']} GPU(s) of its types are free, it needs {held['gpus_needed']}; "
                   f"{held['running_jobs_on_these_types']} running job(s) hold them (capacity book).")
        if held["next_to_free"]:
            h = held["next_to_free"][0]
            out.append(f"The next to free is {h['job_id']} in {h['frees_in_s'] / 3600:.1f} h (predicted p90 end).")
        out.append(f"Rank {ahead['rank']} of {ahead['pending']}: {ahead['ahead_on_its_gpu_types']} job(s) ahead "
                   f"want the same GPU types (ordering).")
    r = chain["reservation"]
    if r["planned"]:
        out.append("Capacity is reserved for it (reservation).")
    elif r["others_on_its_types"]:
        out.append(f"{len(r['others_on_its_types'])} reservation(s) of jobs ahead hold its GPU types (reservation).")
    lim = chain["limits"]
    if "quota" in lim and not lim["quota"]["fits"]:
        out.append(f"Its team's quota is spent: {lim['quota']['detail']} (quota admission).")
    if not lim["scheduling_depth"]["considered_this_cycle"] and d["action"] == "wait":
        out.append("This cycle's admission walk stopped before it: nothing free for it and the reservations "
                   "given, or past the scheduling depth (scheduling depth).")
    e = chain["start_estimate"]
    if e["p50_wait_s"] is not None:
        out.append(f"Estimated start in {e['p50_wait_s'] / 3600:.1f} h (start estimate).")
    best = chain["what_if"]["best"]
    if best is not None:
        out.append(f"Soonest change: {best['change']}: about {best['gain_s'] / 3600:.1f} h earlier (what-if).")
    return out
