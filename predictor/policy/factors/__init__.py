"""Priority factors, one per module, behind :class:`PriorityFactor`, chosen by name from ``FACTORS``."""

from __future__ import annotations

from predictor.policy.config import FACTOR_NAMES
from predictor.policy.factors.age import AgeFactor
from predictor.policy.factors.base import PriorityFactor
from predictor.policy.factors.fairshare import FairShareFactor
from predictor.policy.factors.shortness import ShortnessFactor
from predictor.policy.factors.sla import SlaFactor, sla_at_risk
from predictor.policy.factors.tier import TierFactor
from predictor.policy.factors.topology import TopologyFactor

__all__ = ["FACTORS", "PriorityFactor", "sla_at_risk", "AgeFactor", "FairShareFactor", "ShortnessFactor",
           "SlaFactor", "TierFactor", "TopologyFactor"]

#: Factor name -> class. The policy's ``weights`` keys are names from here.
FACTORS: dict[str, type[PriorityFactor]] = {
    cls.name: cls
    for cls in (TierFactor, SlaFactor, AgeFactor, FairShareFactor, ShortnessFactor, TopologyFactor)
}
if tuple(FACTORS) != FACTOR_NAMES:  # pragma: no cover - a factor added without its name in the policy schema
    raise ImportError(f"FACTORS {tuple(FACTORS)} differ from policy.config.FACTOR_NAMES {FACTOR_NAMES}")
