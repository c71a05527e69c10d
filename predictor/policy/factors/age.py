"""Factor ``age``: waiting time over the age cap, ``min((now - submit) / cap, 1)``.

Non-decreasing in waiting time by construction; the cap keeps one factor from dominating forever
(the starvation guard, ``aging.starvation_after_s``, bounds waiting instead: see ordering.py).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext
from predictor.policy.factors.base import hours

__all__ = ["AgeFactor"]


class AgeFactor:
    name: ClassVar[str] = "age"

    def __init__(self, policy: PolicyConfig) -> None:
        self.cap_s = policy.factors.age.cap_s

    def values(self, ctx: CycleContext) -> np.ndarray:
        waited = np.maximum(ctx.now - ctx.pending.submit_ts, 0.0)
        return np.minimum(waited / self.cap_s, 1.0)

    def explain(self, ctx: CycleContext, i: int) -> str:
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        cap, now = hours(self.cap_s), ctx.now
        return [f"waited {hours(max(now - s, 0.0))} of a {cap} cap" for s in ctx.pending.submit_ts[rows].tolist()]
