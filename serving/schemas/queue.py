"""Queue, reservations and teams as served."""

from __future__ import annotations

from pydantic import BaseModel

from serving.schemas.explain import StartEstimatePublic
from serving.schemas.jobs import JobPublic
from serving.schemas.results import PlacementPublic

__all__ = ["QueueEntry", "QueueView", "ReservationEntry", "ReservationList", "TeamUsage", "TeamList"]


class QueueEntry(JobPublic):
    """A live job; pending ones carry the decision made for them now and their rank (1 = next)."""

    rank: int | None
    start_estimate: StartEstimatePublic | None = None  # pending jobs: when they are estimated to start


class QueueView(BaseModel):
    jobs: list[QueueEntry]
    as_of: float
    last_seq: int


class ReservationEntry(BaseModel):
    job_id: str
    team: str | None
    start_ts: float
    expires_ts: float
    predicted_end_ts: float
    gpu_type: str
    num_gpus: int
    placement: PlacementPublic | None
    updated_at: float


class ReservationList(BaseModel):
    reservations: list[ReservationEntry]
    as_of: float


class TeamUsage(BaseModel):
    team: str
    share: float
    usage_gpu_hours: float
    factor: float
    running_gpus: float
    pending_jobs: int


class TeamList(BaseModel):
    teams: list[TeamUsage]
    half_life_s: float
    as_of: float
