"""Factor ``sla``: urgency of a job with a deadline, rising as its slack shrinks.

``slack = deadline - now - p90 - expected_wait`` (``expected_wait``: until the cluster has the job's
GPU count free, from the running jobs' p90 ends). ``urgency = clip(1 - slack / horizon, 0, 1)``:
0 while the slack exceeds the SLA class's ``horizon_s``, 1 when no slack is left. A job without a
deadline (explicit, or implied by its tier's SLA class ``turnaround_s``) scores 0.

A job that cannot meet its deadline even if it started now (``deadline - now < p90``) is *at risk*:
flagged ``sla_at_risk`` on its Decision and never a reason to preempt; its urgency stays 1 (so
waiting never lowers its priority) unless ``factors.sla.demote_at_risk`` drops it to 0.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from predictor.policy.config import PolicyConfig
from predictor.policy.context import CycleContext
from predictor.policy.factors.base import hours

__all__ = ["SlaFactor", "sla_at_risk"]


def sla_at_risk(ctx: CycleContext) -> np.ndarray:
    """True for jobs whose deadline is closer than their predicted p90 run time."""
    return ctx.at_risk


class SlaFactor:
    name: ClassVar[str] = "sla"

    def __init__(self, policy: PolicyConfig) -> None:
        self.demote = policy.factors.sla.demote_at_risk

    def values(self, ctx: CycleContext) -> np.ndarray:
        d = ctx.deadline
        has = np.isfinite(d)
        if not has.any():
            return np.zeros(len(d))
        wait = np.maximum(ctx.expected_start - ctx.now, 0.0)
        with np.errstate(invalid="ignore"):
            slack = d - ctx.now - ctx.p90 - wait
            urgency = np.clip(1.0 - slack / ctx.sla_horizon, 0.0, 1.0)
        urgency = np.where(np.isnan(urgency), 1.0, urgency)  # inf wait: no slack at all
        if self.demote:
            urgency = np.where(sla_at_risk(ctx), 0.0, urgency)
        return np.where(has, urgency, 0.0)

    def explain(self, ctx: CycleContext, i: int) -> str:
        return self.explain_rows(ctx, np.array([i]))[0]

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]:
        deadline = ctx.deadline[rows].tolist()
        if not any(math.isfinite(d) for d in deadline):  # most jobs have no SLA
            return ["no deadline"] * len(deadline)
        now, dropped = ctx.now, ", urgency dropped" if self.demote else ""
        out = []
        for d, p90, start, horizon in zip(deadline, ctx.p90[rows].tolist(), ctx.expected_start[rows].tolist(),
                                          ctx.sla_horizon[rows].tolist(), strict=True):
            if not math.isfinite(d):
                out.append("no deadline")
                continue
            left = d - now
            if left < p90:
                out.append(f"cannot meet its deadline: {hours(left)} left, p90 run time {hours(p90)} "
                           f"(at risk{dropped})")
                continue
            wait = max(start - now, 0.0)
            out.append(f"deadline in {hours(left)}: slack {hours(left - p90 - wait)} after p90 {hours(p90)} and "
                       f"expected wait {hours(wait)} (horizon {hours(horizon)})")
        return out
