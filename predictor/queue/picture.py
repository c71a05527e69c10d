"""Building the engine's :class:`~predictor.engine.queue_picture.QueuePicture` from the store's rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.layout import MILLI, ClusterLayout
from predictor.engine.queue_picture import QueuePicture, RunningJob, canonical_frame
from predictor.store.codec import prediction_row
from predictor.store.jobs import canonical_record
from predictor.store.tables import JobRow

__all__ = ["picture_from_rows", "allocation_gpus"]


def allocation_gpus(layout: ClusterLayout, allocation: Sequence[dict] | None) -> tuple[int, ...]:
    """Global GPU indices of a stored allocation (``[{"node", "gpu_indices"}]``); unknown nodes skipped."""
    out: list[int] = []
    for part in allocation or ():
        node = part.get("node")
        for g in part.get("gpu_indices") or ():
            try:
                out.append(layout.gpu_index(node, int(g)))
            except KeyError:
                continue
    return tuple(out)


def _predicted_end(row: JobRow, layout: ClusterLayout, gpus: tuple[int, ...]) -> float:
    """Start + predicted p90 x the slowdown of the placement the job got (NaN when unknown)."""
    doc = row.prediction or {}
    p90 = (doc.get("duration") or {}).get("p90_s")
    if p90 is None or row.start_ts is None:
        return math.nan
    cls = PLACEMENT_CLASSES[layout.placement_class(np.array(gpus))] if gpus else PLACEMENT_CLASSES[0]
    slow = (doc.get("slowdown") or {}).get(cls) or 1.0
    return float(row.start_ts + p90 * slow)


def _num(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def picture_from_rows(layout: ClusterLayout, rows: Sequence[JobRow], *, team_names: Sequence[str], now: float,
                      seq: int = 0) -> QueuePicture:
    """The picture of the live (pending and running) tracked jobs among ``rows``.

    A running job with no known GPUs (it started outside the inventory) holds no capacity here.
    """
    pending = [r for r in rows if r.status == "pending"]
    running: list[RunningJob] = []
    for r in rows:
        if r.status != "running":
            continue
        gpus = allocation_gpus(layout, r.allocation)
        if not gpus:
            continue
        running.append(RunningJob(
            job_id=r.job_id, team=r.team, tier=r.tier, queue=r.queue, gpus=gpus,
            gpu_milli=int(r.record.get("gpu_milli") or MILLI), start_ts=float(r.start_ts or now),
            predicted_end_ts=_predicted_end(r, layout, gpus), last_checkpoint_ts=_num(r.last_checkpoint_ts),
            checkpoint_interval_s=_num(r.record.get("checkpoint_interval_s")), priority=int(r.priority or 0),
            attained_gpu_s=float(r.attained_gpu_s or 0.0)))
    records = [canonical_record(r) for r in pending]
    jobs = canonical_frame(records)
    preds = pd.DataFrame.from_records([prediction_row(r.prediction, r.job_id) for r in pending])
    if preds.empty:
        preds = pd.DataFrame({"job_id": pd.Series([], dtype=object)})
    return QueuePicture.build(layout, pending_jobs=jobs, pending_preds=preds,
                              pending_attained=[float(r.attained_gpu_s or 0.0) for r in pending],
                              running=running, team_names=team_names, now=now, seq=seq)
