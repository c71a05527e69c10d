"""Metrics of one replay, defined once here.

Definitions
-----------
- **JCT** (job completion time) = end - submit, over jobs that finished their work.
- **Wait** (queueing delay) = time a job spent queued, summed over its visits to the queue (first
  queue visit plus every requeue after a preemption or crash); equal to start - submit for a job
  that ran once. Averages and percentiles are over finished jobs; ``max_wait_s`` also covers jobs
  that never ran (their wait runs to the end of the replay).
- **Utilisation** = GPU-seconds held by running jobs (fractional GPUs counted by their share) /
  (cluster GPUs x makespan). With heavy-tailed run times the last long job stretches the makespan,
  so ``extra.utilization_while_jobs_arrive`` also gives it from the first to the last submission.
- **Makespan** = last end - first submit.
- **Starved jobs**: jobs whose wait exceeded ``starvation_s`` (default 24 h), finished or not.
- **SLA misses**: jobs with a deadline that ended after it, or never finished.
- **Preemptions**: evictions carried out (``extra.preemption_lost_gpu_hours_by_checkpoint_kind``
  splits their losses by the evicted job's checkpoint kind); **gpu_hours_lost**: GPU-hours of run thrown away by
  evictions (work since the last checkpoint) and out-of-memory crashes (the whole run).
- **Jain's index** of per-team (share received / entitlement), computed per time window
  (``fairness_window_s``, default 1 h) and averaged over windows where at least two teams had demand.
  In a window, a team's *demand* is the GPU-time its submitted, unfinished jobs asked for; its
  *entitlement* is the weighted max-min fair (water-filling) split of the window's GPU capacity,
  weights from the policy's team shares (equal when none), each team capped at its demand; what it
  *received* is the GPU-time its jobs ran. A team that got exactly its fair split scores 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.job_conventions import CHECKPOINT_KINDS
from predictor.policy.intake import checkpoint_columns
from predictor.sim.progress import ENDED, JobStatus
from predictor.sim.record import ReplayRecord, SegmentEnd

__all__ = [
    "METRIC_KEYS",
    "MetricsConfig",
    "jain_index",
    "part_metrics",
    "water_fill",
    "window_integrals",
    "team_windows",
    "policy_metrics",
    "start_estimate_metrics",
]

#: The keys every policy has in ``report.json`` (the issue's contract), in report order.
METRIC_KEYS: tuple[str, ...] = (
    "avg_jct_s", "median_jct_s", "p95_jct_s", "avg_wait_s", "p95_wait_s", "max_wait_s",
    "utilization", "makespan_s", "jain_index", "starved_jobs", "sla_misses", "preemptions",
    "gpu_hours_lost", "jobs_failed_oom",
)


@dataclass(frozen=True)
class MetricsConfig:
    """Thresholds of the metric definitions above."""

    starvation_s: float = 24 * 3600.0
    fairness_window_s: float = 3600.0


def jain_index(x: np.ndarray) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1 when all equal, 1/n at worst."""
    x = np.asarray(x, dtype="float64")
    if len(x) == 0:
        return 1.0
    den = len(x) * float(np.sum(x * x))
    return 1.0 if den == 0.0 else float(np.sum(x)) ** 2 / den


