"""Factor ``tier``: the job's priority tier / QoS, as the tier's configured ``rank`` in [0, 1]."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext

__all__ = ["TierFactor"]


class TierFactor:
    name: ClassVar[str] = "tier"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    def values(self, ctx: CycleContext) -> np.ndarray:
        return ctx.tier_rank[ctx.tier_index]

    def explain(self, ctx: CycleContext, i: int) -> str:
        tier = ctx.tier_names[ctx.tier_index[i]]
        code = ctx.pending.tier[i]
        asked = ctx.snapshot.tiers[code] if code >= 0 else None
        via = "" if asked == tier else (f" (from {asked!r})" if asked else " (default tier)")
        return f"tier {tier}{via}"
