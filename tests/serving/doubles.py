"""Predictors for tests: the real fallback behind a registry with no model, and a stand-in for
registered model versions in the unit tests of the reload mechanics (tests/predictor/engine/test_model_slot.py),
which need many cheap predictors that each say which version they are (half the time limit as p50,
20 GiB per GPU, placement slowdown 1.0, 1.1, ... 1.4). Real trained versions behind a real MLflow
registry are swapped in tests/serving/test_hot_reload.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.schema import PLACEMENT_CLASSES
from models.fallback import FallbackPredictor
from models.prediction import PREDICTION_COLUMNS
from predictor.engine.model_slot import ModelSlot


class TimeLimitPredictor:
    def __init__(self, version: str) -> None:
        self.version = version

    def predict_frame(self, jobs: pd.DataFrame, history: object, now: float) -> pd.DataFrame:
        limit = jobs["time_limit_s"].to_numpy(dtype=float)
        p50 = np.where(np.isfinite(limit), limit / 2, 3600.0)
        out = pd.DataFrame({"job_id": jobs["job_id"].to_numpy(dtype=object), "duration_p10_s": p50 / 2,
                            "duration_p50_s": p50, "duration_p90_s": p50 * 2, "peak_vram_mib": 20_000.0,
                            "peak_vram_upper_mib": 24_000.0, "fits_gpu_types": "A100-80GB"})
        for i, c in enumerate(PLACEMENT_CLASSES):
            out[f"slowdown_{c}"] = 1.0 + 0.1 * i
        out["model_version"] = self.version
        out["fallback"] = self.version == "fallback"
        out["fallback_reason"] = None
        return out[list(PREDICTION_COLUMNS)]


def no_model_slot() -> ModelSlot:
    """A slot whose registry holds no model: the real analytic fallback answers."""
    return ModelSlot(uri="models:/job-predictor@champion", resolve=lambda: None, load=lambda v: None,
                     fallback=FallbackPredictor(), poll_s=3600)
