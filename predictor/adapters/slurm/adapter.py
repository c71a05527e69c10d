"""The Slurm adapter: applies Decisions with the commands an admin would type.

=================  ==========================================================================
decision           what the adapter does (pending jobs only, and only where Slurm differs)
=================  ==========================================================================
priority           ``scontrol update jobid=N priority=P`` (an explicit priority freezes the
                   job's multifactor priority; ``scontrol hold N; scontrol release N`` undoes it),
                   or with ``priority_mode="nice"`` ``scontrol update jobid=N nice=-P/divisor``,
                   which adds to the multifactor priority instead of replacing it
tier               ``scontrol update jobid=N qos=Q`` when ``tier_qos`` maps the tier to a QoS
queue              ``scontrol update jobid=N partition=P`` (opt-in: ``set_partition``)
time_limit_s       ``scontrol update jobid=N timelimit=M`` (minutes, rounded up): the predicted
                   p90 plus margin, so Slurm's backfill plans with it
constraint         (residency) ``scontrol update jobid=N features=...`` ANDing the decision's
                   constraint onto the job's own, and ``partition=...`` when a partition term
                   excludes the job's (rule *constraint to Slurm features*, ``constraints``)
placement          ``scontrol update jobid=N reqnodelist=...`` for ``start`` decisions
reservation        ``scontrol create reservation reservationname=pred-N starttime=.. endtime=..
                   nodes=.. users=.. flags=ignore_jobs,overlap``, then ``scontrol update jobid=N
                   reservationname=pred-N`` (Slurm 22.05 reserves whole nodes: reservation TRES
                   cover cpu/node/license/bb, not GPUs; ``overlap`` lets two jobs that the
                   reservation book gives different GPUs of one node hold it at the same time)
eviction           per running victim: a marker in its AdminComment, then ``scancel
                   --signal=SIGTERM --full V``; after the grace period ``scontrol requeue V``
                   (``scancel V`` when the plan says not to requeue). The marker records the signal
                   time and the victim's restart count, so the steps survive a restart of this
                   process and a requeued victim is never requeued twice. It is written first: a
                   victim that exits on the signal can no longer be updated.
=================  ==========================================================================
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from features.sources.sacct import read_sacct_text
from predictor.adapters.base import AppliedAction, Operation, SchedulerRejected, SchedulerUnavailable
from predictor.adapters.retry import RetryExhausted, RetryPolicy
from predictor.adapters.slurm.accounting import sacct_argv
from predictor.adapters.slurm.commands import SlurmCommands
from predictor.adapters.slurm.constraints import features_update, slurm_requirements
from predictor.adapters.slurm.state import (
    SlurmJob,
    SlurmReservation,
    canonical_rows,
    expand_hostlist,
    jobs_from_squeue,
    parse_reservations,
    slurm_time,
)
from predictor.policy.decision import SLURM_PRIORITY_MAX, Decision, EvictionPlan

__all__ = ["SlurmOptions", "SlurmState", "SlurmAdapter", "EVICT_MARK"]

EVICT_MARK = "predictor-evict"
_MARK_RE = re.compile(rf"{EVICT_MARK}:for=(?P<for>\S+?):at=(?P<at>\d+):restarts=(?P<restarts>\d+)")
#: Largest |nice| Slurm accepts (``NICE_OFFSET - 3``).
NICE_MAX = 2_147_483_645
#: A reservation start within this many seconds of the wanted one counts as the same.
START_TOLERANCE_S = 60.0


@dataclass(frozen=True)
class SlurmOptions:
    """Which parts of a decision the adapter writes into Slurm."""

    set_priority: bool = True
    #: "absolute": ``priority=`` (freezes Slurm's multifactor priority); "nice": ``nice=`` of minus
    #: the decision's priority divided by ``nice_divisor``, so age and fair-share keep working on top.
    priority_mode: str = "absolute"
    nice_divisor: int = 10_000
    set_partition: bool = False  # moving a job to another partition is opt-in (--move-queues)
    set_time_limit: bool = True
    pin_nodes: bool = True
    set_constraints: bool = True  # residency: a decision's constraint as job features / partitions
    tier_qos: Mapping[str, str] = field(default_factory=dict)
    reservation_prefix: str = "pred-"
    # overlap: Slurm 22.05 reserves whole nodes, so two jobs the reservation book gives different GPUs of one
    # node (the book never double-books a GPU) need node reservations that overlap in time
    reservation_flags: str = "ignore_jobs,overlap"

    def __post_init__(self) -> None:
        if self.priority_mode not in ("absolute", "nice"):
            raise ValueError(f"priority_mode must be 'absolute' or 'nice', got {self.priority_mode!r}")


@dataclass(frozen=True)
class SlurmState:
    """One read of the scheduler: jobs from ``squeue --json``, reservations from ``scontrol``."""

    jobs: Mapping[str, SlurmJob]
    reservations: Mapping[str, SlurmReservation]


class SlurmAdapter:
    """Reads jobs from and applies decisions to one Slurm cluster (see the module docstring)."""

    target = "slurm"

    def __init__(self, commands: SlurmCommands | None = None, options: SlurmOptions | None = None,
                 retry: RetryPolicy | None = None, clock: Callable[[], float] = time.time):
        self.commands = commands or SlurmCommands()
        self.options = options or SlurmOptions()
        self.retry = retry or RetryPolicy()
        self.clock = clock

    # -- reading -------------------------------------------------------------------------------

    def read_state(self) -> SlurmState:
        """Read every job and reservation once (``squeue --json`` ignores its filters in 22.05)."""
        jobs = jobs_from_squeue(self.commands.run_json(["squeue", "--json"]))
        text = self.commands.run(["scontrol", "show", "reservation", "-o"])
        return SlurmState(jobs=jobs, reservations=parse_reservations(text))

    def _rows(self, want: str) -> pd.DataFrame:
        doc, _ = self.retry.call(lambda: self.commands.run_json(["squeue", "--json"]))
        jobs = [j for j in jobs_from_squeue(doc).values() if (j.pending if want == "PENDING" else j.running)]
        return canonical_rows(jobs, now=self.clock())

    def pending_jobs(self) -> pd.DataFrame:
        """Pending jobs as canonical rows (plus ``scheduler_priority``, ``pending_reason``, ...)."""
        return self._rows("PENDING")

    def running_jobs(self) -> pd.DataFrame:
        """Running jobs as canonical rows (``duration_s`` = time run so far, censored; ``nodes`` where
        they run)."""
        return self._rows("RUNNING")

    def finished_jobs(self, since_ts: float) -> pd.DataFrame:
        """Jobs that ended since ``since_ts``, from the accounting database (``sacct``, read by the
        sacct reader itself: the history the features and the fair-share ledger learn from)."""
        argv = sacct_argv(since_ts)  # the export `predictor ingest --from-slurm` runs too
        text, _ = self.retry.call(lambda: self.commands.run(argv, env={"TZ": "UTC"}))
        jobs = read_sacct_text(text, timezone="UTC", log_end_ts=self.clock())
        return jobs.loc[jobs["end_ts"].notna() & (jobs["end_ts"] >= since_ts)].reset_index(drop=True)

    # -- planning ------------------------------------------------------------------------------

    def plan(self, decision: Decision, now: float | None = None, state: SlurmState | None = None) -> list[Operation]:
        """The operations that would bring Slurm in line with ``decision`` (deferred ones included).

        Raises
        ------
        SchedulerRejected
            When the decision's job is not known to Slurm.
        """
        now = self.clock() if now is None else now
        state = state or self.read_state()
        job = state.jobs.get(decision.job_id)
        if job is None:
            raise SchedulerRejected(f"job {decision.job_id} is not in squeue (ended, or never submitted here)")
        ops: list[Operation] = []
        if job.pending:
            ops += self._job_updates(decision, job)
            if decision.reservation is not None:
                ops += self._reservation_ops(decision, job, state, now)
        if decision.eviction is not None:
            ops += self._eviction_ops(decision.eviction, state, now)
        return ops

    def _update(self, job: SlurmJob, kind: str, key: str, value: object, why: str) -> Operation:
        return Operation(kind=kind, job_id=job.job_id, description=why,
                         command=("scontrol", "update", f"jobid={job.job_id}", f"{key}={value}"))

    def _job_updates(self, d: Decision, job: SlurmJob) -> list[Operation]:
        o, ops = self.options, []
        if o.set_priority and o.priority_mode == "nice":
            nice = -min(int(d.priority) // max(o.nice_divisor, 1), NICE_MAX)
            if job.nice != nice:
                ops.append(self._update(job, "set_nice", "nice", nice, f"nice {job.nice} -> {nice}"))
        elif o.set_priority:
            want = min(max(int(d.priority), 1), SLURM_PRIORITY_MAX)
            if job.priority != want:
                ops.append(self._update(job, "set_priority", "priority", want, f"priority {job.priority} -> {want}"))
        qos = o.tier_qos.get(d.tier) if d.tier else None
        if qos and job.qos != qos:
            ops.append(self._update(job, "set_qos", "qos", qos, f"tier {d.tier}: QoS {job.qos} -> {qos}"))
        if o.set_partition and d.queue and job.partition != d.queue:
            ops.append(self._update(job, "set_partition", "partition", d.queue, f"partition {job.partition} -> {d.queue}"))
        if o.set_time_limit and d.time_limit_s is not None:
            minutes = max(1, math.ceil(d.time_limit_s / 60.0))
            if job.time_limit_min != minutes:
                ops.append(self._update(job, "set_time_limit", "timelimit", minutes,
                                        f"time limit {job.time_limit_min} -> {minutes} min (predicted p90 + margin)"))
        if o.set_constraints and d.constraint:  # residency (rule *constraint to Slurm features*)
            ops += self._constraint_updates(d, job)
        if o.pin_nodes and d.action == "start" and d.placement is not None and d.placement.nodes:
            nodes = sorted(set(d.placement.nodes))
            if sorted(set(expand_hostlist(job.required_nodes))) != nodes:
                ops.append(self._update(job, "set_nodes", "reqnodelist", ",".join(nodes),
                                        f"placement {d.placement.placement_class} on {','.join(nodes)}"))
        return ops

    def _constraint_updates(self, d: Decision, job: SlurmJob) -> list[Operation]:
        ops = []
        _, partitions, skipped = slurm_requirements(d.constraint)
        note = f" (no Slurm form for {';'.join(skipped)})" if skipped else ""
        current = job.raw.get("features")
        new = features_update(current if isinstance(current, str) else None, d.constraint)
        if new is not None:
            ops.append(self._update(job, "set_features", "features", new,
                                    f"constraint {d.constraint}: features {current or '(none)'} -> {new}{note}"))
        if partitions is not None and job.partition not in partitions:
            ops.append(self._update(job, "set_partition", "partition", ",".join(sorted(partitions)),
                                    f"constraint {d.constraint}: partition {job.partition} -> "
                                    f"{','.join(sorted(partitions))}"))
        return ops

    def _reservation_ops(self, d: Decision, job: SlurmJob, state: SlurmState, now: float) -> list[Operation]:
        r = d.reservation
        assert r is not None
        name = f"{self.options.reservation_prefix}{job.job_id}"
        nodes = sorted(set(r.placement.nodes))
        if not nodes:
            raise SchedulerRejected(f"job {job.job_id}: reservation without nodes cannot be made in Slurm")
        start = max(r.start_ts, now + 1.0)
        fields = {"starttime": slurm_time(start), "endtime": slurm_time(max(r.expires_ts, start + 60.0)),
                  "nodes": ",".join(nodes)}
        ops: list[Operation] = []
        existing = state.reservations.get(name)
        if existing is None:
            argv = ["scontrol", "create", "reservation", f"reservationname={name}",
                    *(f"{k}={v}" for k, v in fields.items()), f"users={job.user}"]
            if self.options.reservation_flags:
                argv.append(f"flags={self.options.reservation_flags}")
            ops.append(Operation(kind="create_reservation", job_id=job.job_id, command=tuple(argv),
                                 description=f"hold {','.join(nodes)} for job {job.job_id} from {fields['starttime']}"))
        else:
            changed = {}
            active = existing.start_ts is not None and existing.start_ts <= now
            if not active and (existing.start_ts is None or abs(existing.start_ts - start) > START_TOLERANCE_S):
                changed["starttime"] = fields["starttime"]
            if existing.end_ts is None or abs(existing.end_ts - max(r.expires_ts, start + 60.0)) > START_TOLERANCE_S:
                changed["endtime"] = fields["endtime"]
            if sorted(expand_hostlist(existing.nodes)) != nodes:
                changed["nodes"] = fields["nodes"]
            if changed:
                ops.append(Operation(kind="update_reservation", job_id=job.job_id,
                                     command=("scontrol", "update", f"reservationname={name}",
                                              *(f"{k}={v}" for k, v in changed.items())),
                                     description=f"move reservation {name}: {', '.join(changed)}"))
        if job.reservation != name:
            ops.append(self._update(job, "attach_reservation", "reservationname", name,
                                    f"job {job.job_id} runs in reservation {name}"))
        return ops

    def _eviction_ops(self, plan: EvictionPlan, state: SlurmState, now: float) -> list[Operation]:
        ops: list[Operation] = []
        final = ("scontrol", "requeue") if plan.requeue else ("scancel",)
        for victim in plan.victims:
            v = state.jobs.get(victim.job_id)
            if v is None:
                continue  # already gone: nothing holds its GPUs any more
            mark = _MARK_RE.search(v.admin_comment)
            if mark is None:
                if not v.running:
                    continue
                signalled_at = int(now)
                note = f"{EVICT_MARK}:for={plan.for_job_id}:at={signalled_at}:restarts={v.restarts}"
                comment = f"{v.admin_comment} {note}".strip()
                ops.append(Operation(kind="mark_eviction", job_id=v.job_id,
                                     command=("scontrol", "update", f"jobid={v.job_id}", f"admincomment={comment}"),
                                     description=f"record the eviction of {v.job_id} in its AdminComment"))
                ops.append(Operation(kind="signal", job_id=v.job_id,
                                     command=("scancel", f"--signal={plan.signal}", "--full", v.job_id),
                                     description=f"{plan.signal} to {v.job_id} (make room for {plan.for_job_id}; "
                                                 f"loses ~{victim.work_lost_s:.0f} s of work)"))
            else:
                signalled_at = int(mark.group("at"))
                if v.restarts > int(mark.group("restarts")) or (not plan.requeue and not v.running):
                    continue  # already requeued (or, without requeue, already ended)
            ops.append(Operation(kind="requeue" if plan.requeue else "cancel", job_id=v.job_id,
                                 command=(*final, v.job_id), not_before_ts=signalled_at + plan.grace_s,
                                 description=f"{'requeue' if plan.requeue else 'cancel'} {v.job_id} after "
                                             f"{plan.grace_s:.0f} s grace"))
        return ops

    # -- acting --------------------------------------------------------------------------------

    def apply(self, decision: Decision, now: float | None = None, dry_run: bool = False) -> AppliedAction:
        """Apply one decision (reads the scheduler's state first)."""
        return self.apply_many([decision], now=now, dry_run=dry_run)[0]

    def apply_many(self, decisions: Sequence[Decision], now: float | None = None,
                   dry_run: bool = False) -> list[AppliedAction]:
        """Apply decisions in order, reading Slurm's state once (again after a transient failure)."""
        now = self.clock() if now is None else now
        results: list[AppliedAction] = []
        cached: list[SlurmState | None] = [None]
        for d in decisions:
            executed: list[Operation] = []

            def attempt(d: Decision = d, executed: list[Operation] = executed) -> list[Operation]:
                if cached[0] is None:
                    cached[0] = self.read_state()
                try:
                    ops = self.plan(d, now=now, state=cached[0])
                    for op in ops:
                        if op.due(now) and not dry_run:
                            self.commands.run(op.command)
                            executed.append(op)
                except SchedulerUnavailable:
                    cached[0] = None  # re-read before re-planning
                    raise
                return ops

            try:
                ops, attempts = self.retry.call(attempt)
            except RetryExhausted as exc:
                results.append(AppliedAction(self.target, d.job_id, done=tuple(executed), dry_run=dry_run,
                                             error=str(exc), retryable=True, attempts=exc.attempts))
                cached[0] = None
                continue
            except SchedulerRejected as exc:
                results.append(AppliedAction(self.target, d.job_id, done=tuple(executed), dry_run=dry_run,
                                             error=str(exc), retryable=False))
                cached[0] = None  # a partial change may have happened
                continue
            due = tuple(op for op in ops if op.due(now))
            results.append(AppliedAction(self.target, d.job_id, done=due if dry_run else tuple(executed),
                                         deferred=tuple(op for op in ops if not op.due(now)),
                                         dry_run=dry_run, attempts=attempts))
            if executed:
                cached[0] = None  # what we changed must be seen by the next plan
        return results
