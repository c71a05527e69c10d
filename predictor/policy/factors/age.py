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
        waited = max(ctx.now - float(ctx.pending.submit_ts[i]), 0.0)
        return f"waited {hours(waited)} of a {hours(self.cap_s)} cap"
