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

from features.schema import conform

__all__ = [
    "SlurmJob",
    "SlurmReservation",
    "jobs_from_squeue",
    "canonical_rows",
    "parse_reservations",
    "parse_tres",
    "slurm_time",
    "parse_slurm_time",
    "canonical_state",
    "expand_hostlist",
]

_NO_VAL = 0xFFFFFFFE  # Slurm's INFINITE / NO_VAL sentinels start here
_STATE = {
    "PENDING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING",
    "RUNNING": "RUNNING", "CONFIGURING": "RUNNING", "COMPLETING": "RUNNING", "SUSPENDED": "RUNNING",
    "RESIZING": "RUNNING", "STAGE_OUT": "RUNNING", "SIGNALING": "RUNNING",
    "COMPLETED": "COMPLETED", "CANCELLED": "CANCELLED", "FAILED": "FAILED", "BOOT_FAIL": "FAILED",
    "DEADLINE": "TIMEOUT", "TIMEOUT": "TIMEOUT", "OUT_OF_MEMORY": "OUT_OF_MEMORY", "NODE_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED", "SPECIAL_EXIT": "FAILED", "REVOKED": "CANCELLED",
}


def canonical_state(slurm_state: str) -> str:
    """Map a Slurm job state (``RUNNING``, ``CANCELLED by 0``, ``COMPLETING``) to a canonical STATES value."""
    head = str(slurm_state).split()[0].upper() if slurm_state else ""
    return _STATE.get(head, "FAILED" if head else "PENDING")


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


_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}


def parse_tres(text: str) -> dict[str, float]:
    """``cpu=4,mem=100G,node=1,billing=4,gres/gpu:a100=2`` -> ``{"cpu": 4, "mem_mib": 102400, "gres/gpu:a100": 2, ...}``."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in str(text or "").split(","))):
        key, _, value = part.partition("=")
        if key == "mem":
            match = re.fullmatch(r"([\d.]+)([KMGT]?)", value)
            if match:
                out["mem_mib"] = float(match.group(1)) * _MEM_UNITS[match.group(2) or "M"]
            continue
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


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


def _gpus(raw: dict[str, Any]) -> tuple[float, str | None]:
    tres = parse_tres(raw.get("tres_req_str") or raw.get("tres_alloc_str") or "")
    total, gpu_type = 0.0, None
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            gpu_type = key.split(":", 1)[1]
        if key == "gres/gpu":
            total = value
    if not total:
        total = sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))
    if gpu_type is None:  # tres_per_node "gres:gpu:a100:2"
        parts = str(raw.get("tres_per_node") or "").split(":")
        if len(parts) == 4 and parts[1] == "gpu":
            gpu_type = parts[2]
    return total, gpu_type


def canonical_rows(jobs: Iterable[SlurmJob], now: float | None = None) -> pd.DataFrame:
    """Canonical job rows (``features.schema``) for the given jobs, plus the scheduler's own view in
    extra columns: ``scheduler_priority``, ``nice``, ``pending_reason``, ``reservation``, ``restarts``."""
    now = time.time() if now is None else now
    rows = []
    for job in jobs:
        raw = job.raw
        state = canonical_state(job.state)
        num_gpus, gpu_type = _gpus(raw)
        tres = parse_tres(raw.get("tres_req_str") or "")
        start = _int(raw.get("start_time")) if state == "RUNNING" else None
        deadline = _int(raw.get("deadline"))
        rows.append({
            "job_id": job.job_id, "user": job.user or None, "team": job.account or None,
            "queue": job.partition or None, "tier": job.qos or None,
            "num_gpus": num_gpus, "gpu_type": gpu_type, "num_nodes": _int(raw.get("node_count")),
            "cpus": _int(raw.get("cpus")), "mem_mib": tres.get("mem_mib", np.nan),
            "time_limit_s": job.time_limit_min * 60.0 if job.time_limit_min is not None else np.nan,
            "deadline_ts": deadline if deadline else np.nan,
            "job_name": raw.get("name") or None, "submit_ts": _int(raw.get("submit_time")),
            "start_ts": start if start else np.nan, "state": state,
            "duration_s": max(now - start, 0.0) if start else np.nan,
            "censored": state in ("PENDING", "RUNNING"), "source": "slurm",
            "scheduler_priority": job.priority, "nice": job.nice,
            "pending_reason": raw.get("state_reason") if state == "PENDING" else None,
            "reservation": job.reservation or None, "restarts": job.restarts,
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


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a Slurm host list: ``gpu[01-03,07],login1`` -> ``("gpu01", "gpu02", "gpu03", "gpu07", "login1")``.

    Handles one bracket group per name (what Slurm prints for flat node names); zero padding is kept.
    """
    names: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", str(text or "")):
        prefix, ranges, suffix = match.groups()
        if not ranges:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, sep, hi = part.partition("-")
            if not sep:
                names.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            names.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return tuple(names)
