"""Trained predictions for a replay, never from the future.

:class:`TrainedPredictions` fits ``models.fit.fit_bundle`` (plain Python, no MLflow) only on jobs
that had **ended** before the replayed period starts, and predicts each replayed job with
point-in-time history features: ``features.history.history_state`` against the ended jobs of the
whole input, of which a job only sees those that ended before its own submit time. With
``retrain_every_s`` the replayed period is cut into windows of that length; at the start of each
window the bundle is refit on every job that had ended by then, and predicts that window's jobs.

Only canonical columns reach the models: ground-truth columns of a synthetic table
(``true_duration_s``, ``true_slowdown_*``...) are dropped before fitting and predicting, so the
trained policy cannot see the truth the replay runs on.

When fewer than ``MIN_TRAIN_JOBS`` jobs with a run time have ended before a window, the analytic
fallback (``models.fallback``) answers for that window, flagged ``fallback=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from features.history import ended_events, history_state
from features.schema import COLUMNS
from predictor.capacity.inventory import Inventory
from predictor.sim.predictions import PredictionTable
from predictor.sim.workload import JobTable

__all__ = ["TrainedPredictions", "MIN_TRAIN_JOBS"]

#: ``fit_bundle`` needs this many jobs with a positive run time.
MIN_TRAIN_JOBS = 20


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.loc[:, [c for c in COLUMNS if c in frame.columns]]


@dataclass
class TrainedPredictions:
    """Predictions from models trained on the past of the replay (see the module docstring).

    Parameters
    ----------
    history : DataFrame
        Every job of the input, canonical columns (extras are dropped).
    train : DataFrame
        The jobs of the training prefix that ended before ``split_ts``.
    split_ts : float or None
        Start of the replayed period (None: the whole input is replayed, only the fallback can answer
        the first window).
    retrain_every_s : float, optional
        Refit period (seconds of the replay).
    on_phase : callable, optional
        Progress messages.
    fit_options : dict, optional
        Keyword arguments for ``fit_bundle`` (e.g. lighter ``duration_params``).
    """

    history: pd.DataFrame
    train: pd.DataFrame
    split_ts: float | None
    retrain_every_s: float | None = None
    on_phase: Callable[[str], None] | None = None
    fit_options: dict = field(default_factory=dict)
    name: str = "trained"
    oracle: bool = False
    fits: list[dict] = field(default_factory=list)  # one entry per window: when, on how many jobs, version

    def predict(self, jobs: JobTable, inventory: Inventory) -> PredictionTable:
        say = self.on_phase or (lambda _m: None)
        canon = _canonical(self.history)
        events = ended_events(canon)
        memory = {name: float(t.memory_mib) for name, t in inventory.gpu_types.items()}
        query = _canonical(jobs.frame).reset_index(drop=True)
        submit = query["submit_ts"].to_numpy(dtype="float64")
        edges = self._window_starts(submit)
        window = np.searchsorted(edges, submit, side="right") - 1
        parts: list[pd.DataFrame] = []
        index: list[np.ndarray] = []
        for w, start in enumerate(edges):
            rows = np.flatnonzero(window == w)
            if len(rows) == 0:
                continue
            train = self.train if w == 0 else canon.loc[canon["end_ts"].notna() & (canon["end_ts"] < start)]
            q = query.iloc[rows].reset_index(drop=True)
            parts.append(self._predict_window(train, q, events, memory, start, say))
            index.append(rows)
        frame = pd.concat(parts, ignore_index=True)
        order = np.argsort(np.concatenate(index), kind="stable")
        frame = frame.iloc[order].reset_index(drop=True)
        versions = sorted({f["model_version"] for f in self.fits})
        return PredictionTable.from_frame(frame, source=f"trained ({', '.join(versions)})")

    def _window_starts(self, submit: np.ndarray) -> np.ndarray:
        first = float(submit.min()) if self.split_ts is None else min(float(self.split_ts), float(submit.min()))
        if self.retrain_every_s is None:
            return np.array([first])
        n = int(np.floor((float(submit.max()) - first) / self.retrain_every_s)) + 1
        return first + np.arange(n) * self.retrain_every_s

    def _predict_window(self, train: pd.DataFrame, q: pd.DataFrame, events: pd.DataFrame,
                        memory: dict[str, float], start: float, say: Callable[[str], None]) -> pd.DataFrame:
        dur = pd.to_numeric(train["duration_s"], errors="coerce") if len(train) else pd.Series(dtype=float)
        usable = int((dur > 0).sum())
        if usable < MIN_TRAIN_JOBS:
            from models.fallback import FallbackPredictor

            say(f"only {usable} jobs had ended before the replay window: analytic fallback predicts it")
            out = FallbackPredictor().predict_frame(q, None, start)
            self.fits.append({"window_start_ts": start, "train_jobs": usable, "model_version": "fallback"})
            return out.assign(fallback=True, fallback_reason=f"{usable} training jobs ended before the window")
        from models.fit import fit_bundle

        say(f"training on {len(train):,} jobs that ended before the replay window")
        bundle = fit_bundle(_canonical(train), **self.fit_options)
        state = history_state(q, events)  # each job sees the jobs that ended before its submit time
        out = bundle.predict_with_state(q, state, gpu_memory_mib=memory)
        version = f"fit-on-{len(train)}-ended-before-{start:.0f}"
        self.fits.append({"window_start_ts": start, "train_jobs": len(train), "model_version": version})
        return out.assign(model_version=version)
