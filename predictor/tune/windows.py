"""The tuning split: the history cut by submit time into a training part, a tuning window and a
validation window.

The split (documented once here)
--------------------------------
Jobs are ordered by submit time. The first ``train_fraction`` of them (default 30 %) train the
predictor, exactly as ``predictor.sim.experiment.split_history`` does for ``predictor simulate``:
only those that had *ended* before the tuning window starts are fit on. The next jobs, up to the
last ``validate_fraction`` (default 30 %), are the *tuning window*: every trial replays them. The
last ``validate_fraction`` are the *validation window*: the chosen policy and the baselines are
replayed on it once the search has ended. A trial never sees it: its jobs are sent to the workers
only after the last trial.

Both windows are predicted by the one model trained on the first part, each job from the history of
jobs that ended before its own submit time (point-in-time features, ``predictor.sim.trained``).
Each window's replay starts from an empty cluster at its first submission, as ``simulate`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from features.errors import InputError
from predictor.capacity.inventory import Inventory
from predictor.sim.experiment import split_history
from predictor.sim.predictions import NoPredictions, OraclePredictions, PredictionTable
from predictor.sim.trained import TrainedPredictions
from predictor.sim.workload import JobTable, load_workload, requests_on_inventory

__all__ = ["Window", "TuningSplit", "split_windows", "PREDICTION_KINDS"]

#: What a policy can be told about jobs: a trained model's predictions, the truth, nothing.
PREDICTION_KINDS: tuple[str, ...] = ("trained", "oracle", "none")


@dataclass(frozen=True)
class Window:
    """A replayed window: its jobs (``JobTable``) and what each prediction kind tells about them."""

    name: str
    jobs: JobTable
    predictions: Mapping[str, PredictionTable]

    @property
    def first_submit_ts(self) -> float:
        return float(self.jobs.origin_ts)

    @property
    def last_submit_ts(self) -> float:
        return float(self.jobs.origin_ts + self.jobs.submit_s[-1])


@dataclass(frozen=True)
class TuningSplit:
    """Where the history was cut, and how many jobs each part has (``describe`` prints it)."""

    jobs_in_input: int
    training_jobs: int  # jobs submitted before the tuning window
    training_jobs_ended: int  # of those, the ones the predictor is fit on
    tune_start_ts: float
    validate_start_ts: float
    tune_jobs: int
    validate_jobs: int
    skipped: Mapping[str, int]
    gpu_requests_replayed_on_any_type: Mapping[str, int]
    trained_models: tuple[dict, ...]

    def describe(self) -> list[str]:
        """Lines for the terminal: the three parts with their sizes and time ranges."""
        def when(ts: float) -> str:
            return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

        lines = [
            f"split of {self.jobs_in_input:,} jobs by submit time:",
            f"  train     {self.training_jobs:,} jobs submitted before {when(self.tune_start_ts)} "
            f"({self.training_jobs_ended:,} of them ended by then and fit the predictor)",
            f"  tune      {self.tune_jobs:,} jobs from {when(self.tune_start_ts)} (every trial replays them)",
            f"  validate  {self.validate_jobs:,} jobs from {when(self.validate_start_ts)} (never seen by a trial)",
        ]
        if self.skipped:
            lines.append("  not replayed: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(self.skipped.items())))
        if self.gpu_requests_replayed_on_any_type:
            lines.append("  GPU types the inventory lacks, replayed on any type: " + ", ".join(
                f"{k}: {v:,}" for k, v in sorted(self.gpu_requests_replayed_on_any_type.items())))
        return lines

    def as_dict(self) -> dict:
        return {"jobs_in_input": self.jobs_in_input, "training_jobs": self.training_jobs,
                "training_jobs_ended": self.training_jobs_ended, "tune_start_ts": self.tune_start_ts,
                "validate_start_ts": self.validate_start_ts, "tune_jobs": self.tune_jobs,
                "validate_jobs": self.validate_jobs, "jobs_skipped": dict(self.skipped),
                "gpu_requests_replayed_on_any_type": dict(self.gpu_requests_replayed_on_any_type),
                "trained_models": list(self.trained_models)}


def _rows(pred: PredictionTable, rows: np.ndarray) -> PredictionTable:
    """The predictions of the given rows (same source)."""
    values = {f.name: getattr(pred, f.name) for f in fields(pred)}
    return PredictionTable(**{k: (v[rows] if isinstance(v, np.ndarray) else v) for k, v in values.items()})


def check_fractions(train_fraction: float, validate_fraction: float) -> None:
    """``InputError`` unless both fractions leave a tuning window between them."""
    if not 0.0 <= train_fraction < 1.0:
        raise InputError(f"--train-fraction must be in [0, 1), got {train_fraction}")
    if not 0.0 < validate_fraction < 1.0:
        raise InputError(f"--validate-fraction must be in (0, 1), got {validate_fraction}")
    if train_fraction + validate_fraction >= 1.0:
        raise InputError(f"--train-fraction {train_fraction} + --validate-fraction {validate_fraction} leave no "
                         "tuning window (their sum must be below 1)")


def split_windows(jobs: pd.DataFrame, inventory: Inventory, *, train_fraction: float = 0.3,
                  validate_fraction: float = 0.3, fit_options: dict | None = None,
                  on_phase: Callable[[str], None] | None = None) -> tuple[TuningSplit, Window, Window]:
    """Cut ``jobs`` into train | tune | validate (module docstring), fit the predictor on the first
    part and predict both windows with it.

    Returns
    -------
    split : TuningSplit
    tune, validate : Window
        Each with ``trained``, ``oracle`` and ``none`` predictions.

    Raises
    ------
    InputError
        Bad fractions, or a part with no replayable job.
    """
    check_fractions(train_fraction, validate_fraction)
    say = on_phase or (lambda _m: None)
    head = split_history(jobs, train_fraction)
    ordered = head.history
    cut = int(math.floor((1.0 - validate_fraction) * len(ordered)))
    if cut >= len(ordered):
        raise InputError(f"a {validate_fraction:.0%} validation window of {len(ordered)} jobs is empty")
    validate_ts = float(ordered["submit_ts"].iloc[cut])
    replayed, any_type = requests_on_inventory(head.replayed, inventory)
    both, _ = load_workload(replayed)
    submit = both.frame["submit_ts"].to_numpy(dtype="float64")
    tune_rows = np.flatnonzero(submit < validate_ts)
    validate_rows = np.flatnonzero(submit >= validate_ts)
    if len(tune_rows) == 0 or len(validate_rows) == 0:
        part = "tuning" if len(tune_rows) == 0 else "validation"
        raise InputError(f"the {part} window has no replayable job (train {train_fraction:.0%}, validate "
                         f"{validate_fraction:.0%} of {len(ordered)} jobs); change the fractions")
    trained = TrainedPredictions(history=head.history, train=head.train, split_ts=head.split_ts,
                                 on_phase=say, fit_options=dict(fit_options or {}))
    say(f"training the predictor and predicting {len(both):,} jobs of the tuning and validation windows")
    sources = {"trained": trained, "oracle": OraclePredictions(), "none": NoPredictions()}
    predicted = {kind: src.predict(both, inventory) for kind, src in sources.items()}
    windows = []
    for name, rows in (("tune", tune_rows), ("validate", validate_rows)):
        table, _ = load_workload(both.frame.iloc[rows].reset_index(drop=True))
        at = pd.Index(both.job_ids).get_indexer(table.job_ids)  # job ids are unique in a JobTable
        windows.append(Window(name, table, {k: _rows(p, at) for k, p in predicted.items()}))
    tune_start = float(head.split_ts) if head.split_ts is not None else windows[0].first_submit_ts
    split = TuningSplit(
        jobs_in_input=len(ordered), training_jobs=len(ordered) - len(head.replayed),
        training_jobs_ended=len(head.train), tune_start_ts=tune_start, validate_start_ts=validate_ts,
        tune_jobs=len(windows[0].jobs), validate_jobs=len(windows[1].jobs), skipped=both.skipped.counts(),
        gpu_requests_replayed_on_any_type=any_type, trained_models=tuple(trained.fits))
    return split, windows[0], windows[1]
