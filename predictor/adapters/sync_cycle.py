"""One pass of ``predictor sync``: read the cluster's pending, running and newly finished jobs, get a
decision for each pending job, queue the decisions in the outbox and deliver them with the adapter.

Decisions come from one of two places:

* ``EngineDecisions`` -- the engine in this process, on the cluster's own picture
  (``Engine.decide_cluster``): running jobs hold their GPUs, finished jobs feed the feature history and
  the fair-share ledger, and the model in use predicts: the registry's champion (the fallback when it
  cannot be loaded, saying why) or, for ``--decider rules``, the null predictor (the rules layer
  alone: durations and memory unknown). One path either way; every decision names the model version;
* ``ServiceDecisions`` -- a running ``predictor serve``: each pending job is submitted to the
  tracked queue (``POST /v1/jobs``, idempotent by job id), jobs the cluster now runs or has finished are
  reported (``POST /v1/jobs/{id}/events`` ``started`` / ``finished``), and the decisions are read from
  ``GET /v1/queue``, so the service's picture of the whole cluster decides and its stream shows it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import httpx
import pandas as pd

from features.errors import InputError
from predictor.adapters.base import AppliedAction, ClusterAdapter, Operation, SchedulerError
from predictor.adapters.delivery import decision_from_payload, deliver_due, enqueue_decisions
from predictor.engine.engine import Engine, UsageCharge
from predictor.policy.decision import Decision
from predictor.store.database import Database

__all__ = ["DecisionSource", "Decided", "EngineDecisions", "ServiceDecisions", "CycleReport", "run_cycle", "job_request",
           "usage_charges", "deliver_deferred"]

#: Canonical columns the service's job request accepts (besides job_id and submit_ts).
_REQUEST_FIELDS = ("user", "team", "queue", "tier", "gpu_milli", "gpu_type", "num_nodes", "cpus", "mem_mib",
                   "time_limit_s", "deadline_ts", "checkpoint_interval_s", "job_name", "model_params", "precision",
                   "optimizer", "finetune_method", "batch_size", "seq_len")


@dataclass
class Decided:
    """What a decision source made of one pass."""

    decisions: list[Decision]
    model_version: str = "fallback"
    fallback_reason: str | None = None  # why no trained model decided (None: one did)
    unplaced: tuple[str, ...] = ()  # running jobs the inventory could not hold
    learned: int = 0  # finished jobs added to the history and the fair-share ledger this pass


class DecisionSource(Protocol):
    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, finished: pd.DataFrame, now: float) -> Decided:
        """A decision for each pending GPU job; ``finished``: jobs that ended since the last pass."""
        ...


def job_request(row: dict[str, Any]) -> dict[str, Any]:
    """The service's job request body for one canonical row (nulls left out)."""
    body: dict[str, Any] = {"job_id": str(row["job_id"]), "num_gpus": max(1, int(row["num_gpus"]))}
    if row.get("submit_ts") is not None and not pd.isna(row["submit_ts"]):
        body["submit_ts"] = float(row["submit_ts"])
    for key in _REQUEST_FIELDS:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
            continue
        body[key] = value.item() if hasattr(value, "item") else value
    return body


def _gpu_jobs(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.loc[frame["num_gpus"].fillna(0) >= 1].reset_index(drop=True)


def usage_charges(finished: pd.DataFrame) -> list[UsageCharge]:
    """The runs of ended GPU jobs, charged to their teams' fair-share usage."""
    out = []
    for row in _gpu_jobs(finished).to_dict("records"):
        start, end, team = row.get("start_ts"), row.get("end_ts"), row.get("team")
        if not isinstance(team, str) or pd.isna(start) or pd.isna(end) or end < start:
            continue
        milli = row.get("gpu_milli")
        share = 1.0 if milli is None or pd.isna(milli) else float(milli) / 1000.0
        out.append(UsageCharge(team, str(row["job_id"]), float(row["num_gpus"]) * share, float(start), float(end)))
    return out


@dataclass
class EngineDecisions:
    """Decide with the engine in this process, on the cluster's own picture: running jobs hold their
    GPUs, finished jobs feed the feature history and the fair-share ledger, the model in use (the
    registry's champion, the fallback, or the null predictor of ``--decider rules``) predicts.
    A rules-only decider is this with a null predictor, not another path."""

    engine: Engine

    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, finished: pd.DataFrame, now: float) -> Decided:
        learned = 0
        if len(finished):
            learned = self.engine.add_finished(finished.to_dict("records"))
            self.engine.charge(usage_charges(finished))
        model = self.engine.model.current
        if _gpu_jobs(pending).empty:
            return Decided([], model.version, model.fallback_reason if model.fallback else None, (), learned)
        result = self.engine.decide_cluster(pending, running, now)
        model = result.model
        return Decided(result.decisions, model.version, model.fallback_reason if model.fallback else None,
                       result.unplaced, learned)


