"""The seam between the replay and ``predictor.policy``: build a snapshot, call ``decide``.

:class:`PolicyRules` is the replay's :class:`~predictor.sim.replay.RulesLayer` for one
:class:`~predictor.policy.config.PolicyConfig`. Per call it turns the replay's arrays into a
:class:`~predictor.policy.snapshot.ClusterSnapshot` with fancy indexing only (no per-job Python
objects): the pending jobs' static columns are interned once per workload, the running jobs'
allocations come from the cluster's slot table in CSR form, and team usage from a
:class:`~predictor.policy.ledger.FairShareLedger` fed with every finished run plus the open runs
(decayed in closed form, vectorised). Then it calls ``decide`` and hands the plan back: the replay
acts on it. Nothing here orders, places, reserves or preempts.

What the rules layer is told about a job that was preempted and requeued: its predicted duration
minus the work it kept at its last checkpoint (what a deployment reads from the job's progress), its
attained service (LAS), and its original submit time (age and FIFO order continue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.capacity.inventory import Inventory
from predictor.capacity.layout import ClusterLayout
from predictor.capacity.sizing import SizingOutcome
from predictor.policy import intake
from predictor.policy.config import PolicyConfig
from predictor.policy.context import policy_tables
from predictor.policy.decision import Decision
from predictor.policy.incremental import IncrementalScheduler, JobSizing
from predictor.policy.intake import Names, Vocabulary
from predictor.policy.ledger import FairShareLedger
from predictor.policy.light_plan import Act, LightPlan
from predictor.policy.preemption import tier_preemption
from predictor.policy.presets import load_policy as _load_policy
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs, RunningJobs
from predictor.sim.predictions import PredictionTable
from predictor.sim.progress import JobProgress
from predictor.sim.replay import SimView
from predictor.sim.workload import NO_TEAM, JobTable

__all__ = ["PolicyRules", "ReplayPlan", "load_policy"]

_LN2 = math.log(2.0)


def load_policy(preset_or_path: str, *, base_file: str | None = None) -> PolicyConfig:
    """A preset name (``fifo``, ``ours``...) laid over ``base_file`` (or the shipped default), or a
    policy YAML file of one's own."""
    from predictor.policy.presets import preset_names

    if preset_or_path in preset_names():
        return _load_policy(base_file, preset=preset_or_path)
    return _load_policy(preset_or_path)


def _codes(values: pd.Series) -> tuple[np.ndarray, tuple[str, ...]]:
    codes, uniques = pd.factorize(values.astype("string"), sort=True)
    return codes.astype(np.int64), tuple(str(u) for u in uniques)


@dataclass(frozen=True)
class ReplayPlan:
    """A rules-layer plan with an earlier revisit: the next instant a running job passes its predicted
    end, when the rules layer's picture changes without an event (``decide`` does not name it)."""

    plan: LightPlan
    revisit_at_ts: float

    @property
    def acts(self) -> tuple[Act, ...]:
        return self.plan.acts

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self.plan.decisions


