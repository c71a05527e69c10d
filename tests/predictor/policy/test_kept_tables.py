"""What the rules layer keeps across cycles equals what it computed per cycle: the snapshot's tables
built without checks (``PendingJobs.unchecked``/``RunningJobs.unchecked``) and the per-policy tables
(``context.policy_tables``)."""

from dataclasses import fields

import numpy as np

from predictor.policy.context import policy_tables
from predictor.policy.presets import load_policy
from predictor.policy.snapshot import PendingJobs, RunningJobs


def _same(a, b) -> None:
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y, f.name


def test_unchecked_tables_equal_the_checked_ones():
    p = PendingJobs.from_columns(job_id=["a", "b"], submit_ts=[1.0, 2.0], num_gpus=[1, 4], p50_s=[10.0, np.nan])
    cols = {f.name: getattr(p, f.name) for f in fields(p)}
    _same(PendingJobs(**cols), PendingJobs.unchecked(**cols))
    r = RunningJobs.from_columns(job_id=["c", "d"], gpus=[[0], [1, 2]], start_ts=[5.0, 6.0])
    cols = {f.name: getattr(r, f.name) for f in fields(r) if f.name not in ("submit_ts", "checkpoint_kind",
                                                                             "checkpoint_size_gb")}
    _same(RunningJobs(**cols), RunningJobs.unchecked(**cols))  # the defaults filled in alike


def test_policy_tables_are_the_per_cycle_values():
    policy = load_policy(preset="ours")
    t = policy_tables(policy)
    assert policy_tables(policy) is t
    names = tuple(policy.tiers)
    tiers = ("prod", "nonexistent", names[0])
    default = names.index(policy.default_tier)
    expected = [names.index(policy.tier_of(x)) for x in tiers] + [default]
    assert t.tier_lookup(tiers).tolist() == expected
    teams = ("a", "b")
    shares = np.array([policy.share_of(x) for x in teams])
    total = shares.sum() + sum(c.share for n, c in policy.teams.items() if n not in teams)
    assert np.array_equal(t.team_share_fraction(teams), shares / total)
    assert t.tier_rank.tolist() == [x.rank for x in policy.tiers.values()]
