"""Predictors that learn nothing: the null predictor (the rules layer alone) and a table of predictions.

Both have the engine's predictor interface (``predict_frame`` / ``predict_columns``), so "decide with
the rules layer only" and "decide with these given predictions" are the engine with another
predictor, never a separate path to the rules layer.

* :class:`NullPredictor`: nothing is predicted: durations and memory unknown (NaN), no slowdown,
  every GPU type fits (rule *fits* for an unknown bound). The rules layer then plans on time limits and its
  ``reservation.unknown_duration_s`` (see docs/rules-layer.md).
* :class:`TablePredictor`: predictions read from a ``PREDICTION_COLUMNS`` table, matched on
  ``job_id``; a job the table lacks gets the null prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from features.errors import InputError
from models.memory import fitting_types
from models.memory_analytic import GPU_MEMORY_MIB
from models.prediction import PREDICTION_COLUMNS, SLOWDOWN_COLUMNS

__all__ = ["NullPredictor", "TablePredictor", "NULL_VERSION"]

#: ``model_version`` of a null prediction.
NULL_VERSION = "none"


def _ids(jobs: pd.DataFrame, columns: Mapping[str, np.ndarray] | None) -> np.ndarray:
    values = columns["job_id"] if columns is not None else jobs["job_id"].to_numpy(dtype=object)
    return np.asarray(values, dtype=object)


def _null_columns(ids: np.ndarray, reason: str, gpu_memory_mib: Mapping[str, float]) -> dict[str, np.ndarray]:
    n = len(ids)
    out: dict[str, np.ndarray] = {"job_id": ids.astype(object)}
    for col in ("duration_p10_s", "duration_p50_s", "duration_p90_s", "peak_vram_mib", "peak_vram_upper_mib"):
        out[col] = np.full(n, np.nan)
    out["fits_gpu_types"] = np.array(fitting_types(np.full(n, np.nan), gpu_memory_mib), dtype=object)
    for col in SLOWDOWN_COLUMNS:
        out[col] = np.ones(n)
    out["model_version"] = np.full(n, NULL_VERSION, dtype=object)
    out["fallback"] = np.ones(n, dtype=bool)
    out["fallback_reason"] = np.full(n, reason, dtype=object)
    return out


class NullPredictor:
    """Predicts nothing (see the module docstring).

    Parameters
    ----------
    reason : str
        Put in every row's ``fallback_reason``.
    """

    def __init__(self, reason: str = "rules only: no duration or memory model", *,
                 gpu_memory_mib: Mapping[str, float] | None = None) -> None:
        self.reason = reason
        self.gpu_memory_mib = dict(GPU_MEMORY_MIB if gpu_memory_mib is None else gpu_memory_mib)

    def predict_columns(self, jobs: pd.DataFrame, history: Any = None, now: float | None = None, *,
                        columns: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        return _null_columns(_ids(jobs, columns), self.reason, self.gpu_memory_mib)

    def predict_frame(self, jobs: pd.DataFrame, history: Any = None, now: float | None = None) -> pd.DataFrame:
        return pd.DataFrame(self.predict_columns(jobs, history, now), columns=list(PREDICTION_COLUMNS))


class TablePredictor:
    """Predictions looked up by ``job_id`` in a table with ``PREDICTION_COLUMNS``.

    Raises
    ------
    InputError
        The table lacks ``job_id`` or has it twice.
    """

    def __init__(self, table: pd.DataFrame, *, version: str = "table", origin: str = "predictions") -> None:
        if "job_id" not in table.columns:
            raise InputError(f"{origin}: no job_id column")
        ids = table["job_id"].astype(str)
        if ids.duplicated().any():
            raise InputError(f"{origin}: job_id {ids[ids.duplicated()].iloc[0]!r} appears twice")
        self._table = table.assign(job_id=ids).set_index("job_id")
        self.version = version
        self.origin = origin

    def predict_columns(self, jobs: pd.DataFrame, history: Any = None, now: float | None = None, *,
                        columns: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        ids = np.array([str(i) for i in _ids(jobs, columns)], dtype=object)
        out = _null_columns(ids, f"not in {self.origin}", GPU_MEMORY_MIB)
        hit = np.isin(ids, self._table.index.to_numpy(dtype=object))
        if not hit.any():
            return out
        rows = self._table.loc[ids[hit]]
        for col in PREDICTION_COLUMNS:
            if col == "job_id" or col not in rows.columns:
                continue
            values = rows[col].to_numpy()
            if out[col].dtype.kind == "f":
                values = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
            elif out[col].dtype == bool:
                values = pd.Series(values).fillna(False).astype(bool).to_numpy()
            out[col][hit] = values
        if "model_version" not in rows.columns:
            out["model_version"][hit] = self.version
        if "fallback" not in rows.columns:
            out["fallback"][hit] = False
            out["fallback_reason"][hit] = None
        return out

    def predict_frame(self, jobs: pd.DataFrame, history: Any = None, now: float | None = None) -> pd.DataFrame:
        return pd.DataFrame(self.predict_columns(jobs, history, now), columns=list(PREDICTION_COLUMNS))
