"""Synthetic tables shared by the synth tests (generated once per session; each takes about a second)."""

from __future__ import annotations

import pandas as pd
import pytest

from features.synth import generate


@pytest.fixture(scope="session")
def philly_20k() -> pd.DataFrame:
    """20,000 jobs of the default profile, seed 0, span set by the published arrival rate."""
    return generate(20_000, seed=0)


@pytest.fixture(scope="session")
def loaded_cluster() -> tuple[pd.DataFrame, int, float]:
    """10,000 jobs stretched for a 128-GPU cluster at 70 % offered load."""
    return generate(10_000, seed=3, cluster_gpus=128, target_load=0.7), 128, 0.7
