"""The tracked queue's plan and start estimates, kept while the queue is unchanged: what ``explain``,
``GET /v1/queue`` and ``POST /v1/score``'s estimate read.

:class:`QueueEstimates` decides the engine's current picture of the queue once (``Engine.plan``),
estimates every pending job's start (``predictor.queue.start_estimate``), and keeps both until the
picture or the policy changes, or ``max_age_s`` passes (priorities age, running jobs progress). The
running jobs' p10/p50/p90 run times and time limits come from their stored rows (one query per
refresh). :meth:`QueueEstimates.candidate` answers "when would this job start if submitted now" on the
kept plan: the job sits at the position its priority gives it, the jobs ahead booked as planned.

Rule *calibrated interval* (``predictor.queue.start_calibration``): every refresh keeps each newly
seen pending job's raw estimate, and when a later refresh finds that job running, its start is
observed; the p10/p90 of every estimate handed out (kept plan and candidates alike) are rescaled by
the factors learnt so far. Jobs that leave the queue without being seen running are forgotten.

Rule *latest plan* (explain's latency): a refresh costs ~0.4 s CPU at 10,000 pending, and a busy queue
changes more often than that. :meth:`QueueEstimates.explain` therefore answers from the kept plan
even when the queue changed since (at most ``stale_max_s`` old), starts one refresh in a background
thread, and states the plan's age and the queue ``seq`` it reflects (``plan`` in the answer). It waits
for a refresh only when the job is not in the kept plan (submitted since) or the kept plan is older
than ``stale_max_s`` or was made under another policy; a job that left the queue since is not explained.
:meth:`QueueEstimates.snapshot` is what the stream's start-estimate feed reads.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy import select

from predictor.capacity.sizing import size_request
from predictor.engine.engine import Engine
from predictor.policy.decision import Decision
from predictor.policy.plan import SchedulePlan
from predictor.queue.explain import explain_job
from predictor.queue.start_calibration import StartCalibration
from predictor.queue.start_estimate import StartEstimates, estimate_starts, plan_context
from predictor.store.database import Database
from predictor.store.tables import JobRow

log = logging.getLogger(__name__)

__all__ = ["QueueEstimates", "Estimated", "EstimateSnapshot", "running_inputs"]

RULE_LATEST_PLAN = "latest plan (predictor.queue.queue_estimates)"


@dataclass(frozen=True, eq=False)
class Estimated:
    """One plan of the tracked queue with its start estimates."""

    plan: SchedulePlan
    estimates: StartEstimates
    rank: np.ndarray  # position of each pending row in plan.order
    picture_seq: int
    made_at: float
    decided_s: float  # CPU seconds deciding and estimating took
    priority_desc: np.ndarray  # -priority along plan.order (for positioning a candidate)
    row_of: dict[str, int]  # pending job id -> its row


@dataclass(frozen=True)
class EstimateSnapshot:
    """Every pending job's start estimate of one plan: ``jobs`` maps job id -> (team or None, estimate
    document as ``StartEstimates.row_doc``)."""

    as_of_seq: int
    made_at: float
    jobs: dict[str, tuple[str | None, dict[str, Any]]]


def running_inputs(db: Database, job_ids: np.ndarray, start_ts: np.ndarray,
                   predicted_end_ts: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The running jobs' p10/p50/p90 run times on their placement, and time limits (NaN: none), aligned
    with ``job_ids``, from their stored rows. The placement's slowdown is the one the picture applied to
    the p90 (``predicted_end_ts - start_ts`` over the stored p90)."""
    n = len(job_ids)
    d = [np.full(n, np.nan) for _ in range(3)]
    limit = np.full(n, np.nan)
    if n == 0:
        return d, limit
    where = {str(j): k for k, j in enumerate(job_ids.tolist())}
    with db.session() as s:
        rows = s.execute(select(JobRow.job_id, JobRow.prediction, JobRow.record).where(JobRow.status == "running"))
        for job_id, pred, record in rows:
            k = where.get(job_id)
            if k is None:
                continue
            dur = (pred or {}).get("duration") or {}
            for q, key in enumerate(("p10_s", "p50_s", "p90_s")):
                if dur.get(key) is not None:
                    d[q][k] = float(dur[key])
            if (record or {}).get("time_limit_s") is not None:
                limit[k] = float(record["time_limit_s"])
    with np.errstate(invalid="ignore", divide="ignore"):
        slow = (predicted_end_ts - start_ts) / d[2]
    slow = np.where(np.isfinite(slow) & (slow > 0), slow, 1.0)
    return [q * slow for q in d], limit


def _is_pending(picture: object, job_id: str) -> bool:
    return bool(np.any(picture.pending.job_id == job_id))  # type: ignore[attr-defined]


