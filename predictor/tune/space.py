"""The search space of ``predictor tune``: the policy settings a study may change, declared once.

:data:`SEARCH_SPACE` is a table of :class:`Parameter` rows. A parameter's name is its dotted path
in the policy document (``weights.shortness`` is ``weights: {shortness: ...}`` in the YAML), so the
name in ``report.json``, in MLflow and in ``policy.yaml`` is the same string. Each row gives the
range searched and whether it is searched on a log scale (settings that span decades: times,
depths) and whether it is an integer. To search one more setting, add a row; ``tests/predictor/
tune/test_space.py`` checks that every row names a field of the policy model and that both ends of
its range validate.

Everything else in the policy (tiers, teams, SLA classes, the ordering rule and the switches of
each rule) comes from the base policy (``--policy-file`` or the shipped default) and is kept as is.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from features.errors import InputError
from predictor.policy.config import PolicyConfig
from predictor.policy.presets import policy_from_mapping

__all__ = ["Parameter", "SEARCH_SPACE", "distributions", "apply", "policy_with", "values_in", "check_space",
           "QSSF_LIKE", "qssf_like"]

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class Parameter:
    """One searched setting.

    Attributes
    ----------
    path : str
        Dotted path in the policy document; also the parameter's name.
    low, high : float
        The range searched (both ends included).
    log : bool
        Search on a log scale (``low`` must then be positive).
    integer : bool
        An integer setting (depths, counts).
    """

    path: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    @property
    def name(self) -> str:
        return self.path

    def distribution(self) -> BaseDistribution:
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(float(self.low), float(self.high), log=self.log)

    def clip(self, value: float) -> float | int:
        """``value`` brought into the range (and rounded for an integer setting)."""
        v = min(max(float(value), self.low), self.high)
        return int(round(v)) if self.integer else v


#: The searched settings (docs/tuning.md, *The search space*, explains each group).
SEARCH_SPACE: tuple[Parameter, ...] = (
    # factor weights of the multifactor priority (priority = weighted sum / sum of weights)
    # shortness is the default's backbone (60 against single digits): searched on a log scale around it
    Parameter("weights.shortness", 1.0, 200.0, log=True),
    Parameter("weights.age", 0.0, 10.0),
    Parameter("weights.tier", 0.0, 10.0),
    Parameter("weights.sla", 0.0, 10.0),
    Parameter("weights.fairshare", 0.0, 10.0),
    Parameter("weights.topology", 0.0, 5.0),
    # caps: where the age factor saturates, and the wait after which a job starves (guard band)
    Parameter("factors.age.cap_s", HOUR, 7 * DAY, log=True),
    Parameter("aging.starvation_after_s", HOUR, 7 * DAY, log=True),
    # a job starves after factor x its p90, floored at starvation_min_s (capped at starvation_after_s)
    Parameter("aging.starvation_run_time_factor", 1.0, 64.0, log=True),
    Parameter("aging.starvation_min_s", 600.0, DAY, log=True),
    # ... and at least this x the queue's drain time (0: no backlog term)
    Parameter("aging.starvation_backlog_factor", 0.0, 4.0),
    # guard depth: starving jobs in the guard band at once
    Parameter("aging.guard_depth", 1, 64, log=True, integer=True),
    # shortness scale: predicted GPU-seconds scoring 1 and 0 (log scale between)
    Parameter("factors.shortness.short_gpu_s", 1.0, 3600.0, log=True),
    Parameter("factors.shortness.long_gpu_s", 1e5, 1e9, log=True),
    # preemption thresholds
    Parameter("preemption.trigger_wait_s", 60.0, DAY, log=True),
    Parameter("preemption.max_loss_ratio", 0.1, 10.0, log=True),
    Parameter("preemption.min_runtime_s", 60.0, 4 * HOUR, log=True),
    Parameter("preemption.max_preemptors_per_cycle", 0, 16, integer=True),
    # scheduling depth and reservations
    Parameter("queueing.scheduling_depth", 8, 1024, log=True, integer=True),
    Parameter("reservation.depth", 0, 32, integer=True),
    # rule overrun growth: how much more a job that outran its p90 is believed to need (x the overrun)
    Parameter("reservation.overrun_growth", 0.0, 4.0),
    # rule flavor from memory on (1) or off (0): on a congested cluster of several GPU types a loose
    # memory bound queues jobs on the largest type while the others idle (docs/limitations.md)
    Parameter("sizing.use_predictions", 0, 1, integer=True),
    # rule start below the bound: the share of the point estimate a type below the bound must hold
    Parameter("sizing.below_bound_point_fraction", 0.0, 1.0),
)


def distributions(space: Sequence[Parameter] = SEARCH_SPACE) -> dict[str, BaseDistribution]:
    """Optuna distributions by parameter name."""
    return {p.name: p.distribution() for p in space}


def _get(document: Mapping[str, Any], path: str) -> Any:
    node: Any = document
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def apply(document: Mapping[str, Any], values: Mapping[str, float | int]) -> dict[str, Any]:
    """A copy of the policy ``document`` with each value set at its path (sections created as needed)."""
    out = copy.deepcopy(dict(document))
    for path, value in values.items():
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if child is None else dict(child)
                node[part] = child
            node = child
        node[leaf] = value
    return out


def policy_with(base: PolicyConfig, values: Mapping[str, float | int], *, name: str = "tuned") -> PolicyConfig:
    """``base`` with the searched ``values`` set (validated like a policy file; ``InputError`` naming the
    field when a combination is invalid)."""
    document = apply(base.model_dump(mode="json"), values)
    document["name"] = name
    return policy_from_mapping(document, f"policy {name}")


def values_in(policy: PolicyConfig, space: Sequence[Parameter] = SEARCH_SPACE) -> dict[str, float | int]:
    """The searched settings' values in ``policy``, brought into their ranges (a setting that is off,
    such as ``aging.starvation_after_s: null``, takes the end of its range that is closest to off)."""
    document = policy.model_dump(mode="json")
    out: dict[str, float | int] = {}
    for p in space:
        value = _get(document, p.path)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            value = p.high
        out[p.name] = p.clip(value)
    return out


#: The point of the space nearest to QSSF: shortness alone orders (the other weights 0), the starvation
#: guard as late as the space allows, no reservation, no preemption, the requested GPU types as asked.
#: Seeded into every study (trial 1) so the front holds a point next to the baseline the chosen point
#: must beat.
QSSF_LIKE: dict[str, float] = {
    "weights.age": 0.0, "weights.tier": 0.0, "weights.sla": 0.0, "weights.fairshare": 0.0, "weights.topology": 0.0,
    "aging.starvation_after_s": 7 * DAY, "aging.starvation_run_time_factor": 64.0, "aging.starvation_min_s": DAY,
    "aging.starvation_backlog_factor": 0.0, "reservation.depth": 0, "preemption.max_preemptors_per_cycle": 0,
    "sizing.use_predictions": 0,
}


def qssf_like(policy: PolicyConfig, space: Sequence[Parameter] = SEARCH_SPACE, *,
              sized: bool = False) -> dict[str, float | int]:
    """``policy``'s searched values with :data:`QSSF_LIKE` laid over them (those in ``space``);
    ``sized``: next to ``qssf-sized`` instead (the policy's own ``sizing.use_predictions`` kept)."""
    values = values_in(policy, space)
    names = {p.name: p for p in space}
    values.update({k: names[k].clip(v) for k, v in QSSF_LIKE.items()
                   if k in names and not (sized and k == "sizing.use_predictions")})
    return values


def check_space(base: PolicyConfig, space: Sequence[Parameter] = SEARCH_SPACE) -> None:
    """Fail (``InputError``, one line) when a row of ``space`` does not name a setting of the policy or
    an end of its range is not a valid value for it, before any trial is run."""
    document = base.model_dump(mode="json")
    names = [p.name for p in space]
    if len(set(names)) != len(names):
        raise InputError(f"search space: a parameter is listed twice ({', '.join(sorted(set(n for n in names if names.count(n) > 1)))})")
    for p in space:
        try:
            _get(document, p.path)
        except KeyError:
            if not p.path.startswith("weights."):
                raise InputError(f"search space: {p.path} is not a setting of the policy") from None
        if p.log and p.low <= 0:
            raise InputError(f"search space: {p.path} is searched on a log scale but its range starts at {p.low}")
        for end in (p.low, p.high):
            policy_with(base, {p.path: p.clip(end)})
