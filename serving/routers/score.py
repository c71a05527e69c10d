"""``POST /v1/score``: predictions and decisions for jobs, changing nothing."""

from __future__ import annotations

import time
from typing import Annotated

import numpy as np
from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import Response

from predictor.engine.queue_picture import frame_of
from serving.convert import batch_response, job_columns
from serving.deps import PrincipalDep, ServiceDep
from serving.schemas.jobs import JobSpec
from serving.schemas.score import ScoreRequest, ScoreResponse

router = APIRouter(prefix="/v1", tags=["score"])


@router.post("/score", response_model=ScoreResponse, summary="Score one job or a batch (no state change)",
             responses={422: {"description": "invalid job fields (each error names its field)"}})
async def score(body: ScoreRequest, service: ServiceDep, principal: PrincipalDep,
                explain: Annotated[bool, Query(description=(
                    "false: the same predictions and decisions (action, priority, factor values and weights, "
                    "placement, reservation), without the readable parts: factor details and warnings are "
                    "empty and the reason is terse. Less work per job (about a third of the rules layer's "
                    "time for a batch)."))] = True) -> Response:
    """Predict duration, peak memory and placement slowdown, and decide priority, flavor, placement or
    reservation for each job as if it were submitted now. A batch is decided together. Nothing is
    stored; ``model.fallback`` says whether the analytic fallback answered."""
    specs = [body] if isinstance(body, JobSpec) else body.jobs
    if len(specs) > service.settings.max_batch:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{
            "loc": ["body", "jobs"], "type": "too_long",
            "msg": f"at most {service.settings.max_batch} jobs per request (PREDICTOR_MAX_BATCH)"}])
    now = time.time()
    columns = job_columns(specs, now)
    with service.metrics.time_decision("score"):
        batch = service.engine.score_batch(frame_of(columns), now, columns=columns, explain=explain)
    service.metrics.count_decisions(((d.tier, d.action) for d in batch.decisions), source="score")
    fallbacks = int(np.count_nonzero(batch.predicted["fallback"]))
    if fallbacks:
        service.metrics.fallback_predictions.inc(fallbacks)
    return batch_response(batch, now)
