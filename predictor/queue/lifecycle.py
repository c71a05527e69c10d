"""What a job event does to a tracked job (the lifecycle rules).

==============  ====================  ==================================================================
event           from                  effect
==============  ====================  ==================================================================
``started``     pending               running from ``ts``; holds the GPUs given in ``nodes`` (as many
                                      as it asks for, each once, none a running job holds: else a 422
                                      or a 409 naming them), else its decision's placement when free,
                                      else the best free gang
``checkpointed`` running              last checkpoint at ``ts`` (bounds the work a preemption loses)
``finished``    running               ended at ``ts`` in ``state`` (COMPLETED unless given); the run is
                                      charged to the team; the job joins the history the features read
``failed``      pending or running    ended at ``ts`` in ``state`` (FAILED unless given); a run is charged
``preempted``   running               pending again; the run is charged and counted as attained service
==============  ====================  ==================================================================

Anything else (finishing a pending job, starting a running one, times going backwards) is a
:class:`~predictor.queue.errors.ConflictError` or an ``InputError`` naming the problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from features.errors import InputError
from predictor.capacity.layout import MILLI
from predictor.engine.engine import Engine, UsageCharge
from predictor.engine.queue_picture import QueuePicture
from predictor.queue.errors import ConflictError
from predictor.store.jobs import canonical_record
from predictor.store.tables import JobRow

__all__ = ["EventOutcome", "apply_event", "charge_of", "ALLOWED_FROM"]

ALLOWED_FROM: dict[str, tuple[str, ...]] = {
    "started": ("pending",),
    "checkpointed": ("running",),
    "finished": ("running",),
    "failed": ("pending", "running"),
    "preempted": ("running",),
}


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """A usage charge (a run ended) and the job's history record (it ended), where they apply."""

    charge: UsageCharge | None = None
    history_record: dict[str, Any] | None = None


def _gpus_held(row: JobRow) -> float:
    rec = row.record
    return float(rec.get("num_gpus") or 1) * float(rec.get("gpu_milli") or MILLI) / MILLI


def charge_of(row: JobRow, end_ts: float) -> UsageCharge | None:
    """The usage of the run now ending (None when the job has no team or never started)."""
    if row.team is None or row.start_ts is None:
        return None
    return UsageCharge(row.team, row.job_id, _gpus_held(row), float(row.start_ts), max(float(end_ts), row.start_ts))


def _given_allocation(row: JobRow, nodes: list[dict], engine: Engine, picture: QueuePicture) -> list[dict]:
    """The GPUs a ``started`` event names, checked against the inventory, the job's request and what
    running jobs hold (fractional jobs share a GPU up to its whole)."""
    lay = engine.layout
    gpus: list[int] = []
    for part in nodes:
        for g in part["gpu_indices"]:
            try:
                gpus.append(lay.gpu_index(part["node"], int(g)))
            except KeyError as exc:
                raise InputError(f"nodes: {exc.args[0]}") from None
    if len(set(gpus)) != len(gpus):
        raise InputError("nodes: a GPU is named twice")
    rec = row.record
    wanted = int(rec.get("num_gpus") or 1)
    if len(gpus) != wanted:
        raise InputError(f"nodes: job {row.job_id} asks for {wanted} GPU(s); the event names {len(gpus)}")
    milli = int(rec.get("gpu_milli") or MILLI)
    free = picture.free_milli()
    busy = [g for g in gpus if free[g] < milli]
    if busy:
        running = picture.running
        holders = sorted({str(running.job_id[i]) for i in range(len(running))
                          if np.isin(running.gpus_of(i), busy).any()})
        named = ", ".join(f"{node} GPU {i}" for node, idx in lay.gpu_indices_by_node(np.array(busy)) for i in idx)
        raise ConflictError(f"job {row.job_id} cannot start on {named}: held by running job(s) "
                            f"{', '.join(holders)}")
    return [{"node": p["node"], "gpu_indices": [int(g) for g in p["gpu_indices"]]} for p in nodes]


def _allocation(row: JobRow, event: dict[str, Any], engine: Engine, picture: QueuePicture) -> list[dict]:
    if event.get("nodes"):
        return _given_allocation(row, event["nodes"], engine, picture)
    placement = (row.decision or {}).get("placement") or {}
    preferred = placement.get("gpu_indices")
    rec = row.record
    chosen = engine.place_started(picture, int(rec.get("num_gpus") or 1), int(rec.get("gpu_milli") or MILLI),
                                  [(p["node"], p["gpu_indices"]) for p in preferred] if preferred else None,
                                  event.get("gpu_type") or (row.decision or {}).get("flavor"))
    return [] if chosen is None else [{"node": node, "gpu_indices": idx} for node, idx in chosen]


def apply_event(row: JobRow, event: dict[str, Any], ts: float, engine: Engine, picture: QueuePicture) -> EventOutcome:
    """Apply ``event`` (a ``JobEventCreate`` as a dict) at ``ts`` to ``row``, in place.

    Raises
    ------
    ConflictError
        The event does not fit the job's status, or a ``started`` event names GPUs running jobs hold.
    InputError
        Its time is before the job's submission or start, or it names GPUs the inventory lacks, or a
        GPU twice, or not as many GPUs as the job asks for.
    """
    kind = event["kind"]
    if row.status not in ALLOWED_FROM[kind]:
        raise ConflictError(f"job {row.job_id} is {row.status}; '{kind}' applies only to "
                            f"{' or '.join(ALLOWED_FROM[kind])} jobs")
    if ts < row.submit_ts:
        raise InputError(f"ts: {kind} at {ts} is before the job was submitted ({row.submit_ts})")
    if row.start_ts is not None and ts < row.start_ts:
        raise InputError(f"ts: {kind} at {ts} is before the job started ({row.start_ts})")
    if kind == "started":
        row.status, row.state, row.start_ts, row.last_checkpoint_ts = "running", "RUNNING", ts, None
        row.allocation = _allocation(row, event, engine, picture)
        return EventOutcome()
    if kind == "checkpointed":
        row.last_checkpoint_ts = ts
        return EventOutcome()
    charge = charge_of(row, ts) if row.status == "running" else None
    if kind == "preempted":
        if charge is not None:
            row.attained_gpu_s = float(row.attained_gpu_s or 0.0) + charge.gpus * (charge.end_ts - charge.start_ts)
        row.status, row.state = "pending", "PENDING"
        row.start_ts = row.last_checkpoint_ts = None
        row.allocation = None
        return EventOutcome(charge=charge)
    default_state = "COMPLETED" if kind == "finished" else "FAILED"
    row.status, row.state, row.end_ts, row.allocation = "ended", event.get("state") or default_state, ts, None
    outcome = {k: event[k] for k in ("peak_vram_mib", "placement_class", "gpu_type") if event.get(k) is not None}
    row.outcome = outcome or None
    return EventOutcome(charge=charge, history_record=canonical_record(row))
