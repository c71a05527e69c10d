"""What Slurm says about jobs and reservations, parsed: ``squeue --json`` into ``SlurmJob`` records and
canonical job rows, ``scontrol show reservation -o`` into ``SlurmReservation`` records.

Slurm prints and parses times in the controller host's local time zone without an offset
(``2026-11-29T21:00:00``); ``slurm_time``/``parse_slurm_time`` convert with the local zone of this
process, which must match the cluster's (set ``TZ`` otherwise).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from features.gpu_types import DEFAULT_VOCABULARY
from features.schema import conform
from features.sources.slurm_fields import expand_hostlist, gpu_type_from_gres, parse_tres, slurm_job_fields
from features.sources.slurm_fields import slurm_state as _slurm_state

__all__ = [
    "SlurmJob",
    "SlurmReservation",
    "jobs_from_squeue",
    "canonical_rows",
    "parse_reservations",
    "slurm_time",
    "parse_slurm_time",
    "canonical_state",
    "expand_hostlist",
]

_NO_VAL = 0xFFFFFFFE  # Slurm's INFINITE / NO_VAL sentinels start here


def canonical_state(slurm_state: str) -> str | None:
    """A Slurm job state as a canonical state (``features.sources.slurm_fields.slurm_state``: the rule
    the sacct reader applies too)."""
    return _slurm_state(slurm_state)


def _int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return None if number >= _NO_VAL else number


def _signed32(value: Any) -> int:
    """Slurm 22.05's JSON prints a negative nice as an unsigned 32-bit number (-100 -> 4294967196)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return 0
    return number - 2**32 if number >= 2**31 else number


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """The fields of one ``squeue --json`` job the adapter reads and compares against."""

    job_id: str
    state: str  # Slurm's own state name, e.g. PENDING, RUNNING, COMPLETED
    priority: int
    nice: int
    qos: str
    partition: str
    account: str
    user: str
    time_limit_min: int | None
    reservation: str
    admin_comment: str
    restarts: int
    required_nodes: str
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def pending(self) -> bool:
        return canonical_state(self.state) == "PENDING"

    @property
    def running(self) -> bool:
        return canonical_state(self.state) == "RUNNING"


def jobs_from_squeue(doc: dict[str, Any]) -> dict[str, SlurmJob]:
    """Index the jobs of a ``squeue --json`` document by job id (array tasks as ``<array>_<task>``)."""
    jobs: dict[str, SlurmJob] = {}
    for j in doc.get("jobs", []):
        task = j.get("array_task_id")
        job_id = f"{j['array_job_id']}_{task}" if task not in (None, "") and j.get("array_job_id") else str(j["job_id"])
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            state=str(j.get("job_state") or ""),
            priority=_int(j.get("priority")) or 0,
            nice=_signed32(j.get("nice")),
            qos=str(j.get("qos") or ""),
            partition=str(j.get("partition") or ""),
            account=str(j.get("account") or ""),
            user=str(j.get("user_name") or ""),
            time_limit_min=_int(j.get("time_limit")),
            reservation=str(j.get("resv_name") or ""),
            admin_comment=str(j.get("admin_comment") or ""),
            restarts=_int(j.get("restart_cnt")) or 0,
            required_nodes=str(j.get("required_nodes") or ""),
            raw=j,
        )
    return jobs


def canonical_rows(jobs: Iterable[SlurmJob], now: float | None = None) -> pd.DataFrame:
    """Canonical job rows (``features.schema``) for the given jobs, plus the scheduler's own view in
    extra columns: ``scheduler_priority``, ``nice``, ``pending_reason``, ``reservation``, ``restarts``.

    States and TRES strings are parsed by the sacct reader's own functions
    (``features.sources.slurm_fields``); GPU types are named through ``features.gpu_types``.
    """
    now = time.time() if now is None else now
    jobs = list(jobs)
    tres = parse_tres(pa.array([j.raw.get("tres_req_str") or j.raw.get("tres_alloc_str") or "" for j in jobs],
                               pa.string()), bare_unit="M")
    # residency and checkpoints: --constraint features and --comment pairs, read as the sacct reader does
    # (a feature expression that does not parse is Slurm's to enforce: no constraint is read from it)
    job_fields, _ = slurm_job_fields([j.raw.get("features") for j in jobs], [j.raw.get("comment") for j in jobs])
    rows = []
    for k, job in enumerate(jobs):
        raw = job.raw
        state = canonical_state(job.state)
        gpu_type = tres.gpu_type[k] or gpu_type_from_gres(raw.get("tres_per_node"))
        start = _int(raw.get("start_time")) if state == "RUNNING" else None
        deadline = _int(raw.get("deadline"))
        num_gpus = tres.gpus[k]
        rows.append({
            "job_id": job.job_id, "user": job.user or None, "team": job.account or None,
            "queue": job.partition or None, "tier": job.qos or None,
            "num_gpus": 0.0 if np.isnan(num_gpus) else num_gpus,
            "gpu_type": DEFAULT_VOCABULARY.canonical_or_none(gpu_type) or gpu_type if gpu_type else None,
            "num_nodes": _int(raw.get("node_count")),
            "cpus": _int(raw.get("cpus")), "mem_mib": tres.mem_mib[k],
            "time_limit_s": job.time_limit_min * 60.0 if job.time_limit_min is not None else np.nan,
            "deadline_ts": deadline if deadline else np.nan,
            "job_name": raw.get("name") or None, "submit_ts": _int(raw.get("submit_time")),
            "start_ts": start if start else np.nan, "state": state,
            "nodes": ",".join(expand_hostlist(raw.get("nodes"))) or None if state == "RUNNING" else None,
            "duration_s": max(now - start, 0.0) if start else np.nan,
            "censored": state in ("PENDING", "RUNNING"), "source": "slurm",
            "scheduler_priority": job.priority, "nice": job.nice,
            "pending_reason": raw.get("state_reason") if state == "PENDING" else None,
            "reservation": job.reservation or None, "restarts": job.restarts,
            **job_fields[k],
        })
    return conform(pd.DataFrame(rows)) if rows else conform(pd.DataFrame(columns=["job_id"]))


def slurm_time(ts: float) -> str:
    """Epoch seconds as the local-time string Slurm parses (``2026-11-29T21:00:00``), rounded up to a second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(math.ceil(ts)))


def parse_slurm_time(text: str) -> float | None:
    """A Slurm local-time string back to epoch seconds (None for ``Unknown``/``None``/``N/A``)."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class SlurmReservation:
    """One reservation from ``scontrol show reservation -o``."""

    name: str
    start_ts: float | None
    end_ts: float | None
    nodes: str
    users: str
    accounts: str
    flags: str
    fields: dict = field(default_factory=dict, compare=False, repr=False)


def parse_reservations(text: str) -> dict[str, SlurmReservation]:
    """Parse ``scontrol show reservation -o`` (one reservation per line, ``Key=Value`` pairs)."""
    out: dict[str, SlurmReservation] = {}
    for line in text.splitlines():
        fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
        if "ReservationName" not in fields:
            continue

        def value(key: str, fields: dict[str, str] = fields) -> str:
            v = fields.get(key, "")
            return "" if v == "(null)" else v

        out[fields["ReservationName"]] = SlurmReservation(
            name=fields["ReservationName"], start_ts=parse_slurm_time(value("StartTime")),
            end_ts=parse_slurm_time(value("EndTime")), nodes=value("Nodes"), users=value("Users"),
            accounts=value("Accounts"), flags=value("Flags"), fields=fields)
    return out
