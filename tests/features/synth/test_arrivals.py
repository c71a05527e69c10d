"""Arrivals and queue waits."""

from __future__ import annotations

import numpy as np
import pytest

from features.synth import TIERS, get_profile
from features.synth.arrivals import arrival_times, intensity, queue_waits

MONDAY = 1_735_516_800.0  # 2024-12-30T00:00:00Z


@pytest.mark.parametrize(("offset_h", "expected"), [(15, 1.5), (3, 0.5), (24 * 5 + 15, 0.9), (24 * 6 + 3, 0.275)],
                         ids=["mon-15h", "mon-03h", "sat-15h", "sun-03h"])
def test_intensity_is_diurnal_and_weekly(offset_h, expected):
    assert intensity(np.array([MONDAY + offset_h * 3600.0]))[0] == pytest.approx(expected)


def test_arrivals_fill_the_span_and_follow_intensity():
    rng = np.random.default_rng(0)
    n, n_fam = 50_000, 1_000
    fam = rng.integers(0, n_fam, n)
    span = 180 * 86400.0
    t = arrival_times(rng, fam, n_fam, np.ones(n, dtype=bool), MONDAY, span)
    assert t.min() >= MONDAY and t.max() <= MONDAY + span
    hours = ((t - MONDAY) % 86400) // 3600
    assert np.mean(hours == 15) > 2.5 * np.mean(hours == 3)
    # a recurring family is active for weeks (median 21 days), not the whole trace
    spread = [np.ptp(t[fam == f]) for f in range(100)]
    assert np.median(spread) < 60 * 86400.0


def test_one_off_jobs_are_spread_uniformly_in_effective_time():
    rng = np.random.default_rng(1)
    n = 20_000
    t = arrival_times(rng, np.arange(n), n, np.zeros(n, dtype=bool), MONDAY, 7 * 86400.0)
    weekdays = np.mean(t < MONDAY + 5 * 86400)
    assert weekdays == pytest.approx(5 / (5 + 0.6 + 0.55), abs=0.02)


def test_waits_are_zero_for_some_and_longer_for_big_gangs_and_low_tiers():
    p = get_profile("philly")
    rng = np.random.default_rng(2)
    n = 40_000
    submit = np.full(n, MONDAY + 15 * 3600.0)
    research = np.full(n, TIERS.index("research"))
    one = queue_waits(rng, np.ones(n), research, submit, p)
    big = queue_waits(rng, np.full(n, 64.0), research, submit, p)
    sla = queue_waits(rng, np.ones(n), np.full(n, TIERS.index("sla")), submit, p)
    assert np.mean(one == 0) == pytest.approx(p.wait_zero_share, abs=0.01)
    assert (one >= 0).all() and np.all(one == np.round(one))
    assert np.median(big[big > 0]) > 2 * np.median(one[one > 0]) > 2 * np.median(sla[sla > 0])
