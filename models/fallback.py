"""The fallback predictor: what the service answers with when no trained model can be loaded.

Same interface as ``JobPredictorBundle.predict_frame``; every row has ``fallback=True``, a
``fallback_reason`` and ``model_version="fallback"``. Rules, in order:

* Duration p50: the recent median run time of the job's request signature, else its family, else
  its user (from the history store, point in time as of now); else half of the requested time
  limit (users over-request roughly two-fold); else ``GLOBAL_PRIOR_S`` (or the median a caller
  passes). The interval is ``p50 / SPREAD`` to ``p50 * SPREAD``, capped at the time limit.
* Peak memory: the analytic estimate and its upper bound (``models.memory_analytic``).
* Slowdown: the topology prior (published link bandwidths, step-time physics).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from features.history import HistoryStore, numeric_column
from models import memory_scalar  # noqa: F401 - registers analytic_memory's row-by-row path
from models.bundle import assemble_columns, columns_frame, job_view
from models.memory_analytic import GPU_MEMORY_MIB, analytic_memory
from models.topology import TopologyEstimator

__all__ = ["FallbackPredictor", "GLOBAL_PRIOR_S", "SPREAD"]

GLOBAL_PRIOR_S = 3600.0
SPREAD = 3.0


class FallbackPredictor:
    """Rules-only predictions (see the module docstring).

    Parameters
    ----------
    reason : str, default "no trained model loaded"
        Put in every row's ``fallback_reason``.
    global_median_s : float, default GLOBAL_PRIOR_S
        Duration prior for a job nothing is known about.
    gpu_memory_mib : mapping, optional
        GPU type -> memory per device (MiB); default ``GPU_MEMORY_MIB``.
    """

    def __init__(self, reason: str = "no trained model loaded", *, global_median_s: float = GLOBAL_PRIOR_S,
                 gpu_memory_mib: Mapping[str, float] | None = None) -> None:
        self.reason = reason
        self.global_median_s = float(global_median_s)
        self.gpu_memory_mib = dict(GPU_MEMORY_MIB if gpu_memory_mib is None else gpu_memory_mib)
        self.history = HistoryStore()
        self._topology = TopologyEstimator()
        self._topology.fit(pd.DataFrame({"job_id": pd.Series([], dtype=object)}))  # prior only

    def predict_frame(self, jobs: pd.DataFrame, history: HistoryStore | None = None,
                      now: float | None = None) -> pd.DataFrame:
        """Fallback predictions, one row per job with ``PREDICTION_COLUMNS`` (see the module docstring)."""
        return columns_frame(self.predict_columns(jobs, history, now))

    def predict_columns(self, jobs: pd.DataFrame, history: HistoryStore | None = None, now: float | None = None,
                        *, columns: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """``predict_frame`` as one array per column (``JobPredictorBundle.predict_columns``' contract)."""
        jobs = job_view(jobs, now, columns)
        store = self.history if history is None else history
        state = store.state_for(jobs)
        p50 = np.full(len(jobs), np.nan)
        for kind in ("request", "family", "user"):
            recent = np.exp(state.get(kind, "median_logd"))
            p50 = np.where(np.isnan(p50), recent, p50)
        limit = numeric_column(jobs, "time_limit_s")
        p50 = np.where(np.isnan(p50) & (limit > 0), 0.5 * limit, p50)
        p50 = np.where(np.isnan(p50), self.global_median_s, p50)
        quantiles = np.column_stack([p50 / SPREAD, p50, p50 * SPREAD])
        parts = analytic_memory(jobs, self.gpu_memory_mib)
        return assemble_columns(jobs, quantiles, parts["total"], parts["upper"], self._topology.predict(jobs),
                                self.gpu_memory_mib, model_version="fallback", fallback=True,
                                fallback_reason=self.reason)
