"""The model bundle: every estimator, the feature pipeline and the history snapshot, behind one call.

``JobPredictorBundle.predict_frame(jobs, history, now)`` returns one row per job with exactly
``models.prediction.PREDICTION_COLUMNS``, in input order; ``predict_columns`` returns the same as one
numpy array per column (the serving path: no DataFrame built or read back per request). Serving,
batch scoring, evaluation and the replay simulator all call them (or ``predict_with_state`` with a
point-in-time history state), so there is one prediction path. ``fit_bundle`` (``models.fit``)
builds one without MLflow.

Conventions
    * Duration quantiles are for the job on its *best* placement; multiply by the slowdown column of
      the placement it gets. They never exceed the job's time limit (the scheduler kills it there).
    * A job without ``submit_ts`` is taken as submitted at ``now`` (default: the wall clock).
    * A job asking for no GPU (``num_gpus == 0``) gets no memory estimate and fits no GPU type.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from features.build import CATEGORICAL_FEATURES, FEATURE_NAMES, FEATURE_PIPELINE_VERSION, JobFeatureBuilder
from features.history import HistoryState, HistoryStore, JobColumns, numeric_column, object_column
from features.schema import PLACEMENT_CLASSES
from models.duration import DurationEstimator
from models.memory import MemoryEstimator, fitting_types, memory_design
from models.memory_analytic import GPU_MEMORY_MIB, MemoryParts, analytic_memory
from models.prediction import PREDICTION_COLUMNS, SLOWDOWN_COLUMNS
from models.topology import TopologyEstimator

__all__ = ["JobPredictorBundle", "prepare_jobs", "job_view", "placement_slowdown", "assemble_columns", "assemble_frame",
           "columns_frame", "duration_offset"]

_CLASS_INDEX = {c: i for i, c in enumerate(PLACEMENT_CLASSES)}


def prepare_jobs(jobs: pd.DataFrame, now: float | None) -> pd.DataFrame:
    """``jobs`` with a ``submit_ts`` for every row (missing ones set to ``now``)."""
    if "job_id" not in jobs.columns:
        from features.errors import InputError

        raise InputError("job table lacks required column: job_id")
    submit = numeric_column(jobs, "submit_ts")
    if np.isnan(submit).any() or "submit_ts" not in jobs.columns:
        jobs = jobs.copy()
        jobs["submit_ts"] = np.where(np.isnan(submit), time.time() if now is None else float(now), submit)
    return jobs


def _frame_of_arrays(arrays: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The table of per-column arrays, for the rare column that must be read from a frame (the
    engine's ``frame_of`` is faster but belongs to the layer above; this path is not per request)."""
    return pd.DataFrame(dict(arrays), copy=False)


class _ArrayJobColumns(JobColumns):
    """A ``JobColumns`` whose columns are already typed arrays (``numeric_column`` / ``object_column``
    values); the frame is read only for a column the arrays lack or hold with another type. Each array
    is checked when its column is first read (a request reads a third of the canonical columns).
    Without a frame (``frame=None``: the serving path, which builds none) one is made from the arrays
    the first time a column must be read from it."""

    __slots__ = ("_arrays", "_n", "_frame")

    def __init__(self, frame: pd.DataFrame | None, arrays: Mapping[str, np.ndarray]) -> None:
        self._frame = frame
        self.columns = frame.columns if frame is not None else arrays.keys()  # what ``col in jobs.columns`` asks
        self._obj, self._num, self._derived = {}, {}, {}
        self._arrays = arrays
        self._n = len(frame) if frame is not None else len(arrays["job_id"])

    @property
    def frame(self) -> pd.DataFrame:  # type: ignore[override]
        if self._frame is None:
            self._frame = _frame_of_arrays(self._arrays)
        return self._frame

    def __len__(self) -> int:
        return self._n

    def _array(self, col: str, dtype: type) -> np.ndarray | None:
        values = self._arrays.get(col)
        if isinstance(values, np.ndarray) and values.ndim == 1 and len(values) == self._n and values.dtype == dtype:
            return values
        return None

    def num(self, col: str) -> np.ndarray:
        got = self._num.get(col)
        if got is None:
            got = self._array(col, np.float64)
            self._num[col] = got if got is not None else numeric_column(self.frame, col)
        return self._num[col]

    def obj(self, col: str) -> np.ndarray:
        got = self._obj.get(col)
        if got is None:
            got = self._array(col, object)
            self._obj[col] = got if got is not None else object_column(self.frame, col)
        return self._obj[col]


