"""Metric definitions, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from models.metrics import interval_metrics, point_metrics, reservation_metrics


def test_point_metrics_by_hand() -> None:
    pred = np.array([100.0, 200.0, 50.0, 1000.0])
    actual = np.array([100.0, 100.0, 100.0, 100.0])
    m = point_metrics(pred, actual)
    assert m["n"] == 4
    assert m["mae"] == pytest.approx((0 + 100 + 50 + 900) / 4)
    assert m["median_ae"] == pytest.approx(75.0)
    assert m["mean_abs_log_ratio"] == pytest.approx((0 + np.log(2) + np.log(2) + np.log(10)) / 4)
    assert m["within_10pct"] == pytest.approx(0.25)
    assert m["within_50pct"] == pytest.approx(0.5)  # 100 and 50 (exactly -50 %)
    assert m["within_2x"] == pytest.approx(0.75)


def test_r2_is_one_for_exact_and_zero_for_the_mean() -> None:
    actual = np.array([10.0, 100.0, 1000.0])
    assert point_metrics(actual, actual)["r2"] == pytest.approx(1.0)
    geo_mean = np.exp(np.log(actual).mean())
    assert point_metrics(np.full(3, geo_mean), actual)["r2"] == pytest.approx(0.0, abs=1e-12)


def test_durations_are_floored_at_one_second() -> None:
    assert point_metrics(np.array([0.0]), np.array([0.5]))["mean_abs_log_ratio"] == 0.0


@pytest.mark.parametrize(
    ("lower", "upper", "coverage", "width"),
    [([90, 50], [110, 150], 1.0, (0.2 + 1.0) / 2), ([101, 0], [200, 99], 0.0, (0.99 + 0.99) / 2)],
    ids=["inside", "outside"],
)
def test_interval_metrics(lower, upper, coverage, width) -> None:
    m = interval_metrics(np.array(lower, float), np.array(upper, float), np.array([100.0, 100.0]))
    assert m["coverage"] == pytest.approx(coverage)
    assert m["mean_width_ratio"] == pytest.approx(width)


def test_reservation_metrics() -> None:
    m = reservation_metrics(np.array([120.0, 90.0]), np.array([100.0, 100.0]))
    assert m["underestimate_rate"] == pytest.approx(0.5)
    assert m["mean_overreserve_ratio"] == pytest.approx((0.2 + 0.0) / 2)


def test_empty_input_is_absent() -> None:
    assert point_metrics(np.array([]), np.array([]))["n"] == 0
