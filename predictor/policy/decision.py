"""The Decision contract: what the rules layer decides for one job. Computing it performs nothing;
adapters (Kueue, Slurm) and the replay simulator act on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, NewType

__all__ = [
    "Priority",
    "FactorScore",
    "Placement",
    "Reservation",
    "Victim",
    "EvictionPlan",
    "Decision",
    "KUEUE_PRIORITY_MAX",
    "SLURM_PRIORITY_MAX",
]

#: The integer priority a Decision carries (0 .. SLURM_PRIORITY_MAX; higher runs first).
Priority = NewType("Priority", int)

#: Kueue ``Workload.spec.priority`` is an int32.
KUEUE_PRIORITY_MAX = 2**31 - 1
#: Slurm job priority is a uint32; 0 means held, so scheduled jobs use 1 .. 2**32 - 2.
SLURM_PRIORITY_MAX = 2**32 - 2


class FactorScore(NamedTuple):
    """One factor of the priority: its normalised value in [0, 1], its weight, and what it adds.

    A named tuple rather than a frozen dataclass: as immutable, and a batch of 100 scored jobs makes
    ~1,000 of them, which a tuple builds in a third of the time (``docs/serving.md``)."""

    name: str
    value: float
    weight: float
    detail: str = ""

    @property
    def contribution(self) -> float:
        return self.value * self.weight


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a gang goes: GPUs per node, the placement class it lands in and its predicted slowdown."""

    gpu_type: str
    gpus_by_node: tuple[tuple[str, int], ...]  # ((node name, gpu count), ...)
    placement_class: str
    slowdown: float = 1.0
    gpu_indices: tuple[tuple[str, tuple[int, ...]], ...] = ()  # ((node, (gpu idx, ...)), ...) where known

    @property
    def num_gpus(self) -> int:
        return sum(n for _, n in self.gpus_by_node)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.gpus_by_node)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity held for a job that cannot start now: from ``start_ts`` until ``expires_ts``."""

    job_id: str
    start_ts: float
    expires_ts: float
    placement: Placement
    predicted_end_ts: float  # start + predicted p90 duration on this placement


@dataclass(frozen=True, slots=True)
class Victim:
    """A running job to preempt, and the work it loses (time since its last checkpoint)."""

    job_id: str
    team: str | None
    priority: int
    gpus_by_node: tuple[tuple[str, int], ...]
    work_lost_s: float
    gpu_hours_lost: float


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """A graceful eviction an adapter can execute: signal, wait ``grace_s``, then requeue."""

    for_job_id: str
    victims: tuple[Victim, ...]
    signal: str = "SIGTERM"
    grace_s: float = 120.0
    requeue: bool = True

    @property
    def gpu_hours_lost(self) -> float:
        return sum(v.gpu_hours_lost for v in self.victims)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one job, and why.

    ``priority`` is the integer to hand to the scheduler (Slurm range; ``kueue_priority`` maps it
    into int32). ``factors`` explain it: priority is proportional to the sum of contributions.
    ``action`` is one of ``start`` (placement given), ``reserve`` (reservation given), ``preempt``
    (eviction plan given; the job starts once victims are gone), ``wait`` (nothing to do yet), or
    ``reject`` (cannot ever run on this cluster; reason says why).
    """

    job_id: str
    priority: Priority
    factors: tuple[FactorScore, ...]
    action: str
    tier: str
    queue: str | None = None
    flavor: str | None = None  # GPU type chosen by sizing
    num_gpus: int = 0
    placement: Placement | None = None
    reservation: Reservation | None = None
    eviction: EvictionPlan | None = None
    time_limit_s: float | None = None  # suggested limit (predicted p90 plus margin) where policy says so
    sla_at_risk: bool = False  # cannot meet its deadline even if started now
    warnings: tuple[str, ...] = ()
    reason: str = ""
    model_version: str = "fallback"
    fallback: bool = False
    decided_at: float = 0.0
    constraint: str | None = None  # where it may run (docs/residency.md); adapters carry it to the scheduler
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def score(self) -> float:
        return sum(f.contribution for f in self.factors)

    @property
    def kueue_priority(self) -> int:
        """The priority scaled into Kueue's int32 ``Workload.spec.priority``."""
        return min(int(self.priority) // 2, KUEUE_PRIORITY_MAX)
