"""One pass of ``predictor sync``: read the cluster's pending jobs, get a decision for each, queue the
decisions in the outbox and deliver them with the adapter.

Decisions come from one of two places:

* ``EngineDecisions`` -- the engine in this process (model from the registry or the fallback, the
  policy file, the inventory): ``Engine.score`` decides the pending jobs as one batch;
* ``RulesDecisions`` -- the rules layer alone on a snapshot of the cluster's pending and running
  jobs (no model: durations unknown), for sites that have not trained one yet;
* ``ServiceDecisions`` -- a running ``predictor serve``: each pending job is submitted to the
  tracked queue (``POST /v1/jobs``, idempotent by job id), jobs the cluster now runs are reported
  (``POST /v1/jobs/{id}/events`` ``started``), and the decisions are read from ``GET /v1/queue``, so
  the service's picture of the whole cluster decides and its stream shows what happened.
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
from predictor.policy.decision import Decision
from predictor.store.database import Database

__all__ = ["DecisionSource", "EngineDecisions", "RulesDecisions", "ServiceDecisions", "CycleReport", "run_cycle", "job_request",
           "deliver_deferred"]

#: Canonical columns the service's job request accepts (besides job_id and submit_ts).
_REQUEST_FIELDS = ("user", "team", "queue", "tier", "gpu_milli", "gpu_type", "num_nodes", "cpus", "mem_mib",
                   "time_limit_s", "deadline_ts", "checkpoint_interval_s", "job_name", "model_params", "precision",
                   "optimizer", "finetune_method", "batch_size", "seq_len")


class DecisionSource(Protocol):
    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, now: float) -> list[Decision]:
        """A decision for each pending GPU job."""
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


@dataclass
class EngineDecisions:
    """Decide with the engine in this process."""

    engine: Any  # predictor.engine.engine.Engine

    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, now: float) -> list[Decision]:
        jobs = _gpu_jobs(pending)
        if jobs.empty:
            return []
        return [scored.decision for scored in self.engine.score(jobs, now)]


@dataclass
class RulesDecisions:
    """Decide with the rules layer alone (no duration/memory model: it treats durations as unknown),
    on a snapshot of the cluster's pending and running jobs placed on the inventory."""

    policy: Any  # predictor.policy.config.PolicyConfig
    inventory: Any  # predictor.capacity.inventory.Inventory

    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, now: float) -> list[Decision]:
        from predictor.policy.scheduler import decide
        from tests.builders import snapshot_from_jobs

        jobs = _gpu_jobs(pending)
        if jobs.empty:
            return []
        table = pd.concat([jobs, _gpu_jobs(running)], ignore_index=True)
        plan = decide(snapshot_from_jobs(table, self.inventory, now), self.policy)
        return [plan.decision_for(str(j)) for j in jobs["job_id"]]


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

    def decide(self, pending: pd.DataFrame, running: pd.DataFrame, now: float) -> list[Decision]:
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
        wanted = set(jobs["job_id"].astype(str))
        return [decision_from_payload(j["decision"]) for job_id, j in tracked.items()
                if job_id in wanted and j.get("decision")]


@dataclass
class CycleReport:
    """What one pass saw and did."""

    pending: int
    running: int
    decisions: list[Decision]
    planned: dict[str, list[Operation]] = field(default_factory=dict)  # dry run: job id -> operations
    errors: dict[str, str] = field(default_factory=dict)  # dry run: job id -> why it cannot be planned
    applied: list[AppliedAction] = field(default_factory=list)

    def next_due_ts(self) -> float | None:
        """When the earliest deferred step (an eviction's requeue) becomes due."""
        times = [op.not_before_ts for r in self.applied for op in r.deferred if op.not_before_ts is not None]
        return min(times) if times else None


def run_cycle(adapter: ClusterAdapter, source: DecisionSource, db: Database | None, now: float | None = None,
              dry_run: bool = False) -> CycleReport:
    """One pass: read, decide, then plan (dry run) or queue and deliver."""
    now = time.time() if now is None else now
    pending, running = adapter.pending_jobs(), adapter.running_jobs()
    decisions = source.decide(pending, running, now)
    report = CycleReport(pending=len(pending), running=len(running), decisions=decisions)
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
