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
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        teams, usage, shares = ctx.snapshot.teams, ctx.team_usage_fraction, ctx.team_share_fraction
        said: dict[int, str] = {}  # one phrase per team: every job of a team reads the same
        for code in set(ctx.pending.team[rows].tolist()):
            said[code] = ("no team: no usage on record" if code < 0 else
                          f"team {teams[code]} used {float(usage[code]):.0%} of recent GPU-time against a "
                          f"{float(shares[code]):.0%} share")
        return [said[c] for c in ctx.pending.team[rows].tolist()]