class QueueEstimates:
    """See the module docstring. Thread-safe: one refresh at a time, readers share the result."""

    def __init__(self, engine: Engine, db: Database, *, max_age_s: float = 30.0, stale_max_s: float = 300.0,
                 clock: Callable[[], float] = time.time, calibration: StartCalibration | None = None) -> None:
        if not 0 <= max_age_s <= stale_max_s:
            raise ValueError(f"need 0 <= max_age_s ({max_age_s}) <= stale_max_s ({stale_max_s})")
        self.engine, self.db, self.max_age_s, self.clock = engine, db, float(max_age_s), clock
        self.stale_max_s = float(stale_max_s)
        self._lock = threading.Lock()
        self._kept: tuple[object, object, Estimated] | None = None
        self._background: threading.Thread | None = None
        self._background_guard = threading.Lock()
        self.calibration = StartCalibration() if calibration is None else calibration
        self._first: dict[str, tuple[float, float, float]] = {}  # job id -> (made_at, raw p10, raw p90)

    def _is_current(self, kept: tuple[object, object, Estimated] | None, now: float) -> bool:
        return (kept is not None and kept[0] is self.engine.picture and kept[1] is self.engine.policy
                and 0 <= now - kept[2].made_at <= self.max_age_s)

    def current(self, now: float | None = None, *, stale_ok: bool = False) -> Estimated:
        """The plan and estimates of the queue as the engine pictures it now (kept or refreshed).
        ``stale_ok``: rule *latest plan* — a kept plan made under the policy in force and at most
        ``stale_max_s`` old is returned at once even if the queue changed since, and a refresh is
        started in the background."""
        now = self.clock() if now is None else float(now)
        kept = self._kept
        if self._is_current(kept, now):
            return kept[2]
        if (stale_ok and kept is not None and kept[1] is self.engine.policy
                and 0 <= now - kept[2].made_at <= self.stale_max_s):
            self.refresh_in_background()
            return kept[2]
        return self._refresh(now)

    def _refresh(self, now: float) -> Estimated:
        with self._lock:
            kept = self._kept
            if self._is_current(kept, now):
                return kept[2]
            picture, policy = self.engine.picture, self.engine.policy
            t0 = time.process_time()
            plan = self.engine.plan(picture, now, policy=policy)
            run = picture.running
            durations, limits = running_inputs(self.db, run.job_id, run.start_ts, run.predicted_end_ts)
            est = estimate_starts(plan, durations, running_time_limits=limits if np.isfinite(limits).any() else None,
                                  what_if=True)
            est = self._calibrate(picture, est, now)
            rank = np.empty(len(plan.order), dtype=np.int64)
            rank[plan.order] = np.arange(len(plan.order))
            plan_ids = est.job_id.tolist()
            out = Estimated(plan, est, rank, picture.seq, now, time.process_time() - t0,
                            -plan.priority[plan.order].astype(np.float64),
                            {str(j): k for k, j in reversed(list(enumerate(plan_ids)))})
            self._kept = (picture, policy, out)
            return out

    def _calibrate(self, picture: object, est: StartEstimates, now: float) -> StartEstimates:
        """Rule *calibrated interval*: observe the starts of jobs estimated before, keep the raw
        estimates of jobs seen for the first time, and return ``est`` with its interval rescaled."""
        first, cal = self._first, self.calibration
        run = picture.running  # type: ignore[attr-defined]
        for job_id, start in zip(run.job_id.tolist(), run.start_ts.tolist(), strict=True):
            seen = first.pop(str(job_id), None)
            if seen is not None and math.isfinite(start):
                cal.observe(seen[0], seen[1], seen[2], float(start))
        pending = {str(j) for j in est.job_id.tolist()}
        for job_id in [j for j in first if j not in pending]:
            del first[job_id]  # left the queue without being seen running (cancelled, or started and ended)
        for job_id, p10, p90 in zip(est.job_id.tolist(), est.p10_ts.tolist(), est.p90_ts.tolist(), strict=True):
            if str(job_id) not in first and math.isfinite(p90):
                first[str(job_id)] = (now, p10, p90)
        lo, hi = cal.apply(now, est.p10_ts, est.p50_ts, est.p90_ts)
        return replace(est, p10_ts=lo, p90_ts=hi, interval=cal.doc())

    def refresh_in_background(self) -> bool:
        """Start one refresh in a daemon thread unless one is running; True if one was started."""
        with self._background_guard:
            if self._background is not None and self._background.is_alive():
                return False
            self._background = threading.Thread(target=self._refresh_quietly, name="queue-estimates", daemon=True)
            self._background.start()
            return True

    def _refresh_quietly(self) -> None:
        try:
            self._refresh(self.clock())
        except Exception:  # the next request refreshes in its own thread and reports the error
            log.exception("background refresh of the queue's plan and start estimates failed")

    def wait_background(self, timeout: float | None = None) -> None:
        """Wait for a running background refresh (tests, benchmarks)."""
        t = self._background
        if t is not None:
            t.join(timeout)

    def explain(self, job_id: str, now: float | None = None) -> dict[str, Any]:
        """``predictor.queue.explain.explain_job`` on the latest plan (rule *latest plan*), with ``plan``:
        when it was made, its age, the queue ``seq`` it reflects and the current one; KeyError if the
        job is not pending."""
        now = self.clock() if now is None else float(now)
        picture = self.engine.picture
        cur = self.current(now, stale_ok=True)
        if job_id not in cur.row_of:
            if cur is self._kept_estimated(picture):
                raise KeyError(job_id)
            cur = self._refresh(now)  # submitted since the kept plan: wait for one that holds it
        elif cur.picture_seq != picture.seq and not _is_pending(picture, job_id):
            raise KeyError(job_id)  # it started or left since the kept plan
        doc = explain_job(cur.plan, cur.estimates, job_id, cur.rank)
        doc["plan"] = {"made_at": cur.made_at, "age_s": max(now - cur.made_at, 0.0), "as_of_seq": cur.picture_seq,
                       "queue_seq": picture.seq, "current": cur.picture_seq == picture.seq,
                       "refresh_cpu_s": cur.decided_s, "rule": RULE_LATEST_PLAN}
        return doc

    def _kept_estimated(self, picture: object) -> Estimated | None:
        kept = self._kept
        return kept[2] if kept is not None and kept[0] is picture else None

    def snapshot(self, now: float | None = None) -> EstimateSnapshot:
        """Every pending job's start estimate on the current plan (refreshed if the queue changed)."""
        cur = self.current(now)
        ctx = plan_context(cur.plan)
        ctx_teams, team = ctx.snapshot.teams, ctx.pending.team
        jobs = {}
        for j, i in cur.row_of.items():
            t = int(team[i])
            jobs[j] = (ctx_teams[t] if t >= 0 else None, cur.estimates.row_doc(i))
        return EstimateSnapshot(cur.picture_seq, cur.made_at, jobs)

    def estimate_of(self, job_id: str, now: float | None = None) -> dict[str, Any] | None:
        """The start estimate of a tracked pending job (None if it is not pending)."""
        cur = self.current(now)
        i = cur.row_of.get(job_id)
        return None if i is None else cur.estimates.row_doc(i)

    def candidate(self, decision: Decision, *, num_gpus: int, gpu_milli: int, peak_upper_mib: float | None,
                  requested: tuple[str, ...], durations: tuple[float, float, float],
                  now: float | None = None) -> dict[str, Any]:
        """The start estimate of a job scored now (not tracked): booked at the position its
        ``decision.priority`` takes in the kept plan's order, on the types sizing allows it."""
        cur = self.current(now)
        lay = self.engine.layout
        if decision.action in ("start", "preempt"):
            grace = self.engine.policy.preemption.grace_s if decision.action == "preempt" else 0.0
            t = cur.made_at + grace
            return {"p10_ts": t, "p50_ts": t, "p90_ts": t, "p50_wait_s": grace, "basis": "starts now",
                    "rule": "start estimate (predictor.queue.start_estimate)"}
        if decision.action == "reject":
            return {"p10_ts": None, "p50_ts": None, "p90_ts": None, "p50_wait_s": None, "basis": "never",
                    "rule": "start estimate (predictor.queue.start_estimate)"}
        advice = size_request(lay, self.engine.policy.sizing, num_gpus=num_gpus, gpu_milli=gpu_milli,
                              peak_upper_mib=peak_upper_mib, requested=requested)
        allowed = np.array([t in advice.allowed for t in lay.gpu_types], dtype=bool)
        unknown = self.engine.policy.reservation.unknown_duration_s
        durations = tuple(float(d) if d is not None and math.isfinite(d) else unknown for d in durations)
        position = int(np.searchsorted(cur.priority_desc, -float(decision.priority), side="right"))
        starts = [cur.estimates.start_with(-1, allowed=allowed, position=position, num_gpus=num_gpus,
                                           duration=d, quantile=q) for q, d in enumerate(durations)]
        starts = np.maximum.accumulate(np.array(starts, dtype=np.float64))
        lo, hi = self.calibration.apply(cur.made_at, starts[0], starts[1], starts[2])
        starts = (float(lo), float(starts[1]), float(hi))
        p10, p50, p90 = (float(x) if math.isfinite(x) else None for x in starts)
        return {"p10_ts": p10, "p50_ts": p50, "p90_ts": p90,
                "p50_wait_s": None if p50 is None else max(p50 - cur.made_at, 0.0), "basis": "planned",
                "position": position + 1, "rule": "start estimate (predictor.queue.start_estimate)",
                "interval": self.calibration.doc()}