class PolicyRules:
    """``decide`` under one policy, on snapshots of a replay.

    Parameters
    ----------
    name : str
        The policy's name in reports.
    policy : PolicyConfig
    jobs : JobTable
    inventory : Inventory
    predictions : PredictionTable
        What the policy is told about each job.
    """

    def __init__(self, name: str, policy: PolicyConfig, jobs: JobTable, inventory: Inventory,
                 predictions: PredictionTable) -> None:
        self.name = name
        self.policy = policy
        self.jobs = jobs
        self.layout = ClusterLayout.of(inventory)
        self.pred = predictions
        frame = jobs.frame
        origin = jobs.origin_ts
        # teams: the replay's codes minus the "(no team)" placeholder, which becomes -1
        self.teams = tuple(t for t in jobs.teams if t != NO_TEAM)
        _, self.tiers = _codes(frame["tier"])
        _, self.queues = _codes(frame["queue"])
        # the trace's static columns read by the one intake (GPU requests, codes, limits, deadlines,
        # predictions), once per workload; each cycle selects the queued rows
        vocab = Vocabulary(Names(self.teams), Names(self.tiers), Names(self.queues))
        base = intake.pending_jobs(frame, predictions.to_frame(jobs.job_ids), vocab, self.layout, origin)
        self.team, self.tier, self.queue = base.team, base.tier, base.queue
        # rule *tier rules* on the trace's tier codes (code -1, no tier: the last row and column, the
        # policy's default tier): which queued jobs may evict which running ones (``may_evict``)
        lookup = policy_tables(policy).tier_lookup(self.tiers)
        self._evicts = tier_preemption(policy)[lookup][:, lookup]
        self.job_id = jobs.job_ids
        self.submit_ts = jobs.submit_s + origin
        self.deadline_ts = base.deadline_ts
        self.time_limit_s = base.time_limit_s
        self.checkpoint_s = jobs.checkpoint_s
        self.requested = base.requested_types
        self.gpu_request = base.gpu_request
        # residency and checkpoint kinds (docs/residency.md, rule *preemption cost*): read by the one intake
        self.constraint = base.constraint
        self.ckpt_kind, self.ckpt_size = intake.checkpoint_columns(
            frame, jobs.peak_vram_mib * jobs.num_gpus * jobs.gpu_milli / 1000.0)
        self.priority = np.zeros(len(jobs), dtype=np.int64)  # priority each job was last started with
        self.gpus = jobs.milli_demand / 1000.0
        # what the rules layer is told, updated when a run ends (kept work, memory learnt from a crash)
        self.p10 = predictions.p10_s.copy()
        self.p50 = predictions.p50_s.copy()
        self.p90 = predictions.p90_s.copy()
        self.peak_upper = predictions.peak_vram_upper_mib.copy()
        self.peak_point = predictions.peak_vram_mib.copy()  # rule *start below the bound*
        self.half_life_s = float(policy.factors.fairshare.half_life_s)
        self.ledger = FairShareLedger(self.half_life_s)
        self.scheduler = IncrementalScheduler(policy)
        # every job's sizing (flavor from memory), once; a row again when a crash teaches its memory
        self.sizing = JobSizing(self.layout, policy.sizing, num_gpus=jobs.num_gpus, gpu_milli=jobs.gpu_milli,
                                peak_upper_mib=self.peak_upper, requested_types=self.requested,
                                peak_point_mib=self.peak_point)
        # parts of the last snapshot reused while what they were built from is unchanged: the pending
        # columns (same queued rows, none of them stopped since) and the running jobs' static columns
        # (same cluster version: no allocation or release since)
        self._pending_cache: tuple[JobProgress, np.ndarray, PendingJobs, SizingOutcome] | None = None
        self._running_cache: tuple[object, int, dict] | None = None

    # -- replay hooks ------------------------------------------------------------------------------
    def team_shares(self) -> dict[str, float]:
        return {t: self.policy.share_of(t) for t in self.teams}

    def may_evict(self, pending: np.ndarray, running: np.ndarray) -> bool:
        """Could a plan now evict one of the ``running`` rows for one of the ``pending`` rows? False when
        the policy never preempts, and under scope ``tier_rules`` when no queued job's tier may preempt
        a running job's (the walk's victim candidates are those of rule *tier rules* only); the other
        scopes (``any_lower_priority``, ``kueue``) choose victims by priority and team: True."""
        pc = self.policy.preemption
        if not pc.enabled or len(running) == 0 or len(pending) == 0:
            return False
        if pc.scope != "tier_rules":
            return True
        queued = np.zeros(len(self._evicts), dtype=bool)
        queued[self.tier[pending]] = True
        held = np.zeros(len(self._evicts), dtype=bool)
        held[self.tier[running]] = True
        return bool(self._evicts[queued][:, held].any())

    def job_started(self, j: int, decision: Decision) -> None:
        self.priority[j] = int(decision.priority)
        self._running_cache = None

    def job_stopped(self, j: int, begin_s: float, end_s: float, progress: JobProgress | None = None) -> None:
        """A run of job ``j`` ended (finished, evicted, crashed): charge it to its team's usage, and
        update what the rules layer will be told if the job comes back to the queue."""
        hit = self._pending_cache
        if hit is not None and (hit[1] == j).any():
            # j was queued when the cached columns were gathered (started since): it may come back with
            # new numbers. A job that was not among them leaves them valid (a requeued j changes the rows)
            self._pending_cache = None
        team = self.team[j]
        if team >= 0 and end_s > begin_s:
            origin = self.jobs.origin_ts
            self.ledger.charge(self.teams[team], float(self.gpus[j]), origin + begin_s, origin + end_s)
        if progress is None:
            return
        kept = self.jobs.work_s[j] - progress.remaining[j]  # work saved by checkpoints so far
        if kept > 0:
            for mine, theirs in ((self.p10, self.pred.p10_s), (self.p50, self.pred.p50_s), (self.p90, self.pred.p90_s)):
                mine[j] = max(theirs[j] - kept, 1.0) if np.isfinite(theirs[j]) else theirs[j]
        if progress.memory_known[j]:
            self.peak_upper[j] = self.jobs.peak_vram_mib[j]
            self.peak_point[j] = np.nan  # known now: no point estimate to start below it on
            self.sizing.update(j, peak_upper_mib=float(self.peak_upper[j]))

    # -- one cycle -------------------------------------------------------------------------------
    def plan(self, view: SimView) -> LightPlan | ReplayPlan:
        """``decide`` on the replay's snapshot, as the light plan of the incremental scheduler (the acts
        of ``decide``; job keys are trace rows); the revisit also names the next running job's
        predicted end (see :class:`ReplayPlan`)."""
        snap = self.snapshot(view)
        # the replay acts on the plan and never shows it: acts, no Decisions (``plan.full()`` writes them)
        plan = self.scheduler.plan(snap, sizing=self._pending_cache[3])
        turn = self._next_predicted_end(snap)
        if turn is not None and (plan.revisit_at_ts is None or turn < plan.revisit_at_ts):
            return ReplayPlan(plan=plan, revisit_at_ts=turn)
        return plan

    def _next_predicted_end(self, snap: ClusterSnapshot) -> float | None:
        """The earliest instant after ``now`` at which a running job reaches its predicted end (or, without
        a prediction, the run time the rules layer assumes, ``reservation.unknown_duration_s``). From
        then on the rules layer reads it as overrunning (``reservation.overrun_extension_s`` more from
        each ``now``): its capacity picture changes there without any job event."""
        run = snap.running
        if len(run.start_ts) == 0:
            return None
        end = np.where(np.isfinite(run.predicted_end_ts), run.predicted_end_ts,
                       run.start_ts + self.policy.reservation.unknown_duration_s)
        later = end[end > snap.now]
        return float(later.min()) if len(later) else None

    def snapshot(self, view: SimView) -> ClusterSnapshot:
        """The replay at ``view.now`` as the rules layer's frozen input."""
        now_ts = view.now_ts
        rows, offsets, gpus = view.cluster.allocations()
        return ClusterSnapshot(now=now_ts, layout=self.layout, pending=self._pending(view),
                               running=self._running(view, rows, offsets, gpus), teams=self.teams,
                               tiers=self.tiers, queues=self.queues, team_usage_gpu_s=self._usage(view, now_ts, rows),
                               free_milli=view.cluster.free_milli.copy())  # frozen: the plan may be written later

    def _pending(self, view: SimView) -> PendingJobs:
        rows = view.pending
        hit = self._pending_cache
        if hit is not None and hit[0] is view.progress and (hit[1] is rows or np.array_equal(hit[1], rows)):
            return hit[2]
        p = self.pred
        out = PendingJobs.unchecked(  # columns gathered from the same rows
            job_id=self.job_id[rows], team=self.team[rows], tier=self.tier[rows], queue=self.queue[rows],
            submit_ts=self.submit_ts[rows], num_gpus=self.jobs.num_gpus[rows], gpu_milli=self.jobs.gpu_milli[rows],
            deadline_ts=self.deadline_ts[rows], time_limit_s=self.time_limit_s[rows],
            p10_s=self.p10[rows], p50_s=self.p50[rows], p90_s=self.p90[rows],
            peak_vram_upper_mib=self.peak_upper[rows], peak_vram_mib=self.peak_point[rows], slowdown=p.slowdown[rows],
            attained_gpu_s=view.progress.attained_gpu_s[rows], fallback=p.fallback[rows],
            model_version=p.model_version[rows],
            requested_types=None if self.requested is None else self.requested[rows],
            gpu_request=None if self.gpu_request is None else self.gpu_request[rows],
            constraint=None if self.constraint is None else self.constraint[rows],  # residency
        )
        for v in vars(out).values():  # shared by the snapshots of later cycles: nobody may modify them
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        self._pending_cache = (view.progress, rows, out, self.sizing.take(rows))
        return out

    def _running(self, view: SimView, rows: np.ndarray, offsets: np.ndarray, gpus: np.ndarray) -> RunningJobs:
        prog, origin = view.progress, self.jobs.origin_ts
        hit = self._running_cache
        if hit is not None and hit[0] is view.cluster and hit[1] == view.cluster.version:
            static = hit[2]
        else:
            run_start = prog.run_start[rows]
            start_ts = run_start + origin
            cls = np.maximum(prog.placement_class[rows], 0)
            left = self.p90[rows] * self.pred.slowdown[rows, cls]  # p90 minus kept work, on its placement
            static = dict(
                job_id=self.job_id[rows], team=self.team[rows], tier=self.tier[rows], queue=self.queue[rows],
                num_gpus=np.diff(offsets), gpu_milli=self.jobs.gpu_milli[rows], start_ts=start_ts,
                predicted_end_ts=start_ts + left, checkpoint_interval_s=self.checkpoint_s[rows],
                priority=self.priority[rows], alloc_offsets=offsets, alloc_gpus=gpus,
                checkpoint_kind=self.ckpt_kind[rows], checkpoint_size_gb=self.ckpt_size[rows],  # preemption cost
                _run_start=run_start, _attained=prog.attained_gpu_s[rows], _gpus=self.gpus[rows],
            )
            for v in static.values():
                v.flags.writeable = False
            self._running_cache = (view.cluster, view.cluster.version, static)
        run_start, ckpt, start_ts = static["_run_start"], static["checkpoint_interval_s"], static["start_ts"]
        elapsed = np.maximum(view.now - run_start, 0.0)
        last_ckpt = start_ts + np.floor(elapsed / ckpt) * ckpt  # NaN where no interval is declared
        return RunningJobs.unchecked(  # columns gathered from the same rows
            **{k: v for k, v in static.items() if not k.startswith("_")}, last_checkpoint_ts=last_ckpt,
            attained_gpu_s=static["_attained"] + elapsed * static["_gpus"],
        )

    def _usage(self, view: SimView, now_ts: float, rows: np.ndarray) -> np.ndarray:
        """Decayed GPU-seconds per team: finished runs (ledger) plus the open runs, in closed form."""
        closed = self.ledger.usage_array(now_ts, self.teams)
        if len(rows) == 0:
            return closed
        team = self.team[rows]
        elapsed = np.maximum(view.now - view.progress.run_start[rows], 0.0)
        open_usage = self.gpus[rows] * self.half_life_s / _LN2 * (1.0 - np.exp2(-elapsed / self.half_life_s))
        ok = team >= 0
        return closed + np.bincount(team[ok], weights=open_usage[ok], minlength=len(self.teams))
