"""Duration quantiles: censoring as lower bounds, non-crossing, conformal coverage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from models.duration import CENSORED_DRAWS, DurationEstimator, impute_censored
from models.lgbm import BoosterParams

SMALL = BoosterParams(n_estimators=60, num_leaves=15, min_child_samples=20, num_threads=1)


def simulate(n: int, seed: int, noise: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """log duration = 6 + 2 x0 - x1 + N(0, noise): true median known for every row."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    mu = 6.0 + 2.0 * X[:, 0] - X[:, 1]
    return X, mu + rng.normal(scale=noise, size=n)


@settings(max_examples=60, deadline=None)
@given(
    bound=arrays(np.float64, 5, elements=st.floats(-5, 15)),
    mu=arrays(np.float64, 5, elements=st.floats(-5, 15)),
    spread=arrays(np.float64, 5, elements=st.floats(0, 5)),
)
def test_imputed_values_respect_the_lower_bound(bound: np.ndarray, mu: np.ndarray, spread: np.ndarray) -> None:
    quantiles = np.column_stack([mu - spread, mu, mu + spread])
    values, weights = impute_censored(bound, quantiles)
    assert values.shape == (5 * CENSORED_DRAWS,) and np.all(np.isfinite(values))
    assert np.all(values >= np.repeat(bound, CENSORED_DRAWS))
    assert np.all(np.diff(values.reshape(5, CENSORED_DRAWS), axis=1) >= 0)  # stratified draws in order
    assert weights.sum() == pytest.approx(5.0)


def test_censored_jobs_used_as_lower_bounds_remove_the_bias() -> None:
    """Right-censor the longest jobs (still running at log end): the median must not shrink."""
    X, y = simulate(6000, seed=1)
    rng = np.random.default_rng(2)
    cutoff = rng.uniform(3.0, 11.0, size=len(y))  # log time each job had been running when the log ended
    censored = y > cutoff
    observed = np.where(censored, cutoff, y)
    assert 0.2 < censored.mean() < 0.5
    X_test, _ = simulate(2000, seed=3)
    true_median = 6.0 + 2.0 * X_test[:, 0] - X_test[:, 1]

    def median_error(estimator: DurationEstimator, y_fit: np.ndarray, cens: np.ndarray) -> float:
        estimator.fit(X, y_fit, cens)
        return float(np.mean(estimator.predict_log(X_test)[:, 1] - true_median))

    aware = median_error(DurationEstimator(params=SMALL, censoring_rounds=2), observed, censored)
    dropped = median_error(DurationEstimator(params=SMALL, censoring_rounds=0), observed, censored)
    as_exact = median_error(DurationEstimator(params=SMALL), observed, np.zeros(len(y), bool))
    assert dropped < -0.15 and as_exact < -0.15  # both naive treatments bias the median down
    assert abs(aware) < 0.6 * min(abs(dropped), abs(as_exact))


def test_conformal_calibration_reaches_the_target_coverage() -> None:
    """Trained where jobs were more predictable (noise 0.4) than later (0.8): CQR widens the interval."""
    X, y = simulate(5000, seed=4, noise=0.4)
    X_cal, y_cal = simulate(3000, seed=5)
    X_test, y_test = simulate(5000, seed=6)
    raw = DurationEstimator(params=SMALL, refit_on_calibration=False).fit(X, y, np.zeros(len(y), bool))
    cal = DurationEstimator(params=SMALL, refit_on_calibration=False).fit(
        X, y, np.zeros(len(y), bool), X_cal=X_cal, log_duration_cal=y_cal)

    def coverage(est: DurationEstimator) -> float:
        q = est.predict_log(X_test)
        return float(np.mean((q[:, 0] <= y_test) & (y_test <= q[:, 2])))

    assert coverage(raw) < 0.7
    assert coverage(cal) == pytest.approx(0.8, abs=0.03)
    assert cal.n_calibration_ == 3000


@settings(max_examples=20, deadline=None)
@given(shift=st.floats(-3, 3), scale=st.floats(0.1, 5))
def test_quantiles_never_cross(shift: float, scale: float) -> None:
    X, y = simulate(600, seed=7)
    est = DurationEstimator(params=BoosterParams(n_estimators=10, num_leaves=7, min_child_samples=5, num_threads=1))
    est.fit(X, y, np.zeros(len(y), bool))
    est.shift_lo_, est.shift_hi_ = -2.0, -2.0  # negative shifts would cross without rearrangement
    q = est.predict_log(X * scale + shift)
    assert np.all(np.diff(q, axis=1) >= 0)


def test_mode_point_lands_on_a_peak_where_the_median_falls_between() -> None:
    """45 % of jobs near 1 s, 45 % near e^4 s, 10 % between: the median is off by more than 2x for
    nearly every job, the Welsch point (started at 0, an anchor) is within 2x for the jobs of a peak."""
    from models.lgbm import predict_booster, train_booster, welsch_objective

    rng = np.random.default_rng(8)
    n = 4000
    part = rng.random(n)
    y = np.where(part < 0.45, 0.0, np.where(part < 0.9, 4.0, rng.uniform(1.0, 3.0, n))) + rng.normal(0, 0.1, n)
    X = rng.normal(size=(n, 2))  # nothing to learn from
    mode = predict_booster(train_booster(X, y, SMALL, welsch_objective(1.0)), X)
    median = predict_booster(train_booster(X, y, SMALL, "quantile", alpha=0.5), X)

    def within_2x(p: np.ndarray) -> float:
        return float(np.mean(np.abs(p - y) <= np.log(2.0)))

    assert within_2x(mode) > 0.4 and within_2x(median) < 0.15
