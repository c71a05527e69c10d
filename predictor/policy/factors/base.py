"""The one interface every priority factor implements, and the helpers they share.

A factor turns the pending jobs of one cycle into values in [0, 1] (vectorised: one numpy pass over
all jobs) and explains one job's value in a sentence. The multifactor ordering multiplies each value
by the factor's weight from the policy and sums (Slurm's multifactor plugin, see
docs/rules-layer.md, *Priority*). A factor is chosen by name from ``predictor.policy.factors.FACTORS``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from predictor.policy.config import PolicyConfig
    from predictor.policy.context import CycleContext

__all__ = ["PriorityFactor", "hours"]


@runtime_checkable
class PriorityFactor(Protocol):
    """A priority factor.

    ``values`` returns an array of shape (n_pending,) with every entry in [0, 1]; ``explain_rows`` a
    short phrase for each pending row asked (e.g. ``"waited 3.2 h of a 24 h cap"``), reading each
    column once for all of them (a batch's Decisions explain every job); ``explain`` the phrase of one.
    """

    name: ClassVar[str]

    def __init__(self, policy: PolicyConfig) -> None: ...

    def values(self, ctx: CycleContext) -> np.ndarray: ...

    def explain(self, ctx: CycleContext, i: int) -> str: ...

    def explain_rows(self, ctx: CycleContext, rows: np.ndarray | slice) -> list[str]: ...


def hours(seconds: float) -> str:
    """A duration as a short human string: ``45 s``, ``12 min``, ``3.2 h``, ``4.1 d``."""
    s = float(seconds)
    if not math.isfinite(s):
        return "unknown"
    a = abs(s)
    if a < 120:
        return f"{s:.0f} s"
    if a < 2 * 3600:
        return f"{s / 60:.0f} min"
    if a < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"
