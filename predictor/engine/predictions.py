"""The prediction columns on the serving path: from a predictor to arrays, and from arrays to documents.

A scoring request is one pass: request -> canonical columns -> prediction columns (here) -> the
rules layer -> Decisions of the candidates -> JSON. Nothing on it is built per job that the
response does not hold: the predictor fills one array per ``PREDICTION_COLUMNS`` column for the
whole batch (features, boosters, memory estimate and topology each run once on the batch's arrays),
and :func:`prediction_docs` turns those arrays into the served documents column by column (the
``predictor.store.codec.prediction_doc`` shape, which a test checks value for value) without a
``Prediction`` object per job. :func:`predictions_from_columns` still gives the objects to callers
that keep them (the tracked queue, ``Engine.score``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from features.history import HistoryStore
from features.schema import PLACEMENT_CLASSES
from models.prediction import PREDICTION_COLUMNS, SLOWDOWN_COLUMNS, Prediction
from predictor.engine.model_slot import FramePredictor
from predictor.engine.queue_picture import frame_of

__all__ = ["prediction_columns", "predict_with", "predictions_from_columns", "prediction_docs", "finite_list"]


def prediction_columns(preds: pd.DataFrame) -> dict[str, np.ndarray]:
    """The prediction table as one numpy array per column (read once, used several times)."""
    return {c: preds[c].to_numpy() for c in PREDICTION_COLUMNS}


def predict_with(predictor: FramePredictor, jobs: pd.DataFrame | None, history: HistoryStore, now: float,
                 columns: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """A predictor's prediction columns: through its ``predict_columns`` when it has one (the bundle and
    the fallback do; no table is built), else read from its ``predict_frame``'s table (built from
    ``columns`` where ``jobs`` is None)."""
    fast = getattr(predictor, "predict_columns", None)
    if fast is not None:
        return dict(fast(jobs, history, now, columns=columns))
    return prediction_columns(predictor.predict_frame(jobs if jobs is not None else frame_of(columns), history, now))


def finite_list(values: Any) -> list[float | None]:
    """``values`` as Python floats, None where not finite (what the documents hold for NaN / inf)."""
    arr = np.asarray(values, dtype=np.float64)
    out = arr.tolist()
    bad = ~np.isfinite(arr)
    if bad.any():
        for i in np.flatnonzero(bad).tolist():
            out[i] = None
    return out


def _fits(value: Any) -> list[str]:
    return [t for t in value.split(",") if t] if isinstance(value, str) else []


def prediction_docs(columns: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """The served document of every job (``codec.prediction_doc``'s shape), built column by column."""
    ids = [str(j) for j in np.asarray(columns["job_id"]).tolist()]
    p10, p50, p90 = (finite_list(columns[c]) for c in ("duration_p10_s", "duration_p50_s", "duration_p90_s"))
    peak, upper = finite_list(columns["peak_vram_mib"]), finite_list(columns["peak_vram_upper_mib"])
    slow = [finite_list(columns[c]) for c in SLOWDOWN_COLUMNS]
    fits = [_fits(v) for v in np.asarray(columns["fits_gpu_types"], dtype=object).tolist()]
    version = [v if isinstance(v, str) and v else "fallback"
               for v in np.asarray(columns["model_version"], dtype=object).tolist()]
    fallback = np.asarray(columns["fallback"], dtype=bool).tolist()
    reason = [r if isinstance(r, str) else None for r in np.asarray(columns["fallback_reason"], dtype=object).tolist()]
    classes = PLACEMENT_CLASSES
    return [{"job_id": ids[i], "duration": {"p10_s": p10[i], "p50_s": p50[i], "p90_s": p90[i]},
             "peak_vram_mib": peak[i], "peak_vram_upper_mib": upper[i], "fits_gpu_types": fits[i],
             "slowdown": {c: s[i] for c, s in zip(classes, slow, strict=True)},
             "model_version": version[i], "fallback": fallback[i], "fallback_reason": reason[i]}
            for i in range(len(ids))]


def _finite_or_none(x: float) -> float | None:
    return None if x != x else x


def predictions_from_columns(columns: Mapping[str, np.ndarray]) -> list[Prediction]:
    """``Prediction`` objects from prediction columns (what ``Prediction.from_row`` gives, per row)."""
    slow = np.column_stack([np.asarray(columns[c], dtype=np.float64) for c in SLOWDOWN_COLUMNS]).tolist()
    p10, p50, p90 = (np.asarray(columns[c], dtype=np.float64).tolist()
                     for c in ("duration_p10_s", "duration_p50_s", "duration_p90_s"))
    peak, upper = (np.asarray(columns[c], dtype=np.float64).tolist() for c in ("peak_vram_mib", "peak_vram_upper_mib"))
    out = []
    for i, job_id in enumerate(columns["job_id"].tolist()):
        fits = columns["fits_gpu_types"][i]
        reason = columns["fallback_reason"][i]
        version = columns["model_version"][i]
        out.append(Prediction(
            job_id=str(job_id), duration_p10_s=p10[i], duration_p50_s=p50[i], duration_p90_s=p90[i],
            peak_vram_mib=_finite_or_none(peak[i]), peak_vram_upper_mib=_finite_or_none(upper[i]),
            fits_gpu_types=tuple(t for t in str(fits).split(",") if t) if isinstance(fits, str) else (),
            slowdown=MappingProxyType(dict(zip(PLACEMENT_CLASSES, slow[i], strict=True))),
            model_version=str(version) if isinstance(version, str) and version else "fallback",
            fallback=bool(columns["fallback"][i]),
            fallback_reason=reason if isinstance(reason, str) else None))
    return out
