"""Serving fixtures: tokens for each role, settings on a tmp SQLite store, an in-process app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from features.schema import PLACEMENT_CLASSES
from models.prediction import PREDICTION_COLUMNS
from predictor.config import Settings, TokenSpec
from predictor.model_slot import ModelSlot
from serving.app import create_app
from serving.service import build_service

TOKENS = {
    "admin": TokenSpec(name="ops", role="admin", token="admin-token-0123456789"),
    "scheduler": TokenSpec(name="slurm-webhook", role="scheduler", token="sched-token-0123456789"),
    "nlp": TokenSpec(name="alice", role="member", team="nlp", token="nlp-token-0123456789"),
    "vision": TokenSpec(name="bob", role="member", team="vision", token="vision-token-0123456789"),
}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who].token}"}


class TimeLimitPredictor:
    """Test predictor: half the time limit (or an hour) as p50; 20 GiB per GPU."""

    def predict_frame(self, jobs: pd.DataFrame, history: object, now: float) -> pd.DataFrame:
        limit = jobs["time_limit_s"].to_numpy(dtype=float)
        p50 = np.where(np.isfinite(limit), limit / 2, 3600.0)
        out = pd.DataFrame({"job_id": jobs["job_id"].to_numpy(dtype=object), "duration_p10_s": p50 / 2,
                            "duration_p50_s": p50, "duration_p90_s": p50 * 2, "peak_vram_mib": 20_000.0,
                            "peak_vram_upper_mib": 24_000.0, "fits_gpu_types": "A100-80GB"})
        for i, c in enumerate(PLACEMENT_CLASSES):
            out[f"slowdown_{c}"] = 1.0 + 0.1 * i
        out["model_version"] = "fallback"
        out["fallback"] = True
        out["fallback_reason"] = None
        return out[list(PREDICTION_COLUMNS)]


def no_model_slot() -> ModelSlot:
    return ModelSlot(uri="models:/job-predictor@champion", resolve=lambda: None, load=lambda v: None,
                     fallback=TimeLimitPredictor(), poll_s=3600)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'state.db'}",
                    mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                    tokens=list(TOKENS.values()), stream_poll_s=0.05, max_body_bytes=64 * 1024)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    service = build_service(settings, model=no_model_slot())
    with TestClient(create_app(service=service)) as c:
        c.service = service  # type: ignore[attr-defined]
        yield c
