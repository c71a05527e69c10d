"""Factor ``topology``: how well the job could be placed right now, ``1 / slowdown(best class free)``.

The best placement class free now over the job's allowed GPU types (``CycleContext.best_class_now``)
and the job's predicted slowdown in that class: 1 when its best placement is free (or it is not
sensitive to placement), lower when only a worse one is, 0 when nothing fits now.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from features.schema import PLACEMENT_CLASSES
from predictor.policy.config import PolicyConfig
from predictor.policy.context import NO_CLASS, CycleContext

__all__ = ["TopologyFactor"]


class TopologyFactor:
    name: ClassVar[str] = "topology"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    def values(self, ctx: CycleContext) -> np.ndarray:
        best = ctx.best_class_now
        rows = np.arange(len(best))
        slow = ctx.pending.slowdown[rows, np.minimum(best, NO_CLASS - 1)]
        slow = np.where(np.isfinite(slow) & (slow >= 1.0), slow, 1.0)
        return np.where(best < NO_CLASS, 1.0 / slow, 0.0)

    def explain(self, ctx: CycleContext, i: int) -> str:
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        cls = ctx.best_class_now[rows]
        slowdown = ctx.pending.slowdown[rows]  # rows may be a slice
        slow = slowdown[np.arange(len(cls)), np.minimum(cls, NO_CLASS - 1)].tolist()
        best = cls.tolist()
        return ["no placement free now" if b >= NO_CLASS else
                f"best placement free now: {PLACEMENT_CLASSES[b]} (slowdown {s:.2f})"
                for b, s in zip(best, slow, strict=True)]
