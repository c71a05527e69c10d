"""Builders for replay tests (imported by the test modules of this folder): job tables, small clusters, and a scripted rules layer.

``ScriptedRules`` is *not* a scheduler: it hands the replay the decisions a test wrote down for a
given instant, so the replay's physics (progress, eviction losses, crashes, event ordering) can be
checked against hand-computed numbers independently of any policy. Policy behaviour is tested
through the real rules layer in ``test_replay_policies.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Reservation, Victim
from predictor.sim.replay import SimView


class JobRows:
    """Fluent builder of a canonical job table: ``JobRows().add("a", gpus=8, run=100)``."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, job_id: str, *, gpus: float = 1, run: float = 100.0, submit: float = 0.0, team: str = "t1",
            milli: float | None = None, checkpoint: float | None = None, peak_mib: float | None = None,
            deadline: float | None = None, **extra) -> JobRows:
        row = {
            "job_id": job_id, "user": "u", "team": team, "num_gpus": gpus, "gpu_milli": milli,
            "submit_ts": 1_700_000_000.0 + submit, "duration_s": run, "state": "COMPLETED",
            "checkpoint_interval_s": checkpoint, "peak_vram_mib": peak_mib,
            "deadline_ts": None if deadline is None else 1_700_000_000.0 + deadline,
        }
        row.update(extra)
        self.rows.append(row)
        return self

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


@dataclass
class Plan:
    decisions: list[Decision]
    revisit_at_ts: float | None = None


def decision(job_id: str, action: str, placement: Placement | None = None, **kw) -> Decision:
    return Decision(job_id=job_id, priority=Priority(1), factors=(), action=action, tier="research",
                    placement=placement, **kw)


def on(node: str, count: int, cls: str = "nvlink", indices: tuple[int, ...] | None = None,
       gpu_type: str = "A100-80GB") -> Placement:
    return Placement(gpu_type=gpu_type, gpus_by_node=((node, count),), placement_class=cls,
                     gpu_indices=((node, indices),) if indices is not None else ())


def evict(for_job: str, *victims: str, grace: float = 0.0) -> EvictionPlan:
    vs = tuple(Victim(job_id=v, team=None, priority=0, gpus_by_node=(), work_lost_s=0.0, gpu_hours_lost=0.0)
               for v in victims)
    return EvictionPlan(for_job_id=for_job, victims=vs, grace_s=grace)


def reservation(job_id: str, start_ts: float, expires_ts: float, placement: Placement) -> Reservation:
    return Reservation(job_id=job_id, start_ts=start_ts, expires_ts=expires_ts, placement=placement,
                       predicted_end_ts=start_ts + 1.0)


@dataclass
class ScriptedRules:
    """Returns, at each decide() call, ``script(view)``'s decisions; records the calls."""

    script: Callable[[SimView], list[Decision]]
    name: str = "scripted"
    revisit: dict[float, float] = field(default_factory=dict)  # instant -> the plan's revisit_at_ts
    calls: list[float] = field(default_factory=list)

    def plan(self, view: SimView) -> Plan:
        self.calls.append(view.now)
        return Plan(self.script(view), self.revisit.get(view.now))

    def may_evict(self, pending, running) -> bool:
        return True

    def team_shares(self) -> dict[str, float]:
        return {}

    def job_started(self, j: int, decision: Decision) -> None:
        pass

    def job_stopped(self, j: int, begin_s: float, end_s: float, progress) -> None:
        pass
