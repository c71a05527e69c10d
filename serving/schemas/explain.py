"""Start estimates, explanations and team fair-share as served (``/v1/jobs/{id}/explain``, ``/v1/teams/{team}``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["StartEstimatePublic", "IntervalCalibrationPublic", "ExplainPublic", "PlanAgePublic", "TeamUsagePoint", "TeamFairSharePublic"]


class IntervalCalibrationPublic(BaseModel):
    """Rule *calibrated interval*: the factors on the p10 and p90 waits learnt from past estimates
    against the jobs' actual starts (1 and 1 until ``samples`` reaches the minimum)."""

    p10_wait_factor: float
    p90_wait_factor: float
    calibrated: bool
    samples: int = Field(description="started jobs in the calibration window")
    rule: str = ""


class StartEstimatePublic(BaseModel):
    """When the job is estimated to start (epoch seconds; null where it can never start here)."""

    p10_ts: float | None = Field(description="early end of the interval (every duration at its p10, the wait "
                                             "rescaled by interval.p10_wait_factor)")
    p50_ts: float | None = Field(description="the estimate (every duration at its p50)")
    p90_ts: float | None = Field(description="late end of the interval (every duration at its p90, the wait "
                                             "rescaled by interval.p90_wait_factor)")
    p50_wait_s: float | None = None
    basis: str = Field(description="starts now, preempts, planned, never")
    time_limit_ts: float | None = Field(None, description="the start planned on time limits (squeue --start's view)")
    position: int | None = Field(None, description="for a scored job: its place in the priority order")
    interval: IntervalCalibrationPublic | None = None
    rule: str = ""


class PlanAgePublic(BaseModel):
    """Which plan the explanation reads (rule *latest plan*): it may predate the last queue change."""

    made_at: float = Field(description="when the plan was decided (epoch seconds)")
    age_s: float = Field(description="its age at the answer")
    as_of_seq: int = Field(description="the stream seq of the queue it was decided on")
    queue_seq: int = Field(description="the stream seq of the queue now")
    current: bool = Field(description="true when the queue has not changed since the plan")
    refresh_cpu_s: float = Field(description="CPU seconds that plan and its estimates took")
    rule: str = ""


class ExplainPublic(BaseModel):
    """Why a pending job is not running: ``summary`` sentences, then the ``chain`` of reasons (asks,
    could_run_on, held_by, ahead, reservation, limits, decision, start_estimate, what_if), each naming
    the rule it comes from (see docs/explain.md)."""

    job_id: str
    as_of: float
    summary: list[str]
    chain: dict[str, Any]
    plan: PlanAgePublic | None = None


class TeamUsagePoint(BaseModel):
    ts: float
    usage_gpu_hours: float
    factor: float


class TeamFairSharePublic(BaseModel):
    team: str
    share: float
    share_fraction: float
    usage_gpu_hours: float
    usage_fraction: float
    factor: float
    running_gpus: float
    over_share: bool
    recovers_in_s: float | None = Field(description="until the factor is back to 0.5 at the current rates "
                                                    "(0: not over its share; null: never at these rates)")
    factor_in_one_half_life: float
    usage_history: list[TeamUsagePoint]
    half_life_s: float
    as_of: float
    rule: str
