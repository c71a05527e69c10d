"""Prediction and decision as served (mirrors ``predictor.store.codec``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["DurationPublic", "PredictionPublic", "FactorPublic", "GpusOnNode", "PlacementPublic",
           "ReservationPublic", "VictimPublic", "EvictionPublic", "DecisionPublic", "ModelStatusPublic"]


class DurationPublic(BaseModel):
    p10_s: float | None
    p50_s: float | None
    p90_s: float | None


class PredictionPublic(BaseModel):
    """What the model says about a job: duration quantiles, peak memory per GPU, slowdown per placement."""

    job_id: str
    duration: DurationPublic
    peak_vram_mib: float | None
    peak_vram_upper_mib: float | None
    fits_gpu_types: list[str]
    slowdown: dict[str, float | None]
    model_version: str
    fallback: bool
    fallback_reason: str | None


class FactorPublic(BaseModel):
    name: str
    value: float | None
    weight: float | None
    contribution: float | None
    detail: str


class GpusOnNode(BaseModel):
    node: str
    gpus: int


class PlacementPublic(BaseModel):
    gpu_type: str
    gpus_by_node: list[GpusOnNode]
    placement_class: str
    slowdown: float | None
    num_gpus: int


class ReservationPublic(BaseModel):
    job_id: str
    start_ts: float | None
    expires_ts: float | None
    predicted_end_ts: float | None
    placement: PlacementPublic | None


class VictimPublic(BaseModel):
    job_id: str
    team: str | None
    priority: int
    gpus_by_node: list[GpusOnNode]
    work_lost_s: float | None
    gpu_hours_lost: float | None


class EvictionPublic(BaseModel):
    for_job_id: str
    victims: list[VictimPublic]
    signal: str
    grace_s: float | None
    requeue: bool
    gpu_hours_lost: float | None


class DecisionPublic(BaseModel):
    """What to do with a job and why: priority with its factor breakdown, placement, reservation."""

    job_id: str
    priority: int
    kueue_priority: int
    score: float | None
    factors: list[FactorPublic]
    action: str
    tier: str
    queue: str | None
    flavor: str | None
    num_gpus: int
    placement: PlacementPublic | None
    reservation: ReservationPublic | None
    eviction: EvictionPublic | None
    time_limit_s: float | None
    sla_at_risk: bool
    warnings: list[str]
    reason: str
    model_version: str
    fallback: bool
    decided_at: float | None
    constraint: str | None = Field(default=None, description="where it may run (docs/residency.md)")
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelStatusPublic(BaseModel):
    """The model answering requests, or the fallback and why."""

    uri: str
    version: str
    fallback: bool
    fallback_reason: str | None
    loaded_at: float | None
    last_checked_at: float | None
    last_error: str | None
    compiling: bool = Field(default=False, description="the version answers with LightGBM while its "
                            "boosters are compiled to native code; each switches as it is ready")
    boosters: int | None = Field(default=None, description="boosters of the version being or last compiled")
    boosters_compiled: int | None = Field(default=None, description="of them compiled so far (docs/serving.md)")
