"""The adapter interface: read jobs from a cluster, plan and apply Decisions, report what was done.

Every adapter (Slurm, Kueue) follows the same rules:

* **Plan, then act.** ``plan(decision)`` reads the scheduler's current state and returns only the
  operations that would change something (a diff), each as data an admin can read: the exact command
  line or API call. ``--dry-run`` prints the plan; ``apply`` executes it.
* **Idempotent.** Applying the same decision twice changes nothing the second time, because the
  second plan finds nothing to change.
* **Transient vs permanent.** A scheduler that cannot be reached raises ``SchedulerUnavailable``
  (retried with exponential backoff and jitter, re-planning each time); a request the scheduler
  refuses raises ``SchedulerRejected`` (not retried: retrying cannot fix it).
* **Deferred steps.** An eviction signals its victims now and requeues them after a grace period;
  the requeue is planned with ``not_before_ts`` and executed by a later ``apply`` once due. State
  that must survive restarts lives in the scheduler itself, never only in this process.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from predictor.policy.decision import Decision

__all__ = [
    "SchedulerError",
    "SchedulerUnavailable",
    "SchedulerRejected",
    "Operation",
    "AppliedAction",
    "ClusterAdapter",
]


class SchedulerError(RuntimeError):
    """A scheduler call failed."""


class SchedulerUnavailable(SchedulerError):
    """Transient: the scheduler could not be reached or timed out; retrying may succeed."""


class SchedulerRejected(SchedulerError):
    """Permanent: the scheduler refused the request (bad job id, invalid QoS, no permission)."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One concrete change to make in the scheduler.

    ``command`` is the argv of a CLI call (Slurm); ``api`` describes an API call (Kueue) as
    ``{"verb", "resource", "name", "namespace", "body"}``. ``not_before_ts`` defers it (eviction grace).
    """

    kind: str
    job_id: str
    description: str
    command: tuple[str, ...] = ()
    api: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    not_before_ts: float | None = None

    def due(self, now: float) -> bool:
        return self.not_before_ts is None or now >= self.not_before_ts

    def render(self) -> str:
        """The operation as a person would type or read it."""
        if self.command:
            text = shlex.join(self.command)
        elif self.api is not None:
            where = f"{self.api.get('namespace')}/" if self.api.get("namespace") else ""
            text = f"{self.api['verb'].upper()} {self.api['resource']} {where}{self.api.get('name', '')}".rstrip()
            if self.api.get("body") is not None:
                import json

                text += " " + json.dumps(self.api["body"], sort_keys=True, separators=(",", ":"))
        else:
            text = self.kind
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "job_id": self.job_id, "description": self.description,
                "call": self.render(), "not_before_ts": self.not_before_ts}


@dataclass(frozen=True, slots=True)
class AppliedAction:
    """What applying one decision did: operations executed, deferred, and errors, as data."""

    target: str
    job_id: str
    done: tuple[Operation, ...] = ()
    deferred: tuple[Operation, ...] = ()
    dry_run: bool = False
    error: str | None = None
    retryable: bool = False  # the error was transient (scheduler unreachable): try again later
    attempts: int = 1

    @property
    def changed(self) -> bool:
        return bool(self.done)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "job_id": self.job_id, "dry_run": self.dry_run, "ok": self.ok,
                "error": self.error, "retryable": self.retryable, "attempts": self.attempts,
                "done": [op.to_dict() for op in self.done], "deferred": [op.to_dict() for op in self.deferred]}


@runtime_checkable
class ClusterAdapter(Protocol):
    """What every scheduler adapter offers (see the module docstring for the rules)."""

    target: str

    def pending_jobs(self) -> pd.DataFrame:
        """Jobs waiting to run, as canonical job rows (``features.schema`` columns plus extras)."""
        ...

    def running_jobs(self) -> pd.DataFrame:
        """Jobs running now, as canonical job rows."""
        ...

    def finished_jobs(self, since_ts: float) -> pd.DataFrame:
        """Canonical rows of the jobs that ended since ``since_ts`` (epoch seconds)."""
        ...

    def plan(self, decision: Decision, now: float | None = None) -> list[Operation]:
        """The operations that would bring the scheduler in line with ``decision`` (empty: nothing to do)."""
        ...

    def apply(self, decision: Decision, now: float | None = None, dry_run: bool = False) -> AppliedAction:
        """Execute the due part of ``plan(decision)``; retried on ``SchedulerUnavailable``."""
        ...
