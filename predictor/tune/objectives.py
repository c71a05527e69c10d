"""What a study optimises: metrics of the replay report (``predictor.sim.metrics``), each with its direction.

Every metric of ``report.json`` may be an objective (``--objective avg_jct_s,max_wait_s``); the
default is the issue's four: average JCT, maximum wait and SLA misses (lower is better) and Jain's
fairness index (higher is better). A metric that a replay leaves undefined (NaN: no job finished,
fewer than two teams ever competed) counts as the worst value in its direction, so such a trial is
never preferred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from features.errors import InputError
from predictor.sim.metrics import METRIC_KEYS

__all__ = ["Objective", "DEFAULT_OBJECTIVES", "HIGHER_IS_BETTER", "parse_objectives", "objective_values",
           "no_worse"]

#: Metrics where a larger value is better; every other metric of ``METRIC_KEYS`` is better lower.
HIGHER_IS_BETTER: frozenset[str] = frozenset({"utilization", "jain_index"})

DEFAULT_OBJECTIVES = "avg_jct_s,max_wait_s,sla_misses,jain_index"


@dataclass(frozen=True)
class Objective:
    """A metric and whether the study maximises it."""

    metric: str
    maximize: bool

    @property
    def direction(self) -> str:
        return "maximize" if self.maximize else "minimize"

    def value(self, metrics: Mapping[str, float | None]) -> float:
        """The metric as the sampler sees it (undefined: the worst value)."""
        v = metrics.get(self.metric)
        if v is None or not math.isfinite(float(v)):
            return -math.inf if self.maximize else math.inf
        return float(v)


def parse_objectives(text: str) -> tuple[Objective, ...]:
    """``"avg_jct_s,max_wait_s"`` -> objectives; ``InputError`` naming an unknown or repeated metric."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("--objective: name at least one metric, e.g. " + DEFAULT_OBJECTIVES)
    for name in names:
        if name not in METRIC_KEYS:
            raise InputError(f"--objective: unknown metric {name!r}; choose from {', '.join(METRIC_KEYS)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"--objective: {', '.join(repeated)} named more than once")
    return tuple(Objective(n, n in HIGHER_IS_BETTER) for n in names)


def objective_values(objectives: Sequence[Objective], metrics: Mapping[str, float | None]) -> list[float]:
    """The values told to the sampler, in objective order."""
    return [o.value(metrics) for o in objectives]


def no_worse(metric: str, value: float | None, reference: float | None) -> bool:
    """Whether ``value`` is at least as good as ``reference`` for ``metric`` (undefined is worse than
    anything, and as good as undefined)."""
    ref_ok = reference is not None and math.isfinite(float(reference))
    val_ok = value is not None and math.isfinite(float(value))
    if not ref_ok:
        return True
    if not val_ok:
        return False
    if metric in HIGHER_IS_BETTER:
        return float(value) >= float(reference) - 1e-12
    return float(value) <= float(reference) + 1e-12
