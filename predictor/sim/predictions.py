"""Where a replay's predictions come from.

A replay needs, for every job, what production would have predicted when the job was submitted
(``models.prediction.PREDICTION_COLUMNS``). Three sources:

- :class:`OraclePredictions` reads the ground truth (true run time, true peak memory, true
  slowdowns). It is labelled ``oracle`` everywhere (``model_version="oracle"``): it measures the
  limit a perfect predictor would reach, never a result a deployment can get.
- :class:`TrainedPredictions` (``predictor.sim.trained``) fits a model only on jobs that *ended
  before* the replayed period (optionally retrained every K days on what had ended by then) and
  predicts each replayed job from history that ended before its submit time: never the future.
- :class:`NoPredictions` for policies that use none (FIFO, LAS): durations unknown (NaN).

Every source returns a :class:`PredictionTable` aligned with the :class:`JobTable` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from features.schema import PLACEMENT_CLASSES
from models.memory import fitting_types
from models.prediction import PREDICTION_COLUMNS, SLOWDOWN_COLUMNS
from predictor.capacity.inventory import Inventory
from predictor.sim.workload import JobTable

__all__ = ["PredictionTable", "PredictionSource", "OraclePredictions", "NoPredictions", "fits_types"]


@dataclass(frozen=True)
class PredictionTable:
    """Predictions for every job of a :class:`JobTable`, one array per field (row i = job i).

    ``slowdown`` has shape (n_jobs, len(PLACEMENT_CLASSES)); the other arrays shape (n_jobs,).
    ``source`` names where they came from (``oracle``, a model version, or ``none``).
    """

    p10_s: np.ndarray
    p50_s: np.ndarray
    p90_s: np.ndarray
    peak_vram_mib: np.ndarray
    peak_vram_upper_mib: np.ndarray
    fits_gpu_types: np.ndarray  # object array of comma-separated type names
    slowdown: np.ndarray
    model_version: np.ndarray  # object array
    fallback: np.ndarray  # bool
    source: str

    def __len__(self) -> int:
        return len(self.p50_s)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, source: str) -> PredictionTable:
        """Build from a DataFrame with ``PREDICTION_COLUMNS`` (row order = job order)."""
        missing = [c for c in PREDICTION_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"prediction frame lacks columns {missing}")
        return cls(
            p10_s=frame["duration_p10_s"].to_numpy(dtype="float64"),
            p50_s=frame["duration_p50_s"].to_numpy(dtype="float64"),
            p90_s=frame["duration_p90_s"].to_numpy(dtype="float64"),
            peak_vram_mib=frame["peak_vram_mib"].to_numpy(dtype="float64"),
            peak_vram_upper_mib=frame["peak_vram_upper_mib"].to_numpy(dtype="float64"),
            fits_gpu_types=frame["fits_gpu_types"].fillna("").astype(str).to_numpy(dtype=object),
            slowdown=frame[list(SLOWDOWN_COLUMNS)].to_numpy(dtype="float64"),
            model_version=frame["model_version"].astype(str).to_numpy(dtype=object),
            fallback=frame["fallback"].fillna(False).astype(bool).to_numpy(),
            source=source,
        )

    def to_frame(self, job_ids: np.ndarray) -> pd.DataFrame:
        """The batch form (``PREDICTION_COLUMNS``)."""
        data = {
            "job_id": job_ids,
            "duration_p10_s": self.p10_s,
            "duration_p50_s": self.p50_s,
            "duration_p90_s": self.p90_s,
            "peak_vram_mib": self.peak_vram_mib,
            "peak_vram_upper_mib": self.peak_vram_upper_mib,
            "fits_gpu_types": self.fits_gpu_types,
        }
        for i, col in enumerate(SLOWDOWN_COLUMNS):
            data[col] = self.slowdown[:, i]
        data["model_version"] = self.model_version
        data["fallback"] = self.fallback
        data["fallback_reason"] = np.full(len(self), None, dtype=object)
        return pd.DataFrame(data, columns=list(PREDICTION_COLUMNS))


class PredictionSource(Protocol):
    """Something that predicts every job of a workload as of its submit time."""

    name: str
    oracle: bool

    def predict(self, jobs: JobTable, inventory: Inventory) -> PredictionTable: ...


def fits_types(peak_mib: np.ndarray, inventory: Inventory) -> np.ndarray:
    """Comma-separated GPU types of ``inventory`` whose memory holds each peak (rule *fits*,
    ``models.memory.fitting_types``: all of them when the peak is unknown)."""
    memory = {name: float(t.memory_mib) for name, t in inventory.gpu_types.items()}
    return np.array(fitting_types(np.asarray(peak_mib, dtype=float), memory), dtype=object)


@dataclass(frozen=True)
class OraclePredictions:
    """The truth, labelled as such: exact run time, peak memory and slowdowns (``model_version="oracle"``)."""

    name: str = "oracle"
    oracle: bool = True

    def predict(self, jobs: JobTable, inventory: Inventory) -> PredictionTable:
        n = len(jobs)
        work = jobs.work_s.astype("float64")
        peak = jobs.peak_vram_mib.astype("float64")
        return PredictionTable(
            p10_s=work.copy(), p50_s=work.copy(), p90_s=work.copy(),
            peak_vram_mib=peak.copy(), peak_vram_upper_mib=peak.copy(),
            fits_gpu_types=fits_types(peak, inventory),
            slowdown=jobs.slowdown.copy(),
            model_version=np.full(n, "oracle", dtype=object),
            fallback=np.zeros(n, dtype=bool),
            source="oracle",
        )


@dataclass(frozen=True)
class NoPredictions:
    """No prediction at all (durations and memory unknown, slowdown 1): for FIFO and LAS."""

    name: str = "none"
    oracle: bool = False

    def predict(self, jobs: JobTable, inventory: Inventory) -> PredictionTable:
        n = len(jobs)
        nan = np.full(n, np.nan)
        return PredictionTable(
            p10_s=nan.copy(), p50_s=nan.copy(), p90_s=nan.copy(),
            peak_vram_mib=nan.copy(), peak_vram_upper_mib=nan.copy(),
            fits_gpu_types=fits_types(nan, inventory),
            slowdown=np.ones((n, len(PLACEMENT_CLASSES))),
            model_version=np.full(n, "none", dtype=object),
            fallback=np.ones(n, dtype=bool),
            source="none",
        )
