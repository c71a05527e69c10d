"""Fair-share explained (``predictor.queue.teams_view``): usage over time and recovery at current rates."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.policy.ledger import FairShareLedger
from predictor.queue.teams_view import NEUTRAL_FACTOR, decayed_usage, recovery_at_current_rates

H = 3600.0
HL = 10 * H


def test_decayed_usage_is_the_ledgers_at_any_instant() -> None:
    runs = [(0, 4.0, 0.0, 5 * H), (1, 2.0, 2 * H, 30 * H), (0, 1.0, 10 * H, np.inf)]
    team, gpus, start, end = (np.array(c) for c in zip(*runs, strict=True))
    times = np.array([H, 4 * H, 12 * H, 40 * H])
    got = decayed_usage(team.astype(np.int64), gpus, start, end, times, HL, 2)
    for row, t in enumerate(times):
        ledger = FairShareLedger(HL)
        for k, g, s, e in runs:  # what had happened by t: runs clipped at t, later ones absent
            if s < t:
                ledger.charge(("a", "b")[k], g, s, min(e, t))
        want = ledger.usage_at(t)
        assert got[row, 0] == pytest.approx(want.get("a", 0.0), rel=1e-9, abs=1e-6)
        assert got[row, 1] == pytest.approx(want.get("b", 0.0), rel=1e-9, abs=1e-6)


def test_a_team_over_its_share_recovers_while_the_other_runs() -> None:
    usage = np.array([9e6, 1e6])  # team 0 used 90 % on a 50 % share; team 1 now runs 8 GPUs
    share = np.array([0.5, 0.5])
    recovery, in_one = recovery_at_current_rates(usage, np.array([0.0, 8.0]), share, HL)
    assert recovery[1] == 0.0  # under its share now
    t = recovery[0]
    assert t is not None and t > 0
    # at the time given, the projected usage fractions put team 0 at its share (factor 0.5)
    u_inf = np.array([0.0, 8.0]) * HL / np.log(2)
    u = u_inf + (usage - u_inf) * 2 ** (-t / HL)
    assert 2 ** (-(u[0] / u.sum()) / 0.5) == pytest.approx(NEUTRAL_FACTOR, abs=0.005)
    assert in_one[0] > 2 ** (-0.9 / 0.5)  # already better one half-life on


def test_with_nobody_running_fractions_stay_put_and_it_never_recovers() -> None:
    recovery, _ = recovery_at_current_rates(np.array([9e6, 1e6]), np.zeros(2), np.array([0.5, 0.5]), HL)
    assert recovery == [None, 0.0]
