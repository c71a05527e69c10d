"""``POST /v1/score``: one job, or ``{"jobs": [...]}``, in; a prediction and a decision per job out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from serving.schemas.explain import StartEstimatePublic
from serving.schemas.jobs import JobSpec
from serving.schemas.results import DecisionPublic, PredictionPublic

__all__ = ["ScoreBatch", "ScoreRequest", "ScoreResult", "ModelInfo", "ScoreResponse", "MAX_BATCH"]

#: Most jobs one request may carry (the service may allow fewer: PREDICTOR_MAX_BATCH).
MAX_BATCH = 1000


class ScoreBatch(BaseModel):
    """Several jobs, decided together as if all arrived at once."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_BATCH)


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "batch" if "jobs" in value else "single"
    return "batch" if isinstance(value, ScoreBatch) else "single"


ScoreRequest = Annotated[
    Annotated[JobSpec, Tag("single")] | Annotated[ScoreBatch, Tag("batch")],
    Discriminator(_shape),
]


class ScoreResult(BaseModel):
    job_id: str
    prediction: PredictionPublic
    decision: DecisionPublic
    start_estimate: StartEstimatePublic | None = None  # with ?start_estimate=true


class ModelInfo(BaseModel):
    """What answered: the model version, or the fallback and why."""

    version: str
    fallback: bool
    fallback_reason: str | None


class ScoreResponse(BaseModel):
    results: list[ScoreResult]
    model: ModelInfo
    scored_at: float
    degraded: Literal["deadline"] | None = Field(default=None, description=(
        "present when the service answered with less than usual: \"deadline\" = the analytic fallback "
        "answered because the model would have missed the caller's X-Deadline-Ms"))
