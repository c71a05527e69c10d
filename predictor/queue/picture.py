"""Building the engine's :class:`~predictor.engine.queue_picture.QueuePicture` from the store's rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from predictor.capacity.layout import ClusterLayout
from predictor.engine.queue_picture import QueuePicture, canonical_frame
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


def _num(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _predictions(rows: Sequence[JobRow]) -> pd.DataFrame:
    preds = pd.DataFrame.from_records([prediction_row(r.prediction, r.job_id) for r in rows])
    return preds if not preds.empty else pd.DataFrame({"job_id": pd.Series([], dtype=object)})


def picture_from_rows(layout: ClusterLayout, rows: Sequence[JobRow], *, team_names: Sequence[str], now: float,
                      seq: int = 0) -> QueuePicture:
    """The picture of the live (pending and running) tracked jobs among ``rows``, through the intake.

    A running job holds the GPUs its ``started`` event recorded; one with no known GPUs (it started
    outside the inventory) holds no capacity here.
    """
    pending = [r for r in rows if r.status == "pending"]
    running = [(r, gpus) for r in rows if r.status == "running" and (gpus := allocation_gpus(layout, r.allocation))]
    run_rows = [r for r, _ in running]
    run_records = [{**canonical_record(r), "start_ts": float(r.start_ts if r.start_ts is not None else now)}
                   for r in run_rows]
    return QueuePicture.build(
        layout, pending_jobs=canonical_frame([canonical_record(r) for r in pending]), pending_preds=_predictions(pending),
        pending_attained=[float(r.attained_gpu_s or 0.0) for r in pending],
        running_jobs=canonical_frame(run_records), running_preds=_predictions(run_rows),
        running_gpus=[gpus for _, gpus in running],
        running_state={"priority": np.array([int(r.priority or 0) for r in run_rows], dtype=np.int64),
                       "attained_gpu_s": np.array([float(r.attained_gpu_s or 0.0) for r in run_rows]),
                       "last_checkpoint_ts": np.array([_num(r.last_checkpoint_ts) for r in run_rows])},
        team_names=team_names, now=now, seq=seq)
