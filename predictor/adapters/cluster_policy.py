"""The part of the policy file that scheduler configuration mirrors: tiers with their priority values,
teams with their shares and quotas, factor weights, preemption settings.

Generators (Slurm ``PriorityWeight*``/QoS lines, Kueue priority classes and queues) read this small
typed view, built from the rules layer's ``PolicyConfig`` by ``cluster_policy_from_config``, so they
do not depend on the whole policy model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TierSpec", "TeamSpec", "ClusterPolicy", "cluster_policy_from_config", "load_cluster_policy", "dns_name"]


def dns_name(name: str) -> str:
    """A Kubernetes object name (RFC 1123 label) for a policy name: ``best_effort`` -> ``best-effort``."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return text[:63].rstrip("-") or "x"


@dataclass(frozen=True, slots=True)
class TierSpec:
    """A priority tier: its rank in [0, 1], Kueue priority value, and which tiers it may preempt."""

    name: str
    rank: float
    kueue_priority: int
    can_preempt: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """A team (Slurm account, Kubernetes namespace): fair-share weight and optional GPU quota."""

    name: str
    share: float = 1.0
    nominal_gpus: float | None = None
    borrowing_limit_gpus: float | None = None


@dataclass(frozen=True)
class ClusterPolicy:
    """What scheduler configuration mirrors from the policy file."""

    tiers: tuple[TierSpec, ...]
    teams: tuple[TeamSpec, ...] = ()
    weights: Mapping[str, float] = field(default_factory=dict)
    default_tier: str | None = None
    age_cap_s: float = 86_400.0
    fairshare_half_life_s: float = 7 * 86_400.0
    preemption_enabled: bool = True
    preemption_grace_s: float = 120.0
    preemption_requeue: bool = True
    borrowing: bool = True
    strict_fifo: bool = False
    name: str = "policy"

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("a cluster policy needs at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError("tier names must be unique")
        for t in self.tiers:
            unknown = set(t.can_preempt) - set(names)
            if unknown:
                raise ValueError(f"tier {t.name} may preempt unknown tier(s) {', '.join(sorted(unknown))}")
        if len({dns_name(t.name) for t in self.teams}) != len(self.teams):
            raise ValueError("team names must stay unique as Kubernetes names (lower case, '-' for '_')")

    def tier(self, name: str) -> TierSpec:
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(f"no tier {name!r}")


def cluster_policy_from_config(cfg: Any) -> ClusterPolicy:
    """Adapt the rules layer's ``predictor.policy.config.PolicyConfig`` to a ``ClusterPolicy``."""
    tiers = tuple(
        TierSpec(name=name, rank=float(t.rank), kueue_priority=int(t.kueue_priority),
                 can_preempt=tuple(t.can_preempt), description=t.description)
        for name, t in sorted(cfg.tiers.items(), key=lambda kv: -kv[1].kueue_priority)
    )
    teams = tuple(
        TeamSpec(name=name, share=float(t.share), nominal_gpus=t.nominal_gpus,
                 borrowing_limit_gpus=t.borrowing_limit_gpus)
        for name, t in sorted(cfg.teams.items())
    )
    return ClusterPolicy(
        tiers=tiers, teams=teams, weights=dict(cfg.weights), default_tier=cfg.default_tier,
        age_cap_s=float(cfg.factors.age.cap_s), fairshare_half_life_s=float(cfg.factors.fairshare.half_life_s),
        preemption_enabled=bool(cfg.preemption.enabled), preemption_grace_s=float(cfg.preemption.grace_s),
        preemption_requeue=bool(cfg.preemption.requeue), borrowing=bool(cfg.quotas.borrowing),
        strict_fifo=cfg.queueing.strategy == "strict", name=cfg.name,
    )


def load_cluster_policy(path: str | Path | None) -> ClusterPolicy:
    """Read a policy file (the shipped default when ``path`` is None) through the rules layer's loader.

    Raises
    ------
    InputError
        Naming the file and field, as the policy loader does.
    """
    from predictor.policy.presets import load_policy  # the rules layer owns the file format

    return cluster_policy_from_config(load_policy(path))
