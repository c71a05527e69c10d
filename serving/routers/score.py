"""``POST /v1/score``: predictions and decisions for jobs, changing nothing."""

from __future__ import annotations

import time
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from predictor.engine.engine import ScoredBatch
from serving.convert import batch_response, job_columns
from serving.deps import PrincipalDep, ServiceDep
from serving.load_shedding import alone, arrived_at
from serving.routers.explain import candidate_starts
from serving.schemas.jobs import JobSpec
from serving.schemas.score import ScoreRequest, ScoreResponse
from serving.service import Service

router = APIRouter(prefix="/v1", tags=["score"])

DEADLINE_HELP = (
    "Milliseconds the caller still waits for this answer, counted from when the service reads the request. "
    "If the model would answer later (from what it took lately for a batch this size, plus any wait for a "
    "free slot), the analytic fallback answers instead and the response says \"degraded\": \"deadline\". "
    "Default: PREDICTOR_DEADLINE_MS, or none.")


@router.post("/score", response_model=ScoreResponse, summary="Score one job or a batch (no state change)",
             responses={422: {"description": "invalid job fields (each error names its field)"},
                        503: {"description": "over capacity: retry after the Retry-After header's seconds"}})
async def score(body: ScoreRequest, request: Request, service: ServiceDep, principal: PrincipalDep,
                explain: Annotated[bool, Query(description=(
                    "false: the same predictions and decisions (action, priority, factor values and weights, "
                    "placement, reservation), without the readable parts: factor details and warnings are "
                    "empty and the reason is terse. Less work per job (about a third of the rules layer's "
                    "time for a batch)."))] = True,
                start_estimate: Annotated[bool, Query(description=(
                    "true: each result also says when the job would start if submitted now (p10/p50/p90, "
                    "from the tracked queue's plan; see docs/explain.md)."))] = False,
                x_deadline_ms: Annotated[float | None, Header(gt=0, le=3_600_000, description=DEADLINE_HELP)] = None,
                ) -> Response:
    """Predict duration, peak memory and placement slowdown, and decide priority, flavor, placement or
    reservation for each job as if it were submitted now. A batch is decided together. Nothing is
    stored; ``model.fallback`` says whether the analytic fallback answered, ``degraded`` (present
    only then) that it answered because the model would have missed the caller's deadline."""
    specs = [body] if isinstance(body, JobSpec) else body.jobs
    settings = service.settings
    if len(specs) > settings.max_batch:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{
            "loc": ["body", "jobs"], "type": "too_long",
            "msg": f"at most {settings.max_batch} jobs per request (PREDICTOR_MAX_BATCH)"}])
    deadline_ms = x_deadline_ms if x_deadline_ms is not None else settings.deadline_ms
    degraded = None
    if deadline_ms is not None and not service.engine.model.current.fallback:
        left_ms = deadline_ms - 1000.0 * (time.perf_counter() - arrived_at(request.scope))
        if left_ms < service.score_cost.estimate_ms(len(specs)):
            degraded = "deadline"
    now = time.time()
    columns = job_columns(specs, now)
    reason = None if degraded is None else f"deadline: the model would answer after the caller's {deadline_ms:g} ms"
    with service.metrics.time_decision("score"):
        if alone(request.scope) and service.score_cost.estimate_ms(len(specs)) <= settings.inline_score_ms:
            # the only request in this worker, and a short one: on the event loop. A hand-off to a
            # thread costs ~0.1 ms of CPU, and the thread's cold caches more (about a fifth of a
            # single job's CPU, docs/serving.md); a request read meanwhile waits at most this long
            service.metrics.inline_scores.inc()
            batch, spent_s = _score(service, columns, now, explain, reason)
        else:
            # in a worker thread: the event loop stays free to read, count and shed the requests that
            # arrive meanwhile (serving.load_shedding bounds how many score at once)
            batch, spent_s = await run_in_threadpool(_score, service, columns, now, explain, reason)
    if degraded is None and not batch.model.fallback:
        service.score_cost.observe(len(specs), spent_s)
    if degraded is not None:
        service.metrics.degraded_requests.labels(reason=degraded).inc()
    service.metrics.count_decisions(((d.tier, d.action) for d in batch.decisions), source="score")
    fallbacks = int(np.count_nonzero(batch.predicted["fallback"]))
    if fallbacks:
        service.metrics.fallback_predictions.inc(fallbacks)
    starts = None
    if start_estimate:
        pred = batch.predicted
        starts = candidate_starts(service, specs, batch.decisions,
                                  [np.asarray(pred[f"duration_{q}_s"], dtype=np.float64).tolist() for q in ("p10", "p50", "p90")],
                                  np.asarray(pred["peak_vram_upper_mib"], dtype=np.float64).tolist(), now)
    return batch_response(batch, now, degraded=degraded, start_estimates=starts)


def _score(service: Service, columns: dict, now: float, explain: bool, fallback_reason: str | None,
           ) -> tuple[ScoredBatch, float]:
    started = time.perf_counter()
    batch = service.engine.score_batch(None, now, columns=columns, explain=explain,
                                       fallback_reason=fallback_reason)
    return batch, time.perf_counter() - started
