"""The start-time estimate measured by replay: predicted start at submit against the replayed start.

:class:`EstimatingRules` wraps the replay's :class:`~predictor.sim.rules.PolicyRules` (the replay loop
and the rules stay as they are): on every plan it records, for each job seen in the queue for the
first time, the estimate ``predictor.queue.start_estimate`` makes from that plan (the job's p10/p50/p90
start, and the start planned on time limits where the log has them), its interval rescaled by rule
*calibrated interval* (``predictor.queue.start_calibration``) learnt online from the jobs of the same
replay that started before (each job's raw estimate against its replayed start, as the service
learns from its own). It asks the replay for a plan at
every arrival (``may_evict`` answers True, so the replay's "nothing can start" skip does not apply; a
skipped plan would have changed nothing, ``tests/predictor/sim/test_replay_equivalence.py``), so the
estimate is made at the job's submit instant.

:func:`replay_with_estimates` is a ``ReplayMany`` for ``run_experiment``; :func:`start_estimate_report`
turns the estimates and the record into ``report.json``'s ``start_estimate`` block
(``predictor.sim.metrics.start_estimate_metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from predictor.capacity.inventory import Inventory
from predictor.policy.config import PolicyConfig
from predictor.policy.plan import SchedulePlan
from predictor.queue.start_calibration import StartCalibration
from predictor.queue.start_estimate import estimate_starts, plan_context
from predictor.sim.metrics import start_estimate_metrics
from predictor.sim.predictions import PredictionTable
from predictor.sim.record import ReplayRecord
from predictor.sim.replay import SimConfig, SimView, replay
from predictor.sim.rules import PolicyRules
from predictor.sim.workload import JobTable

__all__ = ["EstimatingRules", "ReplayEstimates", "replay_with_estimates", "start_estimate_report"]


class ReplayEstimates:
    """Per job row of a workload: when the estimate was made and what it said (replay seconds)."""

    def __init__(self, n: int) -> None:
        self.made_at = np.full(n, np.nan)
        self.p10 = np.full(n, np.nan)
        self.p50 = np.full(n, np.nan)
        self.p90 = np.full(n, np.nan)
        self.time_limit = np.full(n, np.nan)
        self.backfill = np.full(n, np.nan)  # earliest backfilled start (rule *backfill window*)
        self.raw_p10 = np.full(n, np.nan)  # the walk's interval before rule *calibrated interval*
        self.raw_p90 = np.full(n, np.nan)
        self.has_limits = False


class EstimatingRules:
    """A :class:`PolicyRules` that also records start estimates (see the module docstring)."""

    def __init__(self, inner: PolicyRules, calibration: StartCalibration | None = None) -> None:
        self.inner = inner
        self.calibration = calibration
        self._progress = None
        self.name = inner.name
        n = len(inner.jobs)
        self.estimates = ReplayEstimates(n)
        self.estimates.has_limits = bool(np.isfinite(inner.time_limit_s).any())
        self._seen = np.zeros(n, dtype=bool)
        self._observed = np.zeros(n, dtype=bool)
        self._row_of = {str(j): i for i, j in enumerate(inner.jobs.job_ids)}

    def may_evict(self, pending: np.ndarray, running: np.ndarray) -> bool:
        """True: plan at every arrival (the estimate is made at submit)."""
        return True

    def team_shares(self) -> dict[str, float]:
        return self.inner.team_shares()

    def job_started(self, j, decision) -> None:  # noqa: ANN001
        self.inner.job_started(j, decision)
        est, cal = self.estimates, self.calibration
        if cal is not None and self._progress is not None and self._seen[j] and not self._observed[j]:
            self._observed[j] = True  # its first start: what the estimate at submit was about
            cal.observe(float(est.made_at[j]), float(est.raw_p10[j]), float(est.raw_p90[j]),
                        float(self._progress.first_start[j]))

    def job_stopped(self, j, begin_s, end_s, progress=None) -> None:  # noqa: ANN001
        self.inner.job_stopped(j, begin_s, end_s, progress)

    def plan(self, view: SimView):  # noqa: ANN201
        out = self.inner.plan(view)
        self._progress = view.progress
        plan: SchedulePlan = getattr(out, "plan", out)
        rows = np.asarray(view.pending)
        fresh = np.flatnonzero(~self._seen[rows])
        if len(fresh):
            # the replay's light plan (predictor.policy.light_plan) writes its full SchedulePlan on ask:
            # the estimate reads the cycle's context and priorities from it
            self._record(plan.full() if hasattr(plan, "full") else plan, view, rows, fresh)
        return out

    def _record(self, plan: SchedulePlan, view: SimView, rows: np.ndarray, fresh: np.ndarray) -> None:
        inner, est = self.inner, self.estimates
        snap = plan_context(plan).snapshot
        run_rows = np.array([self._row_of[str(j)] for j in snap.running.job_id], dtype=np.int64)
        cls = np.maximum(view.progress.placement_class[run_rows], 0)
        slow = inner.pred.slowdown[run_rows, cls] if len(run_rows) else np.zeros(0)
        durations = [q[run_rows] * slow for q in (inner.p10, inner.p50, inner.p90)]
        limits = inner.time_limit_s[run_rows] if est.has_limits else None
        starts = estimate_starts(plan, durations, running_time_limits=limits, rows=fresh.tolist())
        origin = inner.jobs.origin_ts
        jobs = rows[fresh]
        self._seen[jobs] = True
        est.made_at[jobs] = view.now
        p10, p50, p90 = starts.p10_ts[fresh], starts.p50_ts[fresh], starts.p90_ts[fresh]
        est.raw_p10[jobs], est.raw_p90[jobs] = p10 - origin, p90 - origin
        if self.calibration is not None:
            p10, p90 = self.calibration.apply(starts.now, p10, p50, p90)
        est.p10[jobs] = p10 - origin
        est.p50[jobs] = p50 - origin
        est.p90[jobs] = p90 - origin
        if starts.backfill_ts is not None:
            est.backfill[jobs] = starts.backfill_ts[fresh] - origin
        if starts.time_limit_ts is not None:
            est.time_limit[jobs] = starts.time_limit_ts[fresh] - origin


class replay_with_estimates:  # noqa: N801 - used as a function (a ``ReplayMany``) that keeps what it measured
    """A ``ReplayMany`` (``predictor.sim.experiment``): each run in turn, with :class:`EstimatingRules`;
    ``estimates[policy]`` holds what each recorded. ``calibrate``: rule *calibrated interval* on (a fresh
    ``StartCalibration()`` per policy; ``calibrations[policy]`` keeps it) or off (the walk's interval)."""

    def __init__(self, calibrate: bool = True) -> None:
        self.estimates: dict[str, ReplayEstimates] = {}
        self.calibrate = calibrate
        self.calibrations: dict[str, StartCalibration] = {}

    def __call__(self, table: JobTable, inventory: Inventory,
                 runs: Sequence[tuple[str, PolicyConfig, PredictionTable]], sim: SimConfig) -> list[ReplayRecord]:
        records = []
        for name, policy, pred in runs:
            cal = StartCalibration() if self.calibrate else None
            rules = EstimatingRules(PolicyRules(name, policy, table, inventory, pred), cal)
            if cal is not None:
                self.calibrations[name] = cal
            records.append(replay(table, inventory, rules, pred, sim))
            self.estimates[name] = rules.estimates
        return records

    def reports(self, records: Sequence[ReplayRecord]) -> dict[str, dict]:
        """Policy name -> ``report.json``'s ``start_estimate`` block, for the records this replayed."""
        return {r.policy: start_estimate_report(r, self.estimates[r.policy]) for r in records
                if r.policy in self.estimates}


def start_estimate_report(record: ReplayRecord, est: ReplayEstimates) -> dict:
    """``{"model": {...}, "time_limit": {...}}`` for one replay (``time_limit`` absent where the log has
    no time limits); only estimates made at the job's own submit instant count."""
    submit = record.jobs.submit_s
    at_submit = np.isfinite(est.made_at) & (est.made_at == submit)
    started = np.isfinite(record.first_start)
    ok = at_submit & started
    actual = record.first_start[ok]
    wait = actual - submit[ok]
    # jobs the plan at submit did not start there and then: where an estimate says something
    queued = est.p90[ok] > est.made_at[ok] + 1e-6
    out = {"model": start_estimate_metrics(est.p50[ok], actual, wait, est.p10[ok], est.p90[ok])}
    out["model"]["queued_at_submit"] = start_estimate_metrics(est.p50[ok][queued], actual[queued], wait[queued],
                                                              est.p10[ok][queued], est.p90[ok][queued])
    if est.has_limits:
        out["time_limit"] = start_estimate_metrics(est.time_limit[ok], actual, wait)
        out["time_limit"]["queued_at_submit"] = start_estimate_metrics(est.time_limit[ok][queued], actual[queued],
                                                                       wait[queued])
    return out