def job_view(jobs: pd.DataFrame | None, now: float | None, columns: Mapping[str, np.ndarray] | None = None,
             ) -> JobColumns:
    """``JobColumns`` of ``prepare_jobs(jobs, now)``; ``columns``, when given, are the same jobs as arrays
    (float64 numbers with NaN for null, object strings with None: ``features.schema.conform``'s values)
    and are read instead of the frame (no pandas column access per request). ``jobs`` may be None
    when ``columns`` are given: no frame is built unless a column must be read from one."""
    if columns is None:
        return JobColumns(prepare_jobs(jobs, now))
    submit = columns.get("submit_ts")
    if isinstance(submit, np.ndarray) and submit.dtype == np.float64 and not np.isnan(submit).any():
        return _ArrayJobColumns(jobs, columns)
    if jobs is None:
        jobs = _frame_of_arrays(columns)
    prepared = prepare_jobs(jobs, now)
    if prepared is not jobs:  # submit_ts was filled in: the frame's is the one to read
        columns = {k: v for k, v in columns.items() if k != "submit_ts"}
    return _ArrayJobColumns(prepared, columns)


def duration_offset(jobs: pd.DataFrame | JobColumns, global_median_s: float) -> np.ndarray:
    """Base of the duration model in log seconds: the time limit where there is one, else the median.

    The boosters learn ``log(duration) - offset``. Anchoring at the limit makes "runs until the
    scheduler stops it" an exact prediction (a ratio of 1), which a plain log-duration target cannot
    express for jobs with different limits in one leaf.
    """
    limit = numeric_column(jobs, "time_limit_s")
    return np.log(np.where(limit > 0, limit, global_median_s))


def placement_slowdown(jobs: pd.DataFrame, slowdown: np.ndarray) -> np.ndarray:
    """Each job's predicted slowdown at the placement class it ran on (1 where unknown)."""
    cls = np.array([_CLASS_INDEX.get(p, -1) if isinstance(p, str) else -1 for p in object_column(jobs, "placement_class")])
    picked = slowdown[np.arange(len(jobs)), np.maximum(cls, 0)]
    return np.where(cls >= 0, picked, 1.0)


def assemble_columns(
    jobs: pd.DataFrame | JobColumns,
    quantiles_s: np.ndarray,
    memory_point: np.ndarray,
    memory_upper: np.ndarray,
    slowdown: np.ndarray,
    gpu_memory_mib: Mapping[str, float],
    *,
    model_version: str,
    fallback: bool,
    fallback_reason: str | None,
) -> dict[str, np.ndarray]:
    """The ``PREDICTION_COLUMNS`` as one array per column, in that order (shared by the bundle and the
    fallback; ``assemble_frame`` is the same as a table)."""
    limit = numeric_column(jobs, "time_limit_s")
    q = np.where(np.isfinite(limit[:, None]) & (limit[:, None] > 0), np.minimum(quantiles_s, limit[:, None]), quantiles_s)
    gpus = numeric_column(jobs, "num_gpus")
    no_gpu = gpus == 0
    point = np.where(no_gpu, np.nan, memory_point)
    upper = np.where(no_gpu, np.nan, memory_upper)
    n = len(jobs)
    data: dict[str, np.ndarray] = {
        "job_id": object_column(jobs, "job_id").astype(str).astype(object) if n else np.array([], dtype=object),
        "duration_p10_s": q[:, 0],
        "duration_p50_s": q[:, 1],
        "duration_p90_s": q[:, 2],
        "peak_vram_mib": point,
        "peak_vram_upper_mib": upper,
        # rule *fits*; a CPU job (no GPU asked) fits no GPU type
        "fits_gpu_types": np.where(no_gpu, "", np.array(fitting_types(upper, gpu_memory_mib), dtype=object)),
    }
    for j, col in enumerate(SLOWDOWN_COLUMNS):
        data[col] = slowdown[:, j]
    data["model_version"] = np.full(n, model_version, dtype=object)
    data["fallback"] = np.full(n, fallback, dtype=bool)
    data["fallback_reason"] = np.full(n, fallback_reason, dtype=object)
    return data


def assemble_frame(
    jobs: pd.DataFrame | JobColumns,
    quantiles_s: np.ndarray,
    memory_point: np.ndarray,
    memory_upper: np.ndarray,
    slowdown: np.ndarray,
    gpu_memory_mib: Mapping[str, float],
    *,
    model_version: str,
    fallback: bool,
    fallback_reason: str | None,
) -> pd.DataFrame:
    """The ``PREDICTION_COLUMNS`` frame from the parts (see ``assemble_columns``)."""
    return columns_frame(assemble_columns(jobs, quantiles_s, memory_point, memory_upper, slowdown, gpu_memory_mib,
                                          model_version=model_version, fallback=fallback,
                                          fallback_reason=fallback_reason))


def columns_frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A ``PREDICTION_COLUMNS`` table from ``assemble_columns``' arrays."""
    return pd.DataFrame(dict(columns), columns=list(PREDICTION_COLUMNS))


