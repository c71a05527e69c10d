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
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        names, tiers = ctx.tier_names, ctx.snapshot.tiers
        out = []
        for t, code in zip(ctx.tier_index[rows].tolist(), ctx.pending.tier[rows].tolist(), strict=True):
            tier = names[t]
            asked = tiers[code] if code >= 0 else None
            via = "" if asked == tier else (f" (from {asked!r})" if asked else " (default tier)")
            out.append(f"tier {tier}{via}")
        return out
