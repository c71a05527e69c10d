"""Thin helpers around LightGBM boosters: one place for defaults, fitting and fast prediction.

Threads: boosters train on one thread unless ``BoosterParams.num_threads`` says otherwise. On a
host where another process holds a core (a scheduler node, CI, the machine these figures were
measured on), LightGBM's OpenMP barriers wait for a descheduled thread at every split: two threads
ran 10-20x *slower* than one there (HPC2N duration model: 10 s on one thread, 105-200 s on two).
Where cores are dedicated, ``num_threads=0`` (all cores) is faster.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

# OpenMP threads that spin while waiting turn a busy machine (a scheduler host, CI, a laptop) into a
# 5-10x slowdown for multi-threaded training; sleeping waiters cost little. Set before libgomp loads
# (an explicit OMP_WAIT_POLICY from the environment wins).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import lightgbm as lgb  # noqa: E402
import numpy as np  # noqa: E402

from models.compiled import compiled_for  # noqa: E402

__all__ = ["BoosterParams", "train_booster", "predict_booster", "welsch_objective"]


@dataclass(frozen=True)
class BoosterParams:
    """Gradient boosting settings shared by the estimators (LightGBM parameter names)."""

    n_estimators: int = 300
    learning_rate: float = 0.06
    num_leaves: int = 31
    min_child_samples: int = 40
    feature_fraction: float = 0.85
    bagging_fraction: float = 0.8
    lambda_l2: float = 1.0
    max_bin: int = 127
    num_threads: int = 1  # 1 by default (see the module docstring); 0 = all cores
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def lgb_params(self, objective: str, **overrides: object) -> dict:
        params = {
            "objective": objective,
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_child_samples": self.min_child_samples,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "bagging_freq": 1 if self.bagging_fraction < 1.0 else 0,
            "lambda_l2": self.lambda_l2,
            "max_bin": self.max_bin,
            "num_threads": self.num_threads,
            "seed": self.seed,
            "deterministic": True,
            "verbosity": -1,
        }
        params.update(self.extra)
        params.update(overrides)
        return params


def train_booster(
    X: np.ndarray,
    y: np.ndarray,
    params: BoosterParams,
    objective: str,
    *,
    weight: np.ndarray | None = None,
    feature_names: Sequence[str] | None = None,
    categorical: Sequence[int] = (),
    init_score: np.ndarray | None = None,
    **overrides: object,
) -> lgb.Booster:
    """Train one booster on ``X`` (n, d) and ``y`` (n,); returns the LightGBM Booster."""
    data = lgb.Dataset(
        X,
        label=y,
        weight=weight,
        init_score=init_score,
        feature_name=list(feature_names) if feature_names is not None else "auto",
        categorical_feature=list(categorical) if categorical else "auto",
        free_raw_data=True,
        params={"max_bin": params.max_bin, "verbosity": -1},
    )
    return lgb.train(params.lgb_params(objective, **overrides), data, num_boost_round=params.n_estimators)


def predict_booster(booster: lgb.Booster, X: np.ndarray) -> np.ndarray:
    """Predict on one thread: no thread start-up per small serving batch, no barrier stalls (above).

    With the booster's compiled form (``models.compiled``: built once when a served model loads) the
    native code predicts; otherwise LightGBM does.
    """
    fast = compiled_for(booster)
    if fast is not None:
        return fast.predict(X)
    return booster.predict(X, num_threads=1)


def welsch_objective(scale: float):
    """Welsch (redescending) loss ``scale^2 / 2 (1 - exp(-(r / scale)^2))`` as a LightGBM objective.

    A robust, mode-seeking point estimate: residuals far beyond ``scale`` stop pulling. Started at
    zero (no ``boost_from_average`` for a custom objective), it moves a good starting point (an
    anchor subtracted from the label) towards where most jobs are, instead of towards the median
    of a wide, many-peaked distribution. The hessian is the IRLS weight ``exp(-(r / scale)^2)``
    (floored), which keeps Newton steps positive.
    """

    def objective(preds: np.ndarray, data: lgb.Dataset) -> tuple[np.ndarray, np.ndarray]:
        r = preds - data.get_label()
        w = np.exp(-((r / scale) ** 2))
        weight = data.get_weight()
        grad, hess = r * w, np.maximum(w, 1e-3)
        if weight is not None:
            grad, hess = grad * weight, hess * weight
        return grad, hess

    return objective