@dataclass
class JobPredictorBundle:
    """Duration, memory and topology estimators with their feature pipeline and history snapshot.

    Attributes
    ----------
    builder : JobFeatureBuilder
        Fitted feature pipeline (its ``version_`` is ``FEATURE_PIPELINE_VERSION`` at fit time).
    duration, memory, topology : fitted estimators
    history : HistoryStore
        Ended jobs known at training time; the serving layer copies and extends it.
    global_median_s : float
        Median duration of the training jobs (the ``global_median`` baseline and a fallback).
    version : str
        ``job-predictor/<n>`` once registered; ``unregistered`` before.
    """

    builder: JobFeatureBuilder
    duration: DurationEstimator
    memory: MemoryEstimator
    topology: TopologyEstimator
    history: HistoryStore
    global_median_s: float
    version: str = "unregistered"
    gpu_memory_mib: Mapping[str, float] = field(default_factory=lambda: dict(GPU_MEMORY_MIB))
    info: dict = field(default_factory=dict)

    @property
    def feature_pipeline_version(self) -> str:
        return self.builder.version_

    @property
    def categorical_indices(self) -> list[int]:
        return [FEATURE_NAMES.index(c) for c in CATEGORICAL_FEATURES]

    def predict_frame(
        self,
        jobs: pd.DataFrame,
        history: HistoryStore | None = None,
        now: float | None = None,
        *,
        gpu_memory_mib: Mapping[str, float] | None = None,
    ) -> pd.DataFrame:
        """Predictions for ``jobs`` with history from ``history`` (default: the bundle's snapshot).

        Parameters
        ----------
        jobs : DataFrame of shape (n_jobs, n_columns)
            Canonical job rows (only ``job_id`` is required; unknown fields are null).
        history : HistoryStore, optional
            Ended jobs as of now; the bundle's own snapshot when None.
        now : float, optional
            Epoch seconds used as ``submit_ts`` of rows without one (default: wall clock).
        gpu_memory_mib : mapping, optional
            GPU type -> memory per device (MiB) for ``fits_gpu_types``; default the bundle's table.

        Returns
        -------
        DataFrame with columns ``PREDICTION_COLUMNS``, one row per job in input order.
        """
        return columns_frame(self.predict_columns(jobs, history, now, gpu_memory_mib=gpu_memory_mib))

    def predict_columns(
        self,
        jobs: pd.DataFrame,
        history: HistoryStore | None = None,
        now: float | None = None,
        *,
        columns: Mapping[str, np.ndarray] | None = None,
        gpu_memory_mib: Mapping[str, float] | None = None,
    ) -> dict[str, np.ndarray]:
        """``predict_frame`` as one array per ``PREDICTION_COLUMNS`` column (the serving path).

        ``columns``: the same jobs as typed arrays (see ``job_view``), read instead of the frame.
        """
        if self.builder.version_ != FEATURE_PIPELINE_VERSION:
            from features.errors import InputError

            raise InputError(
                f"model {self.version} was built with feature pipeline {self.builder.version_}; this code runs "
                f"{FEATURE_PIPELINE_VERSION}: retrain it"
            )
        cols = job_view(jobs, now, columns)
        store = self.history if history is None else history
        return self._predict(cols, store.state_for(cols), gpu_memory_mib)

    def predict_with_state(
        self, jobs: pd.DataFrame | JobColumns, state: HistoryState, *,
        gpu_memory_mib: Mapping[str, float] | None = None,
    ) -> pd.DataFrame:
        """``predict_frame`` with a given history state (point-in-time evaluation, replay)."""
        jobs = jobs if isinstance(jobs, JobColumns) else JobColumns(jobs)
        return columns_frame(self._predict(jobs, state, gpu_memory_mib))

    def _predict(self, jobs: JobColumns, state: HistoryState,
                 gpu_memory_mib: Mapping[str, float] | None) -> dict[str, np.ndarray]:
        table = self.gpu_memory_mib if gpu_memory_mib is None else gpu_memory_mib
        X = self.builder.transform_array(jobs, state)
        quantiles = np.exp(self.duration.predict_log(X) + duration_offset(jobs, self.global_median_s)[:, None])
        parts = analytic_memory(jobs, table)
        point, upper = self.predict_memory(jobs, X, parts, table)
        slowdown = self.topology.predict(jobs)
        return assemble_columns(jobs, quantiles, point, upper, slowdown, table, model_version=self.version,
                                fallback=False, fallback_reason=None)

    def predict_memory(self, jobs: pd.DataFrame, X: np.ndarray, parts: MemoryParts,
                       table: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Corrected point estimate and upper bound of peak memory per GPU (MiB)."""
        cap = np.fromiter((table.get(t, np.nan) if isinstance(t, str) else np.nan
                           for t in object_column(jobs, "gpu_type")), "float64", len(jobs))
        return self.memory.predict(memory_design(X, parts, cap), parts["total"], parts["upper"])
