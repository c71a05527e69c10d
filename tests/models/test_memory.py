"""Memory correction, its conformal upper bound, and which GPU types a job fits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.lgbm import BoosterParams
from models.memory import UNMEASURED_MARGIN, MemoryEstimator, fitting_types, measured_peaks

FAST = BoosterParams(n_estimators=60, num_leaves=7, min_child_samples=10, num_threads=1)


def measured(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Analytic estimates that are 30 % low for kind 1 jobs, exact for kind 0, with 3 % noise."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 2, n).astype(float)
    analytic = rng.uniform(2_000, 70_000, n)
    actual = analytic * np.where(kind == 1, 1.3, 1.0) * np.exp(rng.normal(0, 0.03, n))
    return kind[:, None], analytic, actual


def test_learned_correction_removes_a_systematic_bias() -> None:
    Z, analytic, actual = measured(3000, 1)
    Z_cal, a_cal, y_cal = measured(1500, 2)
    Z_test, a_test, y_test = measured(3000, 3)
    est = MemoryEstimator(params=FAST).fit(Z, analytic, actual, Z_cal=Z_cal, analytic_cal=a_cal, actual_cal=y_cal)
    point, upper = est.predict(Z_test, a_test)
    assert np.median(np.abs(np.log(point / y_test))) < 0.04
    assert np.mean(y_test > upper) <= 0.07
    assert np.mean(upper / y_test - 1) < 0.15
    assert est.n_calibration_ == 1500


def test_few_measurements_give_a_constant_correction() -> None:
    Z, analytic, actual = measured(20, 4)
    est = MemoryEstimator(params=FAST).fit(Z, analytic, actual)
    assert est.median_booster_ is None
    point, _ = est.predict(Z, analytic)
    assert np.allclose(point / analytic, np.exp(est.const_median_))


def test_no_measurements_keep_the_analytic_estimate_and_its_bound() -> None:
    Z, analytic, _ = measured(10, 5)
    est = MemoryEstimator().fit(Z, analytic, np.full(10, np.nan))
    point, upper = est.predict(Z, analytic)
    assert np.allclose(point, analytic) and np.allclose(upper, analytic * UNMEASURED_MARGIN)
    prior_upper = analytic * 1.7
    point, upper = est.predict(Z, analytic, prior_upper)
    assert np.allclose(point, analytic) and np.allclose(upper, prior_upper)


def test_a_few_measurements_never_lower_the_analytic_bound() -> None:
    Z, analytic, actual = measured(20, 8)
    est = MemoryEstimator(params=FAST).fit(Z, analytic, actual * 0.5)  # a cluster whose runs peak low
    point, upper = est.predict(Z, analytic, analytic * 1.6)
    assert np.all(point < analytic) and np.all(upper >= analytic * 1.6)


def test_measured_peaks_leave_out_synthetic_and_out_of_memory_rows() -> None:
    jobs = pd.DataFrame({"peak_vram_mib": [1000.0, 2000.0, 3000.0, np.nan],
                         "state": ["COMPLETED", "OUT_OF_MEMORY", "COMPLETED", "COMPLETED"],
                         "source": ["sacct", "sacct", "synth:philly", "sacct"]})
    assert np.allclose(measured_peaks(jobs), [1000.0, np.nan, np.nan, np.nan], equal_nan=True)
    assert np.allclose(measured_peaks(jobs, include_synthetic=True), [1000.0, np.nan, 3000.0, np.nan], equal_nan=True)


def test_unknown_analytic_estimate_gives_no_prediction() -> None:
    Z, analytic, actual = measured(100, 6)
    est = MemoryEstimator(params=FAST).fit(Z, analytic, actual)
    point, upper = est.predict(Z[:2], np.array([np.nan, 1000.0]))
    assert np.isnan(point[0]) and np.isnan(upper[0]) and np.isfinite(point[1])


@pytest.mark.parametrize(
    ("upper", "expected"),
    [(10_000.0, "A,B"), (20_000.0, "B"), (50_000.0, ""), (np.nan, "A,B")],
    ids=["both", "bigger-only", "none", "unknown"],
)
def test_fitting_types(upper: float, expected: str) -> None:
    assert fitting_types(np.array([upper]), {"B": 40_000, "A": 16_000}) == [expected]
