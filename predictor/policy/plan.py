"""The output of one scheduling cycle: ``SchedulePlan``, and how its Decisions are written.

A plan is frozen. ``decisions`` holds a Decision for every job something happens to (start,
preempt, reserve, reject), in priority order: what an adapter or the replay acts on, cheap to build
each cycle. ``queue()`` writes a Decision for *every* pending job (waits included, with factor
breakdowns), built on first call: what the service shows and ``predictor policy decide`` prints.
``assignments`` repeats the starts with global GPU indices for callers that keep GPU arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.capacity.sizing import describe_sizing
from predictor.policy.context import CycleContext
from predictor.policy.decision import (
    Decision,
    EvictionPlan,
    FactorScore,
    Placement,
    Priority,
    Reservation,
    Victim,
)
from predictor.policy.factors.base import hours
from predictor.policy.ordering import NORMAL_MAX, Ordering, OrderKeys, starvation_threshold_s

__all__ = ["SchedulePlan", "Assignment", "Outcome", "DecisionWriter", "ACTIONS", "placement_of"]

ACTIONS: tuple[str, ...] = ("wait", "start", "reserve", "preempt", "reject")


@dataclass(slots=True)
class Outcome:
    """What the cycle decided for one pending job (internal, filled while walking the queue)."""

    action: str
    note: str = ""
    type_code: int = -1
    gpus: np.ndarray | None = None
    placement_class: int = -1
    start_ts: float = math.nan
    end_ts: float = math.nan
    victims: np.ndarray | None = None
    lost_gpu_s: float = 0.0
    backfill: bool = False


@dataclass(frozen=True, slots=True)
class Assignment:
    """A start to perform: pending row ``pending_row`` on global GPUs ``gpus`` from ``start_ts``."""

    pending_row: int
    job_id: str
    gpus: np.ndarray
    gpu_milli: int
    placement_class: int
    slowdown: float
    start_ts: float
    predicted_end_ts: float
    victims: tuple[str, ...] = ()


def placement_of(layout: ClusterLayout, gpus: np.ndarray, type_code: int, placement_class: int,
                 slowdown: float) -> Placement:
    """The :class:`Placement` of a gang on global GPUs ``gpus`` (node names and local GPU indices)."""
    indices = layout.gpu_indices_by_node(gpus)
    return Placement(gpu_type=layout.gpu_types[type_code], gpus_by_node=tuple((n, len(v)) for n, v in indices),
                     placement_class=PLACEMENT_CLASSES[placement_class], slowdown=slowdown, gpu_indices=indices)


def _larger_first(f: FactorScore) -> float:
    """Sort key: the largest contribution first (``FactorScore.contribution``, without the property call)."""
    return -(f.value * f.weight)


def _index(rows: list[int]) -> slice | np.ndarray:
    """``rows`` as an index into the pending arrays: a slice when they are consecutive (a scoring
    request's candidates are; cheaper than a fancy index for the few rows of a request)."""
    if rows and rows[-1] - rows[0] == len(rows) - 1 and all(b == a + 1 for a, b in zip(rows, rows[1:], strict=False)):
        return slice(rows[0], rows[-1] + 1)
    return np.asarray(rows, dtype=np.intp)


class DecisionWriter:
    """Turns a pending row and its outcome into a :class:`Decision` with a readable reason."""

    def __init__(self, ctx: CycleContext, ordering: Ordering, keys: OrderKeys, priority: np.ndarray,
                 guarded: np.ndarray, running_priority: np.ndarray, *,
                 explain: bool = True) -> None:
        self.ctx, self.ordering, self.keys = ctx, ordering, keys
        self.explain = explain
        self.priority, self.guarded = priority, guarded
        self.running_priority = running_priority
        self.policy = ctx.policy

    @cached_property
    def starvation_s(self) -> np.ndarray:
        """Each pending job's starvation threshold (only read for jobs in the guard band)."""
        t = starvation_threshold_s(self.ctx, self.policy.aging)
        return np.zeros(len(self.ctx.pending)) if t is None else t

    # ------------------------------------------------------------------ parts
    def factors(self, i: int) -> tuple[FactorScore, ...]:
        return self.factor_rows([i])[0]

    def factor_rows(self, rows: list[int]) -> list[tuple[FactorScore, ...]]:
        """Each row's factor scores (with their details when explaining), starvation guard included."""
        k, explain, ctx = self.keys, self.explain, self.ctx
        idx = _index(rows)
        if k.factor_values is not None:
            facs = self.ordering.factors  # type: ignore[attr-defined]
            names, weights = k.factor_names, k.factor_weights
            values = k.factor_values[idx].tolist()
            if explain:
                details = (list(zip(*(facs[name].explain_rows(ctx, idx) for name in names), strict=True))
                           if names else [()] * len(rows))
                out = [[FactorScore(name, v, w, d) for name, w, v, d in zip(names, weights, row, det, strict=True)]
                       for row, det in zip(values, details, strict=True)]
            else:
                out = [[FactorScore(name, v, w, "") for name, w, v in zip(names, weights, row, strict=True)]
                       for row in values]
        else:
            out = [[FactorScore(self.ordering.name, float(k.priority[i]) / NORMAL_MAX, 1.0,
                                self.ordering.explain(ctx, i) if explain else "")] for i in rows]
        for r, g in enumerate(self.guarded[idx].tolist()):
            if g:
                i = rows[r]
                waited = ctx.now - float(ctx.pending.submit_ts[i])
                out[r].append(FactorScore("starvation_guard", 1.0, 0.0,
                                          f"starving (waited {hours(waited)}, over its threshold "
                                          f"{hours(float(self.starvation_s[i]))}): ahead of every job that starves "
                                          "later" if explain else ""))
        return [tuple(f) for f in out]

    def placement(self, i: int, o: Outcome) -> Placement | None:
        if o.gpus is None:
            return None
        c = o.placement_class
        return placement_of(self.ctx.layout, o.gpus, o.type_code, c, float(self.ctx.pending.slowdown[i, c]))

    def time_limit_rows(self, rows: list[int], outcomes: list[Outcome]) -> list[float | None]:
        """The suggested time limit of each row (policy ``time_limit``: the p90 on its placement plus a
        margin, in whole minutes), None where the policy gives none or the p90 is unknown."""
        cfg = self.policy.time_limit
        if not cfg.from_p90:
            return [None] * len(rows)
        p = self.ctx.pending
        idx = _index(rows)
        cls = np.array([o.placement_class if o.placement_class >= 0 else 0 for o in outcomes], dtype=np.intp)
        p90, slow = p.p90_s[idx].tolist(), p.slowdown[idx][np.arange(len(rows)), cls].tolist()
        margin = 1.0 + cfg.margin_fraction
        return [float(max(cfg.min_s, math.ceil(raw / 60.0) * 60.0)) if math.isfinite(q) else None
                for q, sd in zip(p90, slow, strict=True) for raw in (q * sd * margin,)]

    def warning_rows(self, rows: list[int], limits: list[float | None]) -> list[tuple[str, ...]]:
        """Each row's warnings: sizing (OOM risk, waste, missing types), SLA at risk, a time limit below
        the predicted p90, no duration prediction."""
        ctx, p = self.ctx, self.ctx.pending
        sz = ctx.sizing
        idx = _index(rows)
        flagged = (sz.requested_missing[idx] | sz.fits_nowhere[idx] | sz.too_small[idx] | sz.wasteful[idx]).tolist()
        at_risk, predicted = ctx.at_risk[idx].tolist(), ctx.has_prediction[idx].tolist()
        user, p90 = p.time_limit_s[idx].tolist(), p.p90_s[idx].tolist()
        out = []
        for k, i in enumerate(rows):
            warn = []
            if flagged[k]:  # describe_sizing writes nothing for a job without a sizing flag
                req = None if p.requested_types is None else p.requested_types[i]
                warn.extend(describe_sizing(ctx.layout, sz, i, num_gpus=int(p.num_gpus[i]),
                                            gpu_milli=int(p.gpu_milli[i]),
                                            peak_upper_mib=float(p.peak_vram_upper_mib[i]), requested=req,
                                            request_text=None if p.gpu_request is None else p.gpu_request[i]))
            if at_risk[k]:
                warn.append(f"SLA at risk: {hours(ctx.deadline[i] - ctx.now)} to the deadline, p90 run time "
                            f"{hours(ctx.p90[i])}")
            if limits[k] is not None and math.isfinite(user[k]) and user[k] < p90[k]:
                warn.append(f"requested time limit {hours(user[k])} is below the predicted p90 {hours(p90[k])}: "
                            "likely to be killed")
            if not predicted[k]:
                warn.append("no duration prediction: planned with the time limit or a default")
            out.append(tuple(warn))
        return out

    def action_sentence(self, i: int, o: Outcome, placement: Placement | None) -> str:
        ctx = self.ctx
        lay, p = ctx.layout, ctx.pending
        if o.action in ("start", "preempt", "reserve") and o.gpus is not None and placement is not None:
            by_node = placement.gpus_by_node
            where = ", ".join(f"{n}x{node}" for node, n in by_node[:4])
            more = "" if len(by_node) <= 4 else ", ..."
            share = "" if p.gpu_milli[i] >= MILLI else f" ({p.gpu_milli[i] / MILLI:.2f} of each)"
            what = (f"{len(o.gpus)} x {lay.gpu_types[o.type_code]}{share} on {where}{more} "
                    f"({PLACEMENT_CLASSES[o.placement_class]}, slowdown {p.slowdown[i, o.placement_class]:.2f})")
            if o.action == "start":
                lead = "Backfills" if o.backfill else "Starts now on"
                tail = f", ending (p90) by {hours(o.end_ts - ctx.now)} before the reservations on them" \
                    if o.backfill else ""
                return f"{lead} {what}{tail}. {o.note}".strip()
            if o.action == "preempt":
                return (f"Preempts {len(o.victims) if o.victims is not None else 0} lower-priority job(s) "
                        f"({o.lost_gpu_s / 3600:.2f} GPU-h of work lost) and starts after the "
                        f"{hours(self.policy.preemption.grace_s)} grace on {what}. {o.note}").strip()
            return f"Reserved {what} from {hours(o.start_ts - ctx.now)} from now. {o.note}".strip()
        if o.action == "reject":
            return f"Can never run on this cluster: {o.note}."
        if not o.note and self.policy.queueing.strategy == "strict":
            return "Waits: behind a blocked job of its queue (strict FIFO), or no capacity for it now"
        return f"Waits: {o.note or 'no capacity free for it now, and no reservation left this cycle'}"

    def why(self, factors: tuple[FactorScore, ...]) -> str:
        """Factors as ``detail (value x weight)``, largest contribution first."""
        if self.keys.factor_values is None:
            return "; ".join(f.detail for f in factors)
        ranked = sorted(factors, key=_larger_first)
        return "; ".join([f"{f.detail} ({f.name} {f.value:.2f} x {f.weight:g})" if f.weight else f.detail
                          for f in ranked])

    # ------------------------------------------------------------------ the Decision
    def victims(self, o: Outcome, lost_s: np.ndarray) -> tuple[Victim, ...]:
        snap = self.ctx.snapshot
        r = snap.running
        out = []
        for row in (o.victims if o.victims is not None else ()):
            row = int(row)
            team = int(r.team[row])
            gpus = r.gpus_of(row)
            out.append(Victim(job_id=str(r.job_id[row]), team=snap.teams[team] if team >= 0 else None,
                              priority=int(self.running_priority[row]),
                              gpus_by_node=self.ctx.layout.gpus_by_node(gpus), work_lost_s=float(lost_s[row]),
                              gpu_hours_lost=float(lost_s[row] * len(gpus) * r.gpu_milli[row] / MILLI / 3600.0)))
        return tuple(out)

    def write(self, i: int, o: Outcome, lost_s: np.ndarray | None = None) -> Decision:
        """The Decision of pending row ``i`` with outcome ``o`` (``lost_s``: the running jobs' work lost,
        read for a ``preempt``)."""
        return self.write_rows([i], [o], lost_s)[0]

    def write_rows(self, rows: list[int], outcomes: list[Outcome], lost_s: np.ndarray | None = None,
                   ) -> list[Decision]:
        """The Decisions of pending rows ``rows`` with their ``outcomes``, in that order.

        Column by column: each per-job array is read once for all rows as Python values (one
        ``tolist`` instead of a numpy scalar per field per job), which is most of the cost of a batch's
        Decisions once the readable parts are written."""
        if not rows:
            return []
        ctx, p, lay, pol = self.ctx, self.ctx.pending, self.ctx.layout, self.policy
        idx = _index(rows)
        job_id = [str(j) for j in p.job_id[idx].tolist()]
        num_gpus, gpu_milli = p.num_gpus[idx].tolist(), p.gpu_milli[idx].tolist()
        queue_code, team_code = p.queue[idx].tolist(), p.team[idx].tolist()
        prio = self.priority[idx].tolist()
        tier = [ctx.tier_names[t] for t in ctx.tier_index[idx].tolist()]
        at_risk = ctx.at_risk[idx].tolist()
        model_version = [str(v) for v in p.model_version[idx].tolist()]
        fallback = p.fallback[idx].tolist()
        sized_flavor = ctx.sizing.flavor[idx].tolist()
        queues, teams, gpu_types = ctx.snapshot.queues, ctx.snapshot.teams, lay.gpu_types
        eligibility = ctx.book.eligibility
        hold_s = pol.reservation.hold_s
        factor_rows = self.factor_rows(rows)
        limits = self.time_limit_rows(rows, outcomes)
        warnings = self.warning_rows(rows, limits) if self.explain else None
        out = []
        for k, (i, o) in enumerate(zip(rows, outcomes, strict=True)):
            placement = self.placement(i, o)
            limit = limits[k]
            reservation = eviction = None
            if o.action == "reserve" and placement is not None:
                reservation = Reservation(job_id=job_id[k], start_ts=float(o.start_ts),
                                          expires_ts=float(o.start_ts + hold_s),
                                          placement=placement, predicted_end_ts=float(o.end_ts))
            if o.action == "preempt" and lost_s is not None:
                pc = pol.preemption
                eviction = EvictionPlan(for_job_id=job_id[k], victims=self.victims(o, lost_s),
                                        signal=pc.signal, requeue=pc.requeue,
                                        # rule *snapshot grace*: the preemptor starts when the victims' snapshots are written
                                        grace_s=max(pc.grace_s, float(o.start_ts) - ctx.now))
            flavor_code = o.type_code if o.type_code >= 0 else sized_flavor[k]
            q, team = queue_code[k], team_code[k]
            queue = queues[q] if q >= 0 else (teams[team] if team >= 0 else None)
            factors = factor_rows[k]
            if self.explain:
                reason = f"{self.action_sentence(i, o, placement)} Priority {prio[k]:,}: {self.why(factors)}."
            else:
                reason = f"{o.action}: {o.note}" if o.note else o.action
            out.append(Decision(
                job_id=job_id[k], priority=Priority(prio[k]), factors=factors, action=o.action, tier=tier[k],
                queue=queue, flavor=gpu_types[flavor_code] if flavor_code >= 0 else None, num_gpus=num_gpus[k],
                placement=placement if o.action in ("start", "preempt") else None, reservation=reservation,
                eviction=eviction, time_limit_s=limit, sla_at_risk=at_risk[k],
                warnings=warnings[k] if warnings is not None else (), reason=reason,
                model_version=model_version[k], fallback=fallback[k], decided_at=ctx.now,
                constraint=eligibility.text_of(i) if eligibility is not None else None,  # residency
                extra={"pending_row": i, "gpu_milli": gpu_milli[k]},
            ))
        return out


@dataclass(frozen=True, eq=False)
class SchedulePlan:
    """What ``decide()`` returns (see the module docstring).

    Attributes
    ----------
    now : float
    policy_name : str
    order : ndarray of int64
        Pending rows, highest priority first.
    priority : ndarray of int64
        Integer priority of each pending row (Slurm scale; ``Decision.kueue_priority`` halves it).
    action : ndarray of object
        Action of each pending row (``ACTIONS``).
    decisions : tuple of Decision
        Every job with an action other than ``wait``, in priority order.
    started_rows : tuple of int
        Pending rows that start (``start``, or ``preempt`` once the victims are gone), in priority
        order; ``assignments`` spells them out.
    reservations : tuple of Reservation
    evictions : tuple of EvictionPlan
    revisit_at_ts : float or None
        Earliest future time the plan may change without any job event (a reservation starting, a
        running job passing its minimum runtime for a blocked preemptor); None if none.
    stats : dict
        Counts and phase timings of the cycle.
    """

    now: float
    policy_name: str
    order: np.ndarray
    priority: np.ndarray
    action: np.ndarray
    decisions: tuple[Decision, ...]
    started_rows: tuple[int, ...]
    reservations: tuple[Reservation, ...]
    evictions: tuple[EvictionPlan, ...]
    revisit_at_ts: float | None
    stats: dict
    _writer: DecisionWriter = field(repr=False)
    _outcomes: dict[int, Outcome] = field(repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def assignments(self) -> tuple[Assignment, ...]:
        """The starts with global GPU indices (built on first use: most callers read Decisions)."""
        if "assignments" not in self._cache:
            ctx = self._writer.ctx
            pend, run = ctx.pending, ctx.snapshot.running
            out = []
            for i in self.started_rows:
                o = self._outcomes[i]
                victims = tuple(str(run.job_id[r]) for r in (o.victims if o.victims is not None else ()))
                out.append(Assignment(
                    pending_row=i, job_id=str(pend.job_id[i]), gpus=o.gpus, gpu_milli=int(pend.gpu_milli[i]),
                    placement_class=o.placement_class, slowdown=float(pend.slowdown[i, o.placement_class]),
                    start_ts=o.start_ts, predicted_end_ts=o.end_ts, victims=victims))
            self._cache["assignments"] = tuple(out)
        return self._cache["assignments"]

    @property
    def starts(self) -> tuple[Decision, ...]:
        """Decisions that start a job now (``start``) or after evicting victims (``preempt``)."""
        return tuple(d for d in self.decisions if d.action in ("start", "preempt"))

    def queue(self) -> tuple[Decision, ...]:
        """A Decision for every pending job, highest priority first (built once, then cached)."""
        if "queue" not in self._cache:
            self._cache["queue"] = tuple(self.decisions_for_rows(self.order.tolist()))
        return self._cache["queue"]

    def decisions_for_rows(self, rows: list[int]) -> list[Decision]:
        """The Decisions of pending rows ``rows``, in that order: the plan's own where it has one, the
        others written together (``DecisionWriter.write_rows``)."""
        made = self._cache.get("made")
        if made is None:
            made = self._cache["made"] = {d.extra["pending_row"]: d for d in self.decisions}
        missing = [i for i in rows if i not in made]
        wait = Outcome("wait")
        written = dict(zip(missing, self._writer.write_rows(missing, [self._outcomes.get(i, wait) for i in missing]),
                           strict=True))
        return [made[i] if i in made else written[i] for i in rows]

    def decision_for(self, job_id: str) -> Decision:
        """The Decision of one pending job; KeyError if it is not in the snapshot."""
        if "row_of" not in self._cache:  # built once per plan: callers ask for every job of a batch
            ids = self._writer.ctx.pending.job_id.tolist()
            row_of: dict[str, int] = {}
            for row, jid in enumerate(ids):
                row_of.setdefault(str(jid), row)  # the first row of an id, as before
            self._cache["row_of"] = row_of
        i = self._cache["row_of"].get(job_id)
        if i is None:
            raise KeyError(f"job {job_id!r} is not pending in this snapshot")
        return self.decisions_for_rows([i])[0]
