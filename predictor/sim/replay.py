"""The replay loop: one short :meth:`Replay.step` in numbered phases.

::

    1. update cluster   completions and out-of-memory crashes free their GPUs
    2. admit            arrivals (and jobs a crash sent back) join the queue
    3. schedule         the rules layer decides on a snapshot, only when something changed
    4. place            act on the plan: evict victims, start jobs on the placements given,
                        hold reservations, reject what can never run
    5. advance time     pop the next instant's events from the heap (the only place time moves)

The simulator has no scheduling rule of its own. Which job runs, where, which job is reserved for
and which is preempted all come from the rules layer (``predictor.policy.decide`` behind
:class:`RulesLayer`); the replay only carries plans out, and refuses (``PlanError``) a plan that
would over-allocate a GPU or start a job that is not queued. What the replay does decide is
physics: how long a job runs on the placement it got, what an eviction or a crash throws away
(``predictor.sim.progress``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from predictor.capacity.inventory import Inventory
from predictor.policy.decision import Decision, Placement, Priority, Reservation
from predictor.policy.light_plan import Act
from predictor.sim.cluster import ClusterState, PlanError
from predictor.sim.events import EventKind, EventQueue
from predictor.sim.predictions import PredictionTable
from predictor.sim.progress import JobProgress, JobStatus
from predictor.sim.record import ReplayRecord, ReplayRecorder, SegmentEnd
from predictor.sim.workload import JobTable

__all__ = ["SimConfig", "RunningJob", "SimView", "PlanLike", "RulesLayer", "Replay", "replay"]


@dataclass(frozen=True)
class SimConfig:
    """Physics of the replay (see ``predictor.sim.progress``) and how it reports progress."""

    default_checkpoint_s: float = 3600.0  # for jobs whose row has no checkpoint interval
    oom_after_s: float = 60.0  # an out-of-memory crash happens this far into a run
    max_oom_retries: int = 2  # resubmissions after a crash before the job ends OUT_OF_MEMORY
    show_progress: bool = False  # a rich progress bar on stderr
    # a scheduler cycle: while jobs are queued, decide again at most this long after the last plan even
    # without an event or a revisit (Slurm's sched_interval); None = only on events and revisits
    cycle_s: float | None = None

    def __post_init__(self) -> None:
        if self.cycle_s is not None and not self.cycle_s > 0:
            raise ValueError(f"cycle_s must be positive or None, got {self.cycle_s}")


@dataclass(slots=True)
class RunningJob:
    """A job holding GPUs: where, how much of each GPU, and when its run (re)started."""

    gpus: np.ndarray  # global GPU indices (ClusterState)
    slots: np.ndarray  # the ClusterState slots holding them
    milli: int
    placement: Placement | None  # as the Decision named it (None when started from a light plan's act)
    placement_class: int  # index into PLACEMENT_CLASSES
    begin: float  # progress starts here (later than the allocation while victims drain)


@dataclass(frozen=True)
class SimView:
    """What the rules layer may read at one instant (the snapshot builder's input). Read-only."""

    now: float  # seconds since the workload's origin
    jobs: JobTable
    predictions: PredictionTable
    progress: JobProgress
    cluster: ClusterState
    pending: np.ndarray  # rows queued, in submit order
    running: dict[int, RunningJob]
    reservations: dict[int, Reservation | Act]  # held for queued jobs, times in epoch seconds

    @property
    def now_ts(self) -> float:
        """``now`` in epoch seconds (the time base of the job table and of Decisions)."""
        return self.jobs.origin_ts + self.now


class PlanLike(Protocol):
    """What the rules layer returns: ordered decisions (``SchedulePlan`` satisfies it). A plan that
    also has ``acts`` (``predictor.policy.light_plan.LightPlan``) is carried out from those instead."""

    decisions: Sequence[Decision]


class RulesLayer(Protocol):
    """The seam to ``predictor.policy``: one policy, decided on views of the replay."""

    name: str

    def may_evict(self, pending: np.ndarray, running: np.ndarray) -> bool:
        """Could a plan now evict a running job (rows ``running``) for a queued one (rows ``pending``)?
        An over-estimate; False lets the replay skip ``decide()`` while no queued job fits the free GPUs."""

    def plan(self, view: SimView) -> PlanLike: ...

    def team_shares(self) -> dict[str, float]: ...

    def job_started(self, j: int, decision: Decision | Act) -> None:
        """Job row ``j`` was started (or will start after a grace period) as ``decision`` said (a
        Decision, or a light plan's Act: both carry ``priority``)."""

    def job_stopped(self, j: int, begin_s: float, end_s: float, progress: JobProgress) -> None:
        """A run of job row ``j`` from ``begin_s`` ended at ``end_s`` (finished, evicted or crashed);
        called after ``progress`` was updated."""


class Replay:
    """One policy's replay of a workload on an inventory.

    Parameters
    ----------
    jobs : JobTable
    inventory : Inventory
    rules : RulesLayer
        The policy, behind the rules layer.
    predictions : PredictionTable
        What the policy is told about each job (aligned with ``jobs``).
    config : SimConfig, optional
    """

    def __init__(self, jobs: JobTable, inventory: Inventory, rules: RulesLayer, predictions: PredictionTable,
                 config: SimConfig | None = None) -> None:
        if len(predictions) != len(jobs):
            raise ValueError(f"{len(predictions)} predictions for {len(jobs)} jobs")
        self.jobs = jobs
        self.rules = rules
        self.predictions = predictions
        self.config = config or SimConfig()
        self.cluster = ClusterState(inventory)
        self.progress = JobProgress(jobs, self.config.default_checkpoint_s)
        self.events = EventQueue()
        self.recorder = ReplayRecorder()
        self.row_of: dict[str, int] = {str(j): i for i, j in enumerate(jobs.job_ids)}
        self.pending: dict[int, None] = {}  # insertion-ordered set of queued rows
        self._pending_rows: np.ndarray | None = None  # self.pending as an array, None when stale
        # self.pending in insertion order as a buffer: rows queued, in order, and which are still queued
        # (a row requeued is appended again, as the dict does); compacted when half of it is stale
        self._qbuf = np.empty(1024, dtype=np.int64)
        self._qlive = np.zeros(1024, dtype=bool)
        self._qlen = 0
        self._qat: dict[int, int] = {}  # queued row -> its index in the buffer
        self._shapes: dict[tuple[int, int], int] = {}  # (gpu_milli, num_gpus) -> queued jobs of that shape
        self.running: dict[int, RunningJob] = {}
        self.reservations: dict[int, Reservation | Act] = {}
        self.arrivals_left = len(jobs)
        self._batch: list = []
        self._dirty = False
        self._finished = 0
        self.events.push_many(jobs.submit_s, EventKind.ARRIVAL, np.arange(len(jobs)))

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> ReplayRecord:
        """Replay every job to the end and return the record."""
        started = time.perf_counter()
        self._batch = self.events.pop_batch(self.progress.epoch)
        bar = _ProgressBar(len(self.jobs), self.rules.name) if self.config.show_progress else None
        try:
            while self.step():
                if bar is not None and self.recorder.steps % 512 == 0:
                    bar.update(self._finished)
        finally:
            if bar is not None:
                bar.close(self._finished)
        notes = ()
        if self.pending:
            notes = (f"{len(self.pending)} job(s) were still queued when nothing else could happen: "
                     "the rules layer never placed them",)
        return ReplayRecord.build(
            policy=self.rules.name, jobs=self.jobs, progress=self.progress, recorder=self.recorder,
            total_gpus=self.cluster.total_gpus, end_time=self.events.now, events=self.events.popped,
            wall_s=time.perf_counter() - started, team_shares=self.rules.team_shares(), notes=notes,
            pred_p50_s=self.predictions.p50_s,
        )

    def step(self) -> bool:
        """Handle the current instant's events; return False when the replay is over."""
        if not self._batch:
            return False
        now = self.events.now
        self.recorder.steps += 1
        arrivals = self._update_cluster(now)  # 1
        self._admit(arrivals, now)  # 2
        plan = self._schedule(now)  # 3
        if plan is not None:
            self._place(plan, now)  # 4
        self.recorder.queue(now, len(self.pending))
        self._batch = self.events.pop_batch(self.progress.epoch)  # 5
        return True

    # -- phases ------------------------------------------------------------------------------------
    def _update_cluster(self, now: float) -> list[int]:
        arrivals: list[int] = []
        for ev in self._batch:
            if ev.kind is EventKind.ARRIVAL:
                arrivals.append(ev.job)
            elif ev.kind is EventKind.COMPLETION:
                run = self._release(ev.job)
                self.progress.complete(ev.job, now)
                self.rules.job_stopped(ev.job, run.begin, now, self.progress)
                self.recorder.segment(ev.job, run.begin, now, SegmentEnd.COMPLETED, 0.0, run.placement_class)
                self._finished += 1
            elif ev.kind is EventKind.TIMEOUT:
                run = self._release(ev.job)
                self.progress.time_out(ev.job, now)
                self.rules.job_stopped(ev.job, run.begin, now, self.progress)
                self.recorder.segment(ev.job, run.begin, now, SegmentEnd.TIMEOUT, 0.0, run.placement_class)
                self._finished += 1
            elif ev.kind is EventKind.OOM:
                run = self._release(ev.job)
                lost, again = self.progress.crash_oom(ev.job, now, self.config.max_oom_retries)
                self.rules.job_stopped(ev.job, run.begin, now, self.progress)
                self.recorder.segment(ev.job, run.begin, now, SegmentEnd.OOM, lost, run.placement_class)
                if again:
                    arrivals.append(ev.job)
                else:
                    self._finished += 1
            self._dirty = True
        return arrivals

    def _admit(self, arrivals: list[int], now: float) -> None:
        total = self.cluster.total_gpus
        for j in arrivals:
            if self.progress.status[j] == JobStatus.FUTURE:
                self.arrivals_left -= 1
            self.progress.submit(j, now)
            if self.jobs.num_gpus[j] > total:  # a fact, not a policy: it can never fit
                self.progress.reject(j, now)
                self.recorder.rejected_by_rules[j] = f"needs {self.jobs.num_gpus[j]} GPUs, the cluster has {total}"
                self._finished += 1
                continue
            self._queue(j)

    def _schedule(self, now: float) -> PlanLike | None:
        if not (self._dirty and self.pending):
            return None
        self._dirty = False
        pending = self._pending_array()
        if self._nothing_can_start(pending):
            return None
        view = SimView(now=now, jobs=self.jobs, predictions=self.predictions, progress=self.progress,
                       cluster=self.cluster, pending=pending, running=self.running, reservations=self.reservations)
        t0 = time.perf_counter()
        plan = self.rules.plan(view)
        self.recorder.decide_s += time.perf_counter() - t0
        self.recorder.decide_calls += 1
        return plan

    def _nothing_can_start(self, pending: np.ndarray) -> bool:
        """True when the plan provably could not start or evict anything: no queued job has enough
        GPUs with its share free (anywhere, whatever the placement rules) and nothing may be evicted
        (no job is running, or the rules layer says no queued job may evict a running one: the policy
        never preempts, or under its tier rules no queued job's tier may preempt a running job's).
        Such a plan could only reserve, wait or reject; the next event that frees GPUs, or queues a job
        that may evict, asks again.
        ``tests/predictor/sim/test_replay_equivalence.py`` replays with and without this skip."""
        shapes = self._shapes  # the distinct shapes queued (a handful) stand for every queued job
        milli = np.fromiter((m for m, _ in shapes), dtype=np.int64, count=len(shapes))
        count = np.fromiter((n for _, n in shapes), dtype=np.int64, count=len(shapes))
        if self.cluster.could_fit(count, milli):
            return False
        if not self.running:
            return True
        running = np.fromiter(self.running, dtype=np.int64, count=len(self.running))
        return not self.rules.may_evict(pending, running)

    def _pending_array(self) -> np.ndarray:
        rows = self._pending_rows
        if rows is None:
            n = self._qlen
            rows = self._qbuf[:n][self._qlive[:n]]  # a copy: the queued rows in insertion order
            rows.flags.writeable = False
            self._pending_rows = rows
            if 2 * len(rows) < n and n > 1024:  # compact: drop the stale entries
                self._qbuf[:len(rows)] = rows
                self._qlive[:n] = False
                self._qlive[:len(rows)] = True
                self._qlen = len(rows)
                self._qat = dict(zip(rows.tolist(), range(len(rows)), strict=True))
        return rows

    def _queue(self, j: int) -> None:
        self.pending[j] = None
        self._pending_rows = None
        n = self._qlen
        if j not in self._qat:  # (already queued: the dict keeps its place)
            if n == len(self._qbuf):
                self._qbuf = np.concatenate([self._qbuf, np.empty(n, dtype=np.int64)])
                self._qlive = np.concatenate([self._qlive, np.zeros(n, dtype=bool)])
            self._qbuf[n] = j
            self._qlive[n] = True
            self._qat[j] = n
            self._qlen = n + 1
        shape = (int(self.jobs.gpu_milli[j]), int(self.jobs.num_gpus[j]))
        self._shapes[shape] = self._shapes.get(shape, 0) + 1

    def _unqueue(self, j: int) -> None:
        del self.pending[j]
        self._pending_rows = None
        self._qlive[self._qat.pop(j)] = False
        shape = (int(self.jobs.gpu_milli[j]), int(self.jobs.num_gpus[j]))
        left = self._shapes[shape] - 1
        if left:
            self._shapes[shape] = left
        else:
            del self._shapes[shape]

    def _place(self, plan: PlanLike, now: float) -> None:
        acts = getattr(plan, "acts", None)
        if acts is not None:
            self._act(acts, now)
        else:
            self._carry_out(plan.decisions, now)
        self._revisit(getattr(plan, "revisit_at_ts", None), now)

    def _act(self, acts: Sequence[Act], now: float) -> None:
        """Carry out a light plan (``predictor.policy.light_plan``): the same steps as for Decisions,
        with the GPUs given as global indices."""
        for a in acts:
            j = self._queued_row(a.job_id, a.action)
            if a.action == "start":
                self._start(j, a.gpus, a.placement_class, a, now, now)
            elif a.action == "preempt":
                for victim in a.victim_ids:
                    self._evict(victim, now)
                self._start(j, a.gpus, a.placement_class, a, now, now + max(a.grace_s, 0.0))
            elif a.action == "reserve":
                self._hold(j, a)
            elif a.action == "reject":
                self._reject(j, a.reason, now)
            else:
                raise PlanError(f"unknown action {a.action!r} for job {a.job_id}")

    def _carry_out(self, decisions: Sequence[Decision], now: float) -> None:
        for d in decisions:
            if d.action == "wait":
                if d.job_id not in self.row_of:
                    raise PlanError(f"decision for unknown job {d.job_id!r}")
                continue
            j = self._queued_row(d.job_id, d.action)
            if d.action == "start":
                self._start_on(j, d, now, now)
            elif d.action == "preempt":
                if d.eviction is None:
                    raise PlanError(f"preempt decision for {d.job_id} has no eviction plan")
                for victim in d.eviction.victims:
                    self._evict(victim.job_id, now)
                self._start_on(j, d, now, now + max(d.eviction.grace_s, 0.0))
            elif d.action == "reserve":
                if d.reservation is None:
                    raise PlanError(f"reserve decision for {d.job_id} has no reservation")
                self._hold(j, d.reservation)
            elif d.action == "reject":
                self._reject(j, d.reason, now)
            else:
                raise PlanError(f"unknown action {d.action!r} for job {d.job_id}")

    def _queued_row(self, job_id: str, action: str) -> int:
        j = self.row_of.get(job_id)
        if j is None:
            raise PlanError(f"decision for unknown job {job_id!r}")
        if j not in self.pending:
            raise PlanError(f"decision {action!r} for job {job_id} which is not queued")
        return j

    def _hold(self, j: int, reservation: object) -> None:
        if j not in self.reservations:
            self.recorder.reservations_made += 1
        self.reservations[j] = reservation

    def _reject(self, j: int, reason: str, now: float) -> None:
        self._unqueue(j)
        self.reservations.pop(j, None)
        self.progress.reject(j, now)
        self.recorder.rejected_by_rules[j] = reason or "rejected by the rules layer"
        self._finished += 1

    # -- acting ----------------------------------------------------------------------------------
    def _start_on(self, j: int, d: Decision, now: float, begin: float) -> None:
        placement = _need(d.placement, d)
        if placement.num_gpus != self.jobs.num_gpus[j]:
            raise PlanError(f"job {self.jobs.job_ids[j]} needs {self.jobs.num_gpus[j]} GPUs, placement has {placement.num_gpus}")
        gpus = self.cluster.gpus_for(placement, int(self.jobs.gpu_milli[j]))
        self._start(j, gpus, self.jobs.class_index(placement.placement_class), d, now, begin, placement)

    def _start(self, j: int, gpus: np.ndarray | None, k: int, decision: Decision | Act, now: float, begin: float,
               placement: Placement | None = None) -> None:
        """Start job ``j`` on global GPUs ``gpus`` in placement class ``k`` (its progress from ``begin``)."""
        if gpus is None or len(gpus) != self.jobs.num_gpus[j]:
            raise PlanError(f"job {self.jobs.job_ids[j]} needs {self.jobs.num_gpus[j]} GPUs, the plan gives "
                            f"{0 if gpus is None else len(gpus)}")
        milli = int(self.jobs.gpu_milli[j])
        slots = self.cluster.allocate(gpus, milli, j)
        self._unqueue(j)
        if self.reservations.pop(j, None) is not None:
            self.recorder.reservation_starts += 1
        wall = self.progress.start(j, begin, float(self.jobs.slowdown[j, k]), k)
        self.running[j] = RunningJob(gpus=gpus, slots=slots, milli=milli, placement=placement, placement_class=k,
                                     begin=begin)
        self.rules.job_started(j, decision)
        self._schedule_end(j, gpus, milli, begin, wall, now)

    def _schedule_end(self, j: int, gpus: np.ndarray, milli: int, begin: float, wall: float, now: float) -> None:
        """Push the event that ends the run of ``j`` begun at ``begin``: a crash, its time limit, or its end
        (never before ``now``)."""
        peak = self.jobs.peak_vram_mib[j]
        memory = self.cluster.memory_of(gpus) * milli / 1000.0
        limit = self.jobs.time_limit_s[j]
        epoch = int(self.progress.epoch[j])
        if peak > memory:  # False when either is unknown (NaN)
            self.events.push(max(begin + min(self.config.oom_after_s, wall), now), EventKind.OOM, j, epoch)
        elif limit < wall:  # False without a limit (NaN): the scheduler ends the run at its limit
            self.events.push(max(begin + limit, now), EventKind.TIMEOUT, j, epoch)
        else:
            self.events.push(max(begin + wall, now), EventKind.COMPLETION, j, epoch)

    def start_from(self, now_s: float, running: dict[int, Sequence[int]]) -> None:
        """Begin from a cluster's state at ``now_s`` instead of an empty cluster (call before :meth:`run`).

        Every job submitted by ``now_s`` is in the queue since its submit time, except the rows in
        ``running``, which hold the given global GPU indices (``ClusterLayout``) since their
        ``start_ts`` (``now_s`` when unknown) with the priority 0; the first cycle decides at
        ``now_s``. What ``predictor sync`` would decide on the same picture is this first cycle.
        """
        from features.schema import PLACEMENT_CLASSES
        from predictor.capacity.layout import ClusterLayout

        if self.recorder.steps:
            raise RuntimeError("start_from() must come before run()")
        layout = ClusterLayout.of(self.cluster.inventory)
        origin = self.jobs.origin_ts
        starts = self.jobs.frame["start_ts"].to_numpy(dtype="float64") - origin
        for j in np.flatnonzero(self.jobs.submit_s <= now_s):
            j = int(j)
            self.progress.epoch[j] += 1  # its arrival event is stale: it is here already
            self.arrivals_left -= 1
            self.progress.submit(j, float(self.jobs.submit_s[j]))
            if j not in running:
                self._queue(j)
                continue
            gpus = np.asarray(running[j], dtype=np.int64)
            milli = int(self.jobs.gpu_milli[j])
            k = int(layout.placement_class(gpus))
            begin = float(starts[j]) if np.isfinite(starts[j]) else now_s
            slots = self.cluster.allocate(gpus, milli, j)
            wall = self.progress.start(j, begin, float(self.jobs.slowdown[j, k]), k)
            by_node = layout.gpu_indices_by_node(gpus)
            placement = Placement(gpu_type=layout.gpu_types[int(layout.gpu_type[gpus[0]])],
                                  gpus_by_node=tuple((n, len(idx)) for n, idx in by_node),
                                  placement_class=PLACEMENT_CLASSES[k], gpu_indices=by_node)
            self.running[j] = RunningJob(gpus=gpus, slots=slots, milli=milli, placement=placement, placement_class=k,
                                         begin=begin)
            self.rules.job_started(j, Decision(job_id=str(self.jobs.job_ids[j]), priority=Priority(0), factors=(),
                                               action="start", tier="", placement=placement))
            self._schedule_end(j, gpus, milli, begin, wall, now_s)
        self.events.wake_at(now_s)
        self._dirty = True

    def _evict(self, job_id: str, now: float) -> None:
        v = self.row_of.get(job_id)
        if v is None or v not in self.running:
            raise PlanError(f"eviction of job {job_id!r} which is not running")
        run = self._release(v)
        lost = self.progress.evict(v, now)
        self.rules.job_stopped(v, run.begin, now, self.progress)
        self.recorder.segment(v, min(run.begin, now), now, SegmentEnd.PREEMPTED, lost, run.placement_class)
        self._queue(v)

    def _release(self, j: int) -> RunningJob:
        run = self.running.pop(j)
        self.cluster.release(run.gpus, run.milli, run.slots)
        return run

    def _revisit(self, revisit_ts: float | None, now: float) -> None:
        """The rules layer says when its plan may change without a job event (a reservation due, a
        victim passing its minimum runtime): decide again then, and only then. The latest plan's
        revisit replaces the previous plan's (that plan is superseded; its revisit concerned it)."""
        t = None if revisit_ts is None else revisit_ts - self.jobs.origin_ts
        if t is not None and t <= now:
            t = None
        cycle = self.config.cycle_s
        if cycle is not None and self.pending and (t is None or now + cycle < t):
            t = now + cycle
        if t is None or (not self.running and self.arrivals_left == 0):
            self.events.cancel_wakeup()  # none asked, or nothing can change any more
            return
        self.events.wake_at(t)


def _need(placement: Placement | None, d: Decision) -> Placement:
    if placement is None:
        raise PlanError(f"{d.action} decision for {d.job_id} has no placement")
    return placement


class _ProgressBar:
    def __init__(self, total: int, label: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(TextColumn(f"replay [bold]{label}[/]"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), transient=False)
        self._p.start()
        self._task = self._p.add_task(label, total=total)

    def update(self, done: int) -> None:
        self._p.update(self._task, completed=done)

    def close(self, done: int) -> None:
        self._p.update(self._task, completed=done)
        self._p.stop()


def replay(jobs: JobTable, inventory: Inventory, rules: RulesLayer, predictions: PredictionTable,
           config: SimConfig | None = None) -> ReplayRecord:
    """Replay ``jobs`` on ``inventory`` under ``rules``; see :class:`Replay`."""
    return Replay(jobs, inventory, rules, predictions, config).run()
