"""Kueue Workloads as the adapter reads them: state (pending, admitted, finished, deactivated),
priority, queue, owner job, and the resources of their pod sets, turned into canonical job rows.

A workload's job id in this project is ``<namespace>/<workload name>``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from features.sources.kueue import workload_frame

__all__ = ["KueueWorkload", "workload_from_object", "workload_rows", "split_job_id"]


def split_job_id(job_id: str) -> tuple[str, str]:
    """``"team-a/job-x-3f2a1"`` -> ``("team-a", "job-x-3f2a1")``; a bare name is in ``default``."""
    namespace, sep, name = job_id.partition("/")
    return (namespace, name) if sep else ("default", job_id)


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


@dataclass(frozen=True, slots=True)
class KueueWorkload:
    """The parts of a Workload the adapter compares and reports."""

    namespace: str
    name: str
    priority: int | None
    queue_name: str | None
    priority_class: str | None
    active: bool
    admitted: bool
    finished: bool
    created_ts: float | None
    admitted_ts: float | None
    owner_kind: str | None
    owner_name: str | None
    owner_api_version: str | None
    annotations: dict = field(default_factory=dict, compare=False)
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return self.active and not self.admitted and not self.finished

    @property
    def running(self) -> bool:
        return self.admitted and not self.finished

    @property
    def num_pods(self) -> int:
        return sum(int(ps.get("count", 1) or 1) for ps in (self.raw.get("spec") or {}).get("podSets") or [])


def workload_from_object(obj: dict[str, Any]) -> KueueWorkload:
    """Parse a Workload object (v1beta1 or v1beta2) as the API returns it."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    admitted_cond = _condition(obj, "Admitted")
    pclass = spec.get("priorityClassName") or (spec.get("priorityClassRef") or {}).get("name")
    return KueueWorkload(
        namespace=meta.get("namespace") or "default",
        name=meta.get("name") or "",
        priority=spec.get("priority"),
        queue_name=spec.get("queueName"),
        priority_class=pclass,
        active=spec.get("active", True) is not False,
        admitted=bool(status.get("admission")) or admitted_cond is not None,
        finished=_condition(obj, "Finished") is not None,
        created_ts=_ts(meta.get("creationTimestamp")),
        admitted_ts=_ts((admitted_cond or {}).get("lastTransitionTime")),
        owner_kind=owner.get("kind"),
        owner_name=owner.get("name"),
        owner_api_version=owner.get("apiVersion"),
        annotations=dict(meta.get("annotations") or {}),
        raw=obj,
    )


def workload_rows(workloads: Iterable[KueueWorkload], now: float | None = None) -> pd.DataFrame:
    """Canonical job rows of ``workloads``: the Kueue reader's own mapping
    (``features.sources.kueue.workload_frame``: team = namespace, queue = LocalQueue, tier = priority
    class, GPUs of every vendor, ``maximumExecutionTimeSeconds`` or ``activeDeadlineSeconds``, the
    GPU flavor), plus ``scheduler_priority``, ``owner`` and ``pods``."""
    now = time.time() if now is None else now
    workloads = list(workloads)
    frame = workload_frame([w.raw for w in workloads], now)
    frame = frame.rename(columns={"priority": "scheduler_priority"})
    frame["owner"] = [f"{w.owner_kind}/{w.owner_name}" if w.owner_kind else None for w in workloads]
    frame["pods"] = [w.num_pods for w in workloads]
    return frame