@dataclass
class ServiceDecisions:
    """Decide with a running service's tracked queue (see the module docstring)."""

    url: str
    token: str | None = None
    timeout_s: float = 30.0
    http: httpx.Client | None = None  # injectable (an in-process test client); built from url otherwise

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.http is None:
            self.http = httpx.Client(base_url=self.url.rstrip("/"), headers=headers, timeout=self.timeout_s)
        else:
            self.http.headers.update(headers)

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            assert self.http is not None
            resp = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise InputError(f"service {self.url}: {method} {path} failed ({exc})") from None
        if resp.status_code >= 400:
            raise InputError(f"service {self.url}: {method} {path} -> HTTP {resp.status_code}: {resp.text[:300]}")
        return resp

    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, finished: pd.DataFrame, now: float) -> Decided:
        jobs = _gpu_jobs(pending)
        for row in jobs.to_dict("records"):
            self._request("POST", "/v1/jobs", json=job_request(row))
        tracked = {j["job_id"]: j for j in self._request("GET", "/v1/queue").json().get("jobs", [])}
        for row in _gpu_jobs(running).to_dict("records"):
            job = tracked.get(str(row["job_id"]))
            if job is not None and job.get("status") == "pending":
                start = row.get("start_ts")
                event = {"kind": "started", **({"ts": float(start)} if start is not None and not pd.isna(start) else {})}
                self._request("POST", f"/v1/jobs/{quote(str(row['job_id']), safe='')}/events", json=event)
        learned = 0
        for row in _gpu_jobs(finished).to_dict("records"):  # tracked jobs the cluster ran to the end
            job = tracked.get(str(row["job_id"]))
            if job is not None and job.get("status") == "running" and not pd.isna(row.get("end_ts")):
                event = {"kind": "finished", "ts": float(row["end_ts"]), "state": str(row.get("state") or "COMPLETED")}
                self._request("POST", f"/v1/jobs/{quote(str(row['job_id']), safe='')}/events", json=event)
                learned += 1
        wanted = set(jobs["job_id"].astype(str))
        decisions = [decision_from_payload(j["decision"]) for job_id, j in tracked.items()
                     if job_id in wanted and j.get("decision")]
        version = decisions[0].model_version if decisions else "service"
        return Decided(decisions, version, None if not any(d.fallback for d in decisions) else "the service's fallback",
                       (), learned)


@dataclass
class CycleReport:
    """What one pass saw and did."""

    pending: int
    running: int
    decisions: list[Decision]
    finished: int = 0
    model_version: str = "fallback"
    fallback_reason: str | None = None
    unplaced: tuple[str, ...] = ()
    planned: dict[str, list[Operation]] = field(default_factory=dict)  # dry run: job id -> operations
    errors: dict[str, str] = field(default_factory=dict)  # dry run: job id -> why it cannot be planned
    applied: list[AppliedAction] = field(default_factory=list)

    def next_due_ts(self) -> float | None:
        """When the earliest deferred step (an eviction's requeue) becomes due."""
        times = [op.not_before_ts for r in self.applied for op in r.deferred if op.not_before_ts is not None]
        return min(times) if times else None


def run_cycle(adapter: ClusterAdapter, source: DecisionSource, db: Database | None, now: float | None = None,
              dry_run: bool = False, finished_since_ts: float | None = None) -> CycleReport:
    """One pass: read (pending, running, and the jobs that ended since ``finished_since_ts``), decide,
    then plan (dry run) or queue and deliver."""
    now = time.time() if now is None else now
    pending, running = adapter.pending_jobs(), adapter.running_jobs()
    finished = adapter.finished_jobs(finished_since_ts) if finished_since_ts is not None else pending.iloc[:0]
    decided = source.decide(pending, running, finished, now)
    decisions = decided.decisions
    report = CycleReport(pending=len(pending), running=len(running), decisions=decisions, finished=len(finished),
                         model_version=decided.model_version, fallback_reason=decided.fallback_reason,
                         unplaced=decided.unplaced)
    if dry_run:
        for d in decisions:
            try:
                report.planned[d.job_id] = adapter.plan(d, now=now)
            except SchedulerError as exc:
                report.errors[d.job_id] = str(exc)
        return report
    if db is None:
        raise InputError("sync needs the state store for its outbox (PREDICTOR_DATABASE_URL)")
    enqueue_decisions(db, adapter.target, decisions, now)
    report.applied = deliver_due(db, adapter, adapter.target, now)
    return report


def deliver_deferred(adapter: ClusterAdapter, db: Database, due: Sequence[float], max_wait_s: float,
                     sleep=time.sleep, clock=time.time) -> list[AppliedAction]:  # noqa: ANN001 - injectable
    """Wait for deferred steps due within ``max_wait_s`` and deliver them (``--once`` finishing evictions)."""
    results: list[AppliedAction] = []
    pending = sorted(t for t in due if t is not None)
    deadline = clock() + max_wait_s
    while pending and pending[0] <= deadline:
        sleep(max(0.0, pending[0] - clock()))
        batch = deliver_due(db, adapter, adapter.target, clock())
        results += batch
        later = [t for t in pending if t > clock()]
        pending = sorted(later + [op.not_before_ts for r in batch for op in r.deferred if op.not_before_ts is not None])
    return results
