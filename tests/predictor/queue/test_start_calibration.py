"""Rule *calibrated interval* (``predictor.queue.start_calibration``): factors learnt from past misses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.queue.start_calibration import StartCalibration


def _feed(cal: StartCalibration, rng: np.random.Generator, n: int, early: float, late: float) -> None:
    """Jobs whose raw interval is [now + 100, now + 1000] but whose waits run ``early`` / ``late`` x."""
    for _ in range(n):
        wait = float(np.exp(rng.uniform(np.log(100 * early), np.log(1000 * late))))
        cal.observe(0.0, 100.0, 1000.0, wait)


def test_uncalibrated_until_min_samples_then_factors_cover_the_target() -> None:
    rng = np.random.default_rng(0)
    cal = StartCalibration(min_samples=50, refresh_every=1)
    _feed(cal, rng, 49, early=0.2, late=3.0)
    assert cal.factors == (1.0, 1.0) and not cal.calibrated
    lo, hi = cal.apply(0.0, np.array([100.0]), np.array([400.0]), np.array([1000.0]))
    assert lo[0] == 100.0 and hi[0] == 1000.0
    _feed(cal, rng, 1951, early=0.2, late=3.0)
    assert cal.calibrated
    f_lo, f_hi = cal.factors
    assert f_lo < 1.0 < f_hi  # the raw interval was too narrow on both sides: it widens
    # on fresh jobs drawn the same way, the calibrated interval covers ~80 %
    waits = np.exp(rng.uniform(np.log(20.0), np.log(3000.0), 20_000))
    lo, hi = cal.apply(0.0, np.full(len(waits), 100.0), np.full(len(waits), 400.0), np.full(len(waits), 1000.0))
    covered = np.mean((waits >= lo) & (waits <= hi))
    assert covered == pytest.approx(0.8, abs=0.03)
    assert np.mean(waits < lo) == pytest.approx(0.1, abs=0.02)


def test_a_too_wide_interval_is_narrowed_and_never_crosses_the_p50() -> None:
    rng = np.random.default_rng(1)
    cal = StartCalibration(min_samples=20, refresh_every=1)
    for _ in range(500):  # every job starts between 450 and 550 s: the raw [100, 1000] is far too wide
        cal.observe(0.0, 100.0, 1000.0, float(rng.uniform(450.0, 550.0)))
    f_lo, f_hi = cal.factors
    assert f_lo > 1.0 and f_hi < 1.0
    lo, hi = cal.apply(0.0, np.array([100.0, 100.0]), np.array([500.0, 200.0]), np.array([1000.0, 1000.0]))
    assert lo[0] == pytest.approx(100.0 * f_lo) and hi[0] == pytest.approx(1000.0 * f_hi)
    assert lo[1] <= 200.0 <= hi[1]  # p10 <= p50 <= p90 is kept


def test_jobs_estimated_to_start_at_once_and_unknowns_say_nothing() -> None:
    cal = StartCalibration(min_samples=1, refresh_every=1)
    cal.observe(10.0, 10.0, 10.0, 50.0)  # p90 wait 0: the plan started it
    cal.observe(10.0, 20.0, float("inf"), 50.0)  # never expected to start
    assert cal.observed == 0
    cal.observe(10.0, 10.0, 110.0, 60.0)  # p10 wait 0: only the p90 side learns
    assert cal.observed == 1 and cal.factors == (1.0, 0.5)


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e7)),
                min_size=1, max_size=60),
       st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6))
def test_calibrated_intervals_stay_ordered(obs, a, b, c) -> None:  # noqa: ANN001
    cal = StartCalibration(min_samples=1, refresh_every=1)
    for w10, _w50, w90, wait in obs:
        w10, w90 = sorted((w10, w90))
        cal.observe(1000.0, 1000.0 + w10, 1000.0 + w90, 1000.0 + wait)
    p10, p50, p90 = sorted((a, b, c))
    lo, hi = cal.apply(0.0, np.array([p10, np.nan]), np.array([p50, np.nan]), np.array([p90, np.nan]))
    assert 0.0 <= lo[0] <= p50 <= hi[0]
    assert np.isnan(lo[1]) and np.isnan(hi[1])


def test_calibrated_says_whether_the_factors_in_force_come_from_enough_starts() -> None:
    cal = StartCalibration(min_samples=5, refresh_every=4)
    for wait in (10.0, 20.0, 30.0, 40.0, 50.0):  # 5 samples, but the factors were last computed at 4
        cal.observe(0.0, 100.0, 1000.0, wait)
    assert cal.factors == (1.0, 1.0) and not cal.calibrated and cal.doc()["samples"] == 5
    for wait in (60.0, 70.0, 80.0):  # the 8th observation recomputes them from 8 ratios
        cal.observe(0.0, 100.0, 1000.0, wait)
    assert cal.calibrated and cal.factors != (1.0, 1.0)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="lower"):
        StartCalibration(lower=0.9, upper=0.1)
    with pytest.raises(ValueError, match=">= 1"):
        StartCalibration(window=0)
