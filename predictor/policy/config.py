"""The policy file: one YAML document, validated by pydantic, with defaults that work.

Every field has a default (the shipped ``default_policy.yaml`` spells them all out, with comments),
unknown fields are errors (a typo never silently falls back to a default), and a validation error
names the field: ``policy file p.yaml: weights.age: Input should be greater than or equal to 0``.

The same model expresses the comparison policies a replay needs (FIFO, SJF, QSSF, LAS, a Kueue-like
status quo): ``ordering`` picks the order rule, and the ``queueing``, ``quotas``, ``reservation``,
``placement``, ``sizing`` and ``preemption`` sections switch the other rules on or off. Named
presets (``predictor/policy/preset_files/*.yaml``) are overlays on a base policy; see ``presets.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from predictor.capacity.sizing import SizingConfig
from predictor.policy.residency import ResidencyConfig

__all__ = [
    "PolicyConfig",
    "TierConfig",
    "SlaClassConfig",
    "TeamConfig",
    "FactorSettings",
    "AgingConfig",
    "QueueingConfig",
    "QuotaConfig",
    "ReservationConfig",
    "PlacementConfig",
    "SizingConfig",
    "PreemptionConfig",
    "TimeLimitConfig",
    "LasConfig",
    "ResidencyConfig",
    "KUEUE_PRIORITY_CLASS_MAX",
]

#: Kueue (and Kubernetes PriorityClass) accept priority class values up to one billion.
KUEUE_PRIORITY_CLASS_MAX = 1_000_000_000

HOUR = 3600.0
DAY = 24 * HOUR

#: Names the policy file may use; ``predictor.policy.factors.FACTORS`` and
#: ``predictor.policy.ordering.ORDERINGS`` register exactly these (checked when they are built).
FACTOR_NAMES: tuple[str, ...] = ("tier", "sla", "age", "fairshare", "shortness", "topology")
ORDERING_NAMES: tuple[str, ...] = ("multifactor", "fifo", "sjf", "qssf", "las", "kueue")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TierConfig(_Section):
    """A priority tier / QoS: how much it weighs and what it may do."""

    rank: float = Field(ge=0.0, le=1.0, description="value of the tier factor for this tier (0..1)")
    kueue_priority: int = Field(0, ge=-KUEUE_PRIORITY_CLASS_MAX, le=KUEUE_PRIORITY_CLASS_MAX,
                                description="WorkloadPriorityClass value for the kueue ordering")
    can_preempt: tuple[str, ...] = Field((), description="tiers whose running jobs this tier may preempt")
    sla_class: str | None = Field(None, description="SLA class applied to jobs of this tier")
    description: str = ""


class SlaClassConfig(_Section):
    """An SLA class: the turnaround promised and when urgency starts rising."""

    turnaround_s: float | None = Field(None, gt=0, description="deadline = submit + this, for jobs that give none")
    horizon_s: float = Field(4 * HOUR, gt=0, description="slack below which SLA urgency starts rising")


class TeamConfig(_Section):
    """A team (account, namespace, virtual cluster)."""

    share: float = Field(1.0, gt=0, description="fair-share entitlement (relative to other teams)")
    nominal_gpus: float | None = Field(None, ge=0, description="Kueue-style nominal GPU quota (quotas.enabled)")
    borrowing_limit_gpus: float | None = Field(None, ge=0, description="most GPUs borrowed from the cohort")


class AgeSettings(_Section):
    cap_s: float = Field(DAY, gt=0, description="waiting time at which the age factor reaches 1")


class SlaSettings(_Section):
    demote_at_risk: bool = Field(False, description=(
        "drop the urgency of a job that can no longer meet its deadline to 0 (default: keep it at 1, "
        "flagged sla_at_risk, and never preempt on its behalf)"))


class ShortnessSettings(_Section):
    short_gpu_s: float = Field(60.0, gt=0, description="predicted GPU-time (p50 x GPUs) scoring 1")
    long_gpu_s: float = Field(1e7, gt=0, description="predicted GPU-time scoring 0 (log scale between)")
    unknown_value: float = Field(0.5, ge=0, le=1, description="value for a job with no predicted duration")

    @model_validator(mode="after")
    def _ordered(self) -> ShortnessSettings:
        if self.long_gpu_s <= self.short_gpu_s:
            raise ValueError("long_gpu_s must be greater than short_gpu_s")
        return self


class FairShareSettings(_Section):
    half_life_s: float = Field(7 * DAY, gt=0, description="usage half-life of the fair-share ledger")
    default_share: float = Field(1.0, gt=0, description="share of a team not listed under teams")


class FactorSettings(_Section):
    age: AgeSettings = AgeSettings()
    sla: SlaSettings = SlaSettings()
    shortness: ShortnessSettings = ShortnessSettings()
    fairshare: FairShareSettings = FairShareSettings()


class AgingConfig(_Section):
    """Rule *starvation guard* (``predictor.policy.ordering``; bound and proof in docs/rules-layer.md, *The no-starvation bound*)."""

    starvation_after_s: float | None = Field(7 * DAY, gt=0, description=(
        "starvation guard: the longest a job waits before it starves (T_max); a starving job is ordered "
        "ahead of every job that starts starving after it, in the guard band (null: no guard)"))
    starvation_run_time_factor: float | None = Field(4.0, gt=0, description=(
        "if set, a job starves after clamp(factor x its predicted p90, starvation_min_s, "
        "starvation_after_s) instead of starvation_after_s (null: starvation_after_s for every job)"))
    starvation_min_s: float = Field(2 * HOUR, gt=0, description=(
        "lower clamp of the run-time-relative threshold (starvation_run_time_factor)"))
    starvation_backlog_factor: float = Field(0.0, ge=0, description=(
        "if set, a job's threshold is at least this x the queue's drain time (the pending jobs' "
        "predicted GPU-seconds / the cluster's GPUs, this cycle), still at most starvation_after_s: "
        "the longer the whole queue, the later a job counts as starving (0: no backlog term)"))
    guard_depth: int | None = Field(1, ge=1, le=1_000_000, description=(
        "how many starving jobs enter the guard band at once, the earliest to start starving first; "
        "the others keep their normal priority until one of them leaves (null: all)"))

    @model_validator(mode="after")
    def _clamp_ordered(self) -> AgingConfig:
        # a T_max below the lower clamp lowers the clamp with it: "starve after 5000 s" means at most 5000 s
        if self.starvation_after_s is not None and self.starvation_min_s > self.starvation_after_s:
            object.__setattr__(self, "starvation_min_s", float(self.starvation_after_s))
        return self


class QueueingConfig(_Section):
    strategy: Literal["best_effort", "strict"] = Field("best_effort", description=(
        "best_effort: a job that cannot start does not stop later ones (they may backfill); strict: "
        "it blocks every later job of its scope (Kueue StrictFIFO)"))
    scope: Literal["cluster", "queue"] = Field("queue", description="what a strict head blocks: its queue or all")
    scheduling_depth: int | None = Field(128, ge=1, le=1_000_000, description=(
        "scheduling depth (like Slurm's bf_max_job_test / default_queue_depth): per cycle, at most this "
        "many jobs that cannot start in the GPUs free now are tested for a reservation or a preemption, "
        "highest priority first; the rest wait for a later cycle. A job that fits in the free GPUs is "
        "always tried; priorities are computed for every job (null: no limit)"))


class QuotaConfig(_Section):
    enabled: bool = Field(False, description="admit only within team quotas (teams.*.nominal_gpus)")
    default_nominal_gpus: float | None = Field(None, ge=0, description="quota of teams not listed (null: none)")
    borrowing: bool = Field(True, description="teams may borrow the cohort's unused nominal quota")
    nominal_from_shares: bool = Field(False, description=(
        "teams without nominal_gpus get the cluster's GPUs split by fair-share shares"))


class ReservationConfig(_Section):
    depth: int = Field(1, ge=0, le=10_000, description=(
        "how many blocked jobs get a reservation per cycle, highest priority first (like Slurm's "
        "bf_max_job_test); 0 disables reservations"))
    only_starving: bool = Field(False, description=(
        "true: only jobs in the starvation guard band get reservations (blocked jobs above the band's "
        "depth wait unreserved, as under QSSF, until they starve); the no-starvation bound holds either way"))
    backfill: Literal["p90", "none"] = Field("p90", description=(
        "p90: a lower-priority job may use reserved GPUs when its predicted p90 end is before the "
        "reservation; none: reserved GPUs are never lent"))
    hold_s: float = Field(600.0, ge=0, description="a reservation expires this long after its start")
    overrun_extension_s: float = Field(900.0, gt=0, description=(
        "assumed remaining time of a running job already past its predicted p90 end"))
    overrun_growth: float = Field(0.0, ge=0, le=100, description=(
        "rule overrun growth: a job past its p90 end by o seconds needs max(overrun_extension_s, "
        "overrun_growth x o) more; 0 keeps the fixed extension"))
    unknown_duration_s: float = Field(4 * HOUR, gt=0, description=(
        "duration assumed for planning when a job has neither a prediction nor a time limit"))


class PlacementConfig(_Section):
    strategy: Literal["best_class", "first_fit"] = "best_class"
    wait_for_better: bool = Field(True, description=(
        "hold a job for a better placement class when its predicted completion is earlier that way"))
    wait_margin_s: float = Field(60.0, ge=0, description="required gain in predicted completion to wait")


class PreemptionConfig(_Section):
    enabled: bool = True
    scope: Literal["tier_rules", "any_lower_priority", "kueue"] = Field("tier_rules", description=(
        "tier_rules: tiers.*.can_preempt; any_lower_priority: any lower-priority job (Tiresias); "
        "kueue: lower priority in the same team, or a lower-priority job of a team over its quota"))
    min_runtime_s: float = Field(600.0, ge=0, description="a job runs at least this long before it may be preempted")
    grace_s: float = Field(120.0, ge=0, description="time between the signal and the kill")
    signal: str = Field("SIGTERM", pattern=r"^SIG[A-Z0-9]+$")
    requeue: bool = True
    trigger_wait_s: float = Field(900.0, ge=0, description=(
        "preempt only when the job's reservation would make it wait longer than this, or miss its deadline"))
    max_preemptors_per_cycle: int = Field(4, ge=0, description="jobs that may preempt in one decide() cycle")
    max_loss_ratio: float | None = Field(1.0, ge=0, description=(
        "preempt only when what the victims lose - their work since their last checkpoints plus the "
        "preemptor's predicted run, which they wait out at least (GPU-seconds) - is at most this times "
        "the GPU-seconds of waiting the preemptor saves (its wait x its GPUs); null: no such limit"))
    assumed_checkpoint_interval_s: float | None = Field(None, gt=0, description=(
        "checkpoint interval assumed for running jobs that report neither a checkpoint nor an interval "
        "(null: such jobs lose everything since they started)"))
    checkpoint_bandwidth_gb_s: float = Field(1.0, gt=0, description=(
        "storage bandwidth a job writes and restores its checkpoint at, GB/s: a system snapshot costs "
        "size / bandwidth to write (the eviction's grace period covers it) and again to restore "
        "(rule *preemption cost*, predictor.policy.preemption)"))


class TimeLimitConfig(_Section):
    from_p90: bool = Field(True, description="suggest a time limit of p90 x slowdown x (1 + margin)")
    margin_fraction: float = Field(0.25, ge=0)
    min_s: float = Field(600.0, ge=0)


class LasConfig(_Section):
    thresholds_gpu_s: tuple[float, ...] = Field((3600.0, 36_000.0, 360_000.0), description=(
        "attained-service (GPU-seconds) boundaries of the 2D-LAS queues, increasing"))

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)) or any(t <= 0 for t in v):
            raise ValueError("must be positive and strictly increasing")
        return v


def _default_tiers() -> dict[str, TierConfig]:
    return {
        "production": TierConfig(rank=1.0, kueue_priority=100_000, can_preempt=("research", "best_effort"),
                                 sla_class="gold", description="production training and inference jobs"),
        "debug": TierConfig(rank=0.8, kueue_priority=50_000, can_preempt=(),
                            sla_class="interactive", description="interactive debugging sessions"),
        "sla": TierConfig(rank=0.6, kueue_priority=20_000, can_preempt=(),
                          sla_class="standard", description="training runs with a deadline"),
        "research": TierConfig(rank=0.3, kueue_priority=10_000, description="research training"),
        "best_effort": TierConfig(rank=0.0, kueue_priority=0, description="preemptible, runs on spare GPUs"),
    }


def _default_sla_classes() -> dict[str, SlaClassConfig]:
    return {
        "gold": SlaClassConfig(turnaround_s=None, horizon_s=4 * HOUR),
        "interactive": SlaClassConfig(turnaround_s=HOUR, horizon_s=HOUR),
        "standard": SlaClassConfig(turnaround_s=None, horizon_s=8 * HOUR),
    }


def _default_aliases() -> dict[str, str]:
    """QoS names found in public traces: openb (Kubernetes QoS and Alibaba's LS/BE), Slurm QOS."""
    return {"LS": "production", "Guaranteed": "production", "Burstable": "research", "BE": "best_effort",
            "BestEffort": "best_effort", "high": "production", "normal": "research", "low": "best_effort",
            "standby": "best_effort"}


def _default_weights() -> dict[str, float]:
    return {"tier": 3.0, "sla": 3.0, "age": 2.0, "fairshare": 1.5, "shortness": 60.0, "topology": 0.5}


class PolicyConfig(_Section):
    """The whole policy (see ``default_policy.yaml`` for every field with its meaning)."""

    name: str = "ours"
    description: str = ""
    ordering: str = Field("multifactor", description="order rule: multifactor, fifo, sjf, qssf, las, kueue")
    weights: dict[str, float] = Field(default_factory=_default_weights)
    factors: FactorSettings = FactorSettings()
    tiers: dict[str, TierConfig] = Field(default_factory=_default_tiers)
    default_tier: str = "research"
    tier_aliases: dict[str, str] = Field(default_factory=_default_aliases,
                                         description="other names for tiers (trace QoS)")
    sla_classes: dict[str, SlaClassConfig] = Field(default_factory=_default_sla_classes)
    teams: dict[str, TeamConfig] = Field(default_factory=dict)
    aging: AgingConfig = AgingConfig()
    queueing: QueueingConfig = QueueingConfig()
    quotas: QuotaConfig = QuotaConfig()
    reservation: ReservationConfig = ReservationConfig()
    placement: PlacementConfig = PlacementConfig()
    sizing: SizingConfig = SizingConfig()
    preemption: PreemptionConfig = PreemptionConfig()
    time_limit: TimeLimitConfig = TimeLimitConfig()
    las: LasConfig = LasConfig()
    residency: ResidencyConfig = ResidencyConfig()  # docs/residency.md

    @field_validator("ordering")
    @classmethod
    def _known_ordering(cls, v: str) -> str:
        if v not in ORDERING_NAMES:
            raise ValueError(f"unknown ordering {v!r}; choose one of {', '.join(sorted(ORDERING_NAMES))}")
        return v

    @field_validator("weights")
    @classmethod
    def _known_factors(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(FACTOR_NAMES))
        if unknown:
            raise ValueError(f"unknown factor(s) {', '.join(unknown)}; known: {', '.join(sorted(FACTOR_NAMES))}")
        bad = sorted(k for k, w in v.items() if not (w >= 0 and w < float("inf")))
        if bad:
            raise ValueError(f"weight of {', '.join(bad)} must be a finite number >= 0")
        return v

    @model_validator(mode="after")
    def _cross_references(self) -> PolicyConfig:
        tiers = set(self.tiers)
        if not tiers:
            raise ValueError("tiers: at least one tier is needed")
        if self.default_tier not in tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not one of the tiers ({', '.join(sorted(tiers))})")
        for name, tier in self.tiers.items():
            for other in tier.can_preempt:
                if other not in tiers:
                    raise ValueError(f"tiers.{name}.can_preempt names unknown tier {other!r}")
            if tier.sla_class is not None and tier.sla_class not in self.sla_classes:
                raise ValueError(f"tiers.{name}.sla_class names unknown SLA class {tier.sla_class!r}")
        for alias, target in self.tier_aliases.items():
            if target not in tiers:
                raise ValueError(f"tier_aliases.{alias} points to unknown tier {target!r}")
        if self.ordering == "multifactor" and sum(self.weights.values()) <= 0:
            raise ValueError("weights: the multifactor ordering needs at least one positive weight")
        return self

    # ------------------------------------------------------------------ derived values
    def tier_of(self, name: str | None) -> str:
        """The configured tier a job's tier name resolves to (aliases, then the default tier)."""
        if name is None:
            return self.default_tier
        if name in self.tiers:
            return name
        return self.tier_aliases.get(name, self.default_tier)

    def share_of(self, team: str | None) -> float:
        """Fair-share entitlement of a team (the default share for teams not listed)."""
        cfg = self.teams.get(team) if team is not None else None
        return cfg.share if cfg is not None else self.factors.fairshare.default_share

    @property
    def total_weight(self) -> float:
        return float(sum(self.weights.values()))
