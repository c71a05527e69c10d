"""``POST /v1/score``: predictions and decisions for jobs, changing nothing."""

from __future__ import annotations

import time
from typing import Annotated

import numpy as np
from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import Response

from predictor.engine.queue_picture import frame_of
from serving.convert import job_columns, score_response
from serving.deps import PrincipalDep, ServiceDep
from serving.routers.explain import candidate_starts
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
                    "time for a batch)."))] = True,
                start_estimate: Annotated[bool, Query(description=(
                    "true: each result also says when the job would start if submitted now (p10/p50/p90, "
                    "from the tracked queue's plan; see docs/explain.md)."))] = False) -> Response:
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
        scored, model = service.engine.score_with_model(frame_of(columns), now, columns=columns, explain=explain)
    service.metrics.count_decisions(((s.decision.tier, s.decision.action) for s in scored), source="score")
    fallbacks = sum(s.prediction.fallback for s in scored)
    if fallbacks:
        service.metrics.fallback_predictions.inc(fallbacks)
    starts = None
    if start_estimate:
        preds = [s.prediction for s in scored]
        starts = candidate_starts(service, specs, [s.decision for s in scored],
                                  [[getattr(p, f"duration_{q}_s") for p in preds] for q in ("p10", "p50", "p90")],
                                  [np.nan if p.peak_vram_upper_mib is None else p.peak_vram_upper_mib for p in preds],
                                  now)
    return score_response(scored, model, now, start_estimates=starts)
