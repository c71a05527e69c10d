"""Factor ``fairshare``: Slurm's *classic* fair-share factor, ``F = 2 ** (-U / S)``.

``U`` is the team's share of all decayed usage (GPU-seconds, exponential decay with
``factors.fairshare.half_life_s``, kept by ``FairShareLedger``) and ``S`` its share of all
entitlements (``teams.<name>.share``; ``default_share`` for teams not listed). A team using exactly
its entitlement scores 0.5, an idle team 1, a team at twice its entitlement 0.25. More usage never
raises F (U grows with the team's usage, F falls with U). Not the fair-tree variant: classic is
per-team, which is what a flat list of teams needs.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext

__all__ = ["FairShareFactor"]


class FairShareFactor:
    name: ClassVar[str] = "fairshare"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    def values(self, ctx: CycleContext) -> np.ndarray:
        return ctx.fairshare

    def explain(self, ctx: CycleContext, i: int) -> str:
        code = int(ctx.pending.team[i])
        if code < 0:
            return "no team: no usage on record"
        team = ctx.snapshot.teams[code]
        u = float(ctx.team_usage_fraction[code])
        share = float(ctx.team_share_fraction[code])
        return f"team {team} used {u:.0%} of recent GPU-time against a {share:.0%} share"
