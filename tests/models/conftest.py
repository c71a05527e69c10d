"""Shared fixtures for the model tests: one small synthetic history and one bundle fitted on it."""

from __future__ import annotations

import pandas as pd
import pytest

from features.synth import generate
from models.bundle import JobPredictorBundle
from models.fit import fit_bundle
from models.lgbm import BoosterParams
from models.memory import MemoryEstimator

#: Small boosters: the tests check behaviour, not accuracy at scale.
FAST = BoosterParams(n_estimators=40, num_leaves=15, min_child_samples=20)


@pytest.fixture(scope="session")
def synth_jobs() -> pd.DataFrame:
    """4,000 synthetic jobs with ground truth (seed 11)."""
    return generate(4_000, seed=11)


@pytest.fixture(scope="session")
def later_jobs(synth_jobs: pd.DataFrame) -> pd.DataFrame:
    """1,000 jobs submitted after ``synth_jobs`` (a different seed: new families)."""
    return generate(1_000, seed=12, start_ts=float(synth_jobs["submit_ts"].max()) + 60.0)


@pytest.fixture(scope="session")
def bundle(synth_jobs: pd.DataFrame) -> JobPredictorBundle:
    return fit_bundle(synth_jobs, duration_params=FAST, memory_estimator=MemoryEstimator(params=FAST, learn_from_synthetic=True))