def water_fill(capacity: float, caps: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted max-min fair split of ``capacity`` with per-claimant ``caps``.

    Each claimant gets ``min(cap, level * weight)`` for the level at which the total reaches the
    capacity (or everyone is capped). Claimants with zero cap get nothing.
    """
    caps = np.asarray(caps, dtype="float64")
    weights = np.asarray(weights, dtype="float64")
    out = np.zeros_like(caps)
    active = (caps > 0) & (weights > 0)
    if not active.any():
        return out
    if caps[active].sum() <= capacity:
        out[active] = caps[active]
        return out
    idx = np.flatnonzero(active)
    ratio = caps[idx] / weights[idx]  # level at which each claimant saturates
    order = np.argsort(ratio)
    left = capacity
    w_left = weights[idx].sum()
    for pos, k in enumerate(order):
        level = left / w_left
        if ratio[k] <= level:
            out[idx[k]] = caps[idx[k]]
            left -= caps[idx[k]]
            w_left -= weights[idx[k]]
        else:
            rest = idx[order[pos:]]
            out[rest] = level * weights[rest]
            break
    return out


def _cumulative(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Integral from -inf to each ``x`` of sum_i weights_i * 1[starts_i <= t < ends_i]."""

    def ramp(points: np.ndarray) -> np.ndarray:  # sum_i w_i * max(x - p_i, 0)
        order = np.argsort(points, kind="stable")
        p, w = points[order], weights[order]
        cw = np.concatenate([[0.0], np.cumsum(w)])
        cwp = np.concatenate([[0.0], np.cumsum(w * p)])
        k = np.searchsorted(p, x, side="right")
        return x * cw[k] - cwp[k]

    return ramp(starts) - ramp(ends)


def window_integrals(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray, groups: np.ndarray,
                     n_groups: int, edges: np.ndarray) -> np.ndarray:
    """Per group and window, the integral of the weighted intervals: shape (n_groups, len(edges) - 1)."""
    out = np.zeros((n_groups, len(edges) - 1))
    for g in range(n_groups):
        m = groups == g
        if m.any():
            out[g] = np.diff(_cumulative(starts[m], ends[m], weights[m], edges))
    return out


def team_windows(record: ReplayRecord, window_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-team received and demanded GPU-seconds per window.

    Returns
    -------
    edges : ndarray of shape (n_windows + 1,)
    received, demand : ndarray of shape (n_teams, n_windows)
    """
    jobs = record.jobs
    horizon = max(record.end_time, 1e-9)
    n_win = max(int(np.ceil(horizon / window_s)), 1)
    edges = np.arange(n_win + 1, dtype="float64") * window_s
    n_teams = len(jobs.teams)
    gpus = jobs.milli_demand / 1000.0
    seg_w = gpus[record.seg_job]
    received = window_integrals(record.seg_start, record.seg_end, seg_w, jobs.team_code[record.seg_job], n_teams, edges)
    in_system_end = np.where(np.isnan(record.end), horizon, record.end)
    demand = window_integrals(jobs.submit_s, in_system_end, gpus, jobs.team_code, n_teams, edges)
    return edges, received, demand


def _fairness(record: ReplayRecord, window_s: float) -> tuple[float, int, np.ndarray, np.ndarray]:
    edges, received, demand = team_windows(record, window_s)
    weights = np.array([record.team_shares.get(t, 1.0) for t in record.jobs.teams], dtype="float64")
    weights = np.where(weights > 0, weights, 1.0)
    values: list[float] = []
    entitled_total = np.zeros(len(weights))
    for w in range(len(edges) - 1):
        cap = record.total_gpus * (edges[w + 1] - edges[w])
        entitled = water_fill(cap, demand[:, w], weights)
        entitled_total += entitled
        active = entitled > 1e-9
        if active.sum() >= 2:
            values.append(jain_index(received[active, w] / entitled[active]))
    mean = float(np.mean(values)) if values else 1.0
    return mean, len(values), received.sum(axis=1), entitled_total


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else float("nan")


def policy_metrics(record: ReplayRecord, config: MetricsConfig | None = None) -> tuple[dict, dict]:
    """The issue's metric set for one replay, plus extra figures.

    Returns
    -------
    metrics : dict
        Exactly :data:`METRIC_KEYS` (floats and ints; NaN when no job finished).
    extra : dict
        Counts of finished / rejected / failed / never-started jobs, out-of-memory crashes, GPU-hours
        lost per cause, per-team received share against entitlement, and replay speed.
    """
    cfg = config or MetricsConfig()
    jobs = record.jobs
    done = np.isin(record.status, ENDED)  # ended and left the cluster (TIMEOUT: at its limit)
    worked = record.status == JobStatus.DONE  # did all its work
    jct = record.end[done] - jobs.submit_s[done]
    wait_done = record.wait_s[done]
    unfinished = ~np.isin(record.status, (*ENDED, JobStatus.REJECTED, JobStatus.FAILED))
    queued = record.status == JobStatus.PENDING  # still queued when the replay ended
    wait_all = record.wait_s + np.where(queued, record.end_time - record.queued_since, 0.0)
    gpus = jobs.milli_demand / 1000.0
    seg_gpu_s = (record.seg_end - record.seg_start) * gpus[record.seg_job]
    first_submit = float(jobs.submit_s.min())
    last_end = float(np.nanmax(record.end)) if np.isfinite(record.end).any() else first_submit
    makespan = last_end - first_submit
    util = float(seg_gpu_s.sum() / (record.total_gpus * makespan)) if makespan > 0 else 0.0
    last_submit = float(jobs.submit_s.max())
    arrival_span = last_submit - first_submit
    used_by_last_submit = _cumulative(record.seg_start, record.seg_end, gpus[record.seg_job],
                                      np.array([first_submit, last_submit]))
    util_arrivals = (float(np.diff(used_by_last_submit)[0] / (record.total_gpus * arrival_span))
                     if arrival_span > 0 else float("nan"))
    has_deadline = np.isfinite(jobs.deadline_s)
    late = has_deadline & (~worked | (np.nan_to_num(record.end, nan=np.inf) > jobs.deadline_s))
    lost_gpu_h = record.seg_lost_s * gpus[record.seg_job] / 3600.0
    jain, jain_windows, received_total, entitled_total = _fairness(record, cfg.fairness_window_s)

    metrics = {
        "avg_jct_s": _mean(jct),
        "median_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "avg_wait_s": _mean(wait_done),
        "p95_wait_s": _pct(wait_done, 95),
        "max_wait_s": float(wait_all.max()) if len(wait_all) else float("nan"),
        "utilization": util,
        "makespan_s": makespan,
        "jain_index": jain,
        "starved_jobs": int((wait_all > cfg.starvation_s).sum()),
        "sla_misses": int(late.sum()),
        "preemptions": int(record.preemptions.sum()),
        "gpu_hours_lost": float(lost_gpu_h.sum()),
        # jobs that ended out of memory for good: a policy that loses jobs shortens its JCTs (rule *chosen point*)
        "jobs_failed_oom": int((record.status == JobStatus.FAILED).sum()),
    }
    total_received = received_total.sum()
    total_entitled = entitled_total.sum()
    per_team = {
        team: {
            "gpu_hours": float(received_total[i] / 3600.0),
            "share": float(received_total[i] / total_received) if total_received else 0.0,
            "entitled_share": float(entitled_total[i] / total_entitled) if total_entitled else 0.0,
            "avg_wait_s": _mean(record.wait_s[done & (jobs.team_code == i)]),
            "jobs": int((jobs.team_code == i).sum()),
        }
        for i, team in enumerate(jobs.teams)
    }
    kind = record.seg_kind
    extra = {
        "jobs": int(len(jobs)),
        "jobs_finished": int(worked.sum()),
        "jobs_timed_out": int((record.status == JobStatus.TIMEOUT).sum()),
        "jobs_rejected": int((record.status == JobStatus.REJECTED).sum()),
        "jobs_failed_oom": metrics["jobs_failed_oom"],
        "jobs_unfinished": int(unfinished.sum()),
        "oom_failures": int(record.oom_failures.sum()),
        "utilization_while_jobs_arrive": util_arrivals,
        "gpu_hours_lost_preemption": float(lost_gpu_h[kind == SegmentEnd.PREEMPTED].sum()),
        "gpu_hours_lost_oom": float(lost_gpu_h[kind == SegmentEnd.OOM].sum()),
        "preemption_lost_gpu_hours_by_checkpoint_kind": _lost_by_checkpoint_kind(record, lost_gpu_h),
        "gpu_hours_timed_out": float(((record.seg_end - record.seg_start) * gpus[record.seg_job]
                                      )[kind == SegmentEnd.TIMEOUT].sum() / 3600.0),
        "jobs_with_deadline": int(has_deadline.sum()),
        "jain_windows": jain_windows,
        "starvation_threshold_s": cfg.starvation_s,
        "fairness_window_s": cfg.fairness_window_s,
        "reservations_made": record.reservations_made,
        "reservation_starts": record.reservation_starts,
        "per_team": per_team,
        "replay": {
            "events": record.events,
            "steps": record.steps,
            "decide_calls": record.decide_calls,
            "decide_s": record.decide_s,
            "wall_s": record.wall_s,
            "events_per_s": record.events / record.wall_s if record.wall_s > 0 else float("nan"),
        },
    }
    return metrics, extra


def part_metrics(record: ReplayRecord, parts: int, config: MetricsConfig | None = None) -> list[dict]:
    """:func:`policy_metrics`' metric set on each of ``parts`` consecutive groups of jobs of equal
    count by submit time (the first half and the second half of the window for 2): each group's
    jobs judged in the replay of all of them (``ReplayRecord.restricted``). Used to ask whether a
    policy's gain over a baseline holds through a window or comes from one stretch of it."""
    return [policy_metrics(record.restricted(rows), config)[0]
            for rows in np.array_split(np.arange(len(record.jobs)), parts) if len(rows)]


def _lost_by_checkpoint_kind(record: ReplayRecord, lost_gpu_h: np.ndarray) -> dict[str, float]:
    """GPU-hours lost to preemption per checkpoint kind of the evicted job (rule *checkpoint kind*)."""
    names = (*CHECKPOINT_KINDS, "unknown")
    kinds, _ = checkpoint_columns(record.jobs.frame, np.full(len(record.jobs), np.nan))
    preempted = record.seg_kind == SegmentEnd.PREEMPTED
    by_kind = np.bincount(np.where(kinds < 0, len(CHECKPOINT_KINDS), kinds)[record.seg_job[preempted]],
                          weights=lost_gpu_h[preempted], minlength=len(names))
    return {name: float(v) for name, v in zip(names, by_kind, strict=True)}


#: Tolerance floor of ``within_10pct_of_wait``: one minute (Brown et al.'s "within one minute").
START_TOLERANCE_FLOOR_S = 60.0


def start_estimate_metrics(estimate: np.ndarray, actual: np.ndarray, wait: np.ndarray,
                           lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> dict:
    """How well start-time estimates made at submit matched the replayed starts.

    ``n``: jobs with an estimate that started; ``median_abs_error_s``: median of
    ``|estimate - start|`` (a job estimated never to start counts as infinitely wrong);
    ``within_10pct_of_wait``: fraction with an error within 10 % of the job's replayed wait (at least
    ``START_TOLERANCE_FLOOR_S``); ``coverage``: fraction of starts inside ``[lo, hi]`` (the p10-p90
    interval), or, for a point estimate (no interval: the time-limit plan, which ``squeue --start``
    presents as a bound), the fraction that started no later than the estimate.
    """
    estimate = np.asarray(estimate, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    n = len(actual)
    if n == 0:
        return {"n": 0, "median_abs_error_s": None, "coverage": None, "within_10pct_of_wait": None}
    err = np.where(np.isfinite(estimate), np.abs(estimate - actual), np.inf)
    tol = np.maximum(0.1 * np.asarray(wait, dtype=np.float64), START_TOLERANCE_FLOOR_S)
    if lo is not None and hi is not None:
        inside = (np.nan_to_num(lo, nan=np.inf) <= actual + 1e-6) & (actual <= np.nan_to_num(hi, nan=-np.inf) + 1e-6)
    else:
        inside = actual <= np.nan_to_num(estimate, nan=-np.inf) + 1e-6
    med = float(np.median(err))
    return {"n": int(n), "median_abs_error_s": med if np.isfinite(med) else None,
            "coverage": float(inside.mean()), "within_10pct_of_wait": float((err <= tol).mean())}
