import json
import math
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.errors import InputError
from predictor.capacity.inventory import homogeneous_inventory
from predictor.policy.config import PolicyConfig
from predictor.policy.ledger import FairShareLedger, JobEvent
from predictor.policy.scheduler import open_cycle
from tests.builders import SnapshotBuilder, make_job

H = 3600.0
HL = 10 * H  # half-life used in these tests


def run_usage(gpus, start, end, t, half_life=HL):
    """Closed form of the decayed usage of one run, evaluated at t >= end."""
    k = half_life / math.log(2)
    return gpus * k * (2 ** (-(t - end) / half_life) - 2 ** (-(t - start) / half_life))


def test_one_run_decays_by_half_each_half_life():
    ledger = FairShareLedger.from_events([JobEvent("start", "j", 0.0, "x", 2.0), JobEvent("finish", "j", H)], HL)
    at_end = ledger.usage_at(H)["x"]
    assert at_end == pytest.approx(run_usage(2, 0, H, H))
    assert at_end < 2 * H  # recent use counts almost fully, never more than GPU-seconds
    assert ledger.usage_at(H + HL)["x"] == pytest.approx(at_end / 2)
    assert ledger.usage_at(H + 3 * HL)["x"] == pytest.approx(at_end / 8)


def test_open_run_grows_and_matches_closing_it():
    ledger = FairShareLedger(HL)
    ledger.record(JobEvent("start", "j", 0.0, "x", 4.0))
    assert ledger.usage_at(0.0)["x"] == 0.0
    grown = ledger.usage_at(2 * H)["x"]
    assert grown > ledger.usage_at(H)["x"] > 0
    ledger.record(JobEvent("preempt", "j", 2 * H))
    assert ledger.usage_at(2 * H)["x"] == pytest.approx(grown)
    assert ledger.running_jobs == ()


run = st.tuples(st.sampled_from(["x", "y", "z"]), st.floats(0.1, 16), st.floats(0, 100 * H), st.floats(0, 50 * H))


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(run, min_size=1, max_size=12), seed=st.integers(0, 2**16), later=st.floats(0, 500 * H))
def test_usage_is_a_function_of_the_event_set_and_now(runs, seed, later):
    events = []
    for k, (team, gpus, start, length) in enumerate(runs):
        events += [JobEvent("start", f"j{k}", start, team, gpus), JobEvent("finish", f"j{k}", start + length)]
    now = max(e.ts for e in events) + later
    in_order = FairShareLedger.from_events(events, HL).usage_at(now)
    shuffled = FairShareLedger(HL)
    starts = [e for e in events if e.kind == "start"]
    finishes = [e for e in events if e.kind != "start"]
    random.Random(seed).shuffle(starts)
    random.Random(seed + 1).shuffle(finishes)
    for e in starts + finishes:  # any order, as long as a job starts before it finishes
        shuffled.record(e)
    expected = {}
    for team, gpus, start, length in runs:
        expected[team] = expected.get(team, 0.0) + run_usage(gpus, start, start + length, now)
    for team, value in expected.items():
        assert in_order[team] == pytest.approx(value, rel=1e-9, abs=1e-6)
        assert shuffled.usage_at(now)[team] == pytest.approx(value, rel=1e-9, abs=1e-6)


def test_serialisation_round_trip_through_json():
    ledger = FairShareLedger(HL)
    ledger.record(JobEvent("start", "a", 0.0, "x", 1.0))
    ledger.record(JobEvent("start", "b", 10.0, "y", 8.0))
    ledger.record(JobEvent("finish", "a", 500.0))
    back = FairShareLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert back.usage_at(900.0) == pytest.approx(ledger.usage_at(900.0))
    back.record(JobEvent("finish", "b", 1000.0))  # the open run survived the round trip
    with pytest.raises(InputError, match="malformed"):
        FairShareLedger.from_dict({"closed": {}})


@pytest.mark.parametrize(
    "events, message",
    [
        ([JobEvent("finish", "a", 5.0)], "finish of job a, which is not running"),
        ([JobEvent("start", "a", 0.0, "x", 1.0), JobEvent("start", "a", 1.0, "x", 1.0)], "started twice"),
        ([JobEvent("start", "a", 10.0, "x", 1.0), JobEvent("fail", "a", 5.0)], "fail at 5.0 before its start"),
        ([JobEvent("start", "a", 0.0, None, 1.0)], "needs a team and GPUs"),
        ([JobEvent("start", "a", 0.0, "x", 1.0), JobEvent("explode", "a", 1.0)], "unknown event kind"),  # type: ignore[arg-type]
    ],
    ids=["close unknown", "double start", "close before start", "no team", "bad kind"],
)
def test_bad_events_are_refused(events, message):
    ledger = FairShareLedger(HL)
    with pytest.raises(InputError, match=message):
        for e in events:
            ledger.record(e)


def test_far_future_events_rebase_without_losing_usage():
    ledger = FairShareLedger(H)  # a short half-life forces re-basing
    ledger.charge("x", 1.0, 0.0, H)
    ledger.charge("x", 1.0, 1000 * H, 1001 * H)
    assert ledger.usage_at(1001 * H)["x"] == pytest.approx(run_usage(1, 1000 * H, 1001 * H, 1001 * H, H))


def test_from_jobs_charges_runs_and_clips_at_until():
    jobs = pd.DataFrame({"team": ["x", "y", None], "num_gpus": [2.0, 1.0, 4.0], "gpu_milli": [1000.0, 500.0, 1000.0],
                         "start_ts": [0.0, 0.0, 0.0], "end_ts": [H, float("nan"), H]})
    ledger = FairShareLedger.from_jobs(jobs, HL, until_ts=2 * H)
    u = ledger.usage_at(2 * H)
    assert set(u) == {"x", "y"}
    assert u["y"] == pytest.approx(run_usage(0.5, 0, 2 * H, 2 * H))


@settings(max_examples=40, deadline=None)
@given(usage=st.lists(st.floats(0, 1e9), min_size=3, max_size=3), extra=st.floats(0, 1e9),
       shares=st.lists(st.floats(0.1, 10), min_size=3, max_size=3))
def test_more_usage_never_raises_a_teams_fairshare_factor(usage, extra, shares):
    policy = PolicyConfig(teams={t: {"share": s} for t, s in zip("abc", shares, strict=True)})

    def factor(u):
        snap = (SnapshotBuilder(homogeneous_inventory(8)).pending(make_job("j").team("a"))
                .usage(dict(zip("abc", u, strict=True))).build(0.0))
        return open_cycle(snap, policy).team_fairshare

    before, after = factor(usage), factor([usage[0] + extra, usage[1], usage[2]])
    assert after[0] <= before[0] + 1e-12
    assert (after[1:] >= before[1:] - 1e-12).all()  # the others' relative usage can only fall
