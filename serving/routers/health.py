"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from pydantic import BaseModel

from serving.deps import ServiceDep
from serving.metrics import CONTENT_TYPE
from serving.schemas.results import ModelStatusPublic

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str  # ready | degraded (answering with the fallback) | not_ready
    database: str
    model: ModelStatusPublic
    stream_last_seq: int
    problems: list[str]


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, summary="Readiness: store reachable and a predictor in place",
            responses={503: {"model": Readiness, "description": "not ready"}})
def readyz(service: ServiceDep, response: Response) -> Readiness:
    """``ready``; ``degraded`` (200) while scoring with the fallback, saying why; 503 when the store is
    unreachable or the first model load has not finished."""
    problems: list[str] = []
    try:
        service.db.ping()
        database = "ok"
    except Exception as exc:  # report, don't raise: this is the health check
        database = f"unreachable: {str(exc).splitlines()[0][:200]}"
        problems.append("database " + database)
    model = service.model_status()
    if not service.engine.model.first_check_done.is_set():
        problems.append("model still loading")
    if problems:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        state = "not_ready"
    elif model.fallback:
        state = "degraded"
        problems.append(f"scoring with the fallback: {model.fallback_reason}")
    else:
        state = "ready"
    return Readiness(status=state, database=database, model=model, stream_last_seq=service.hub.last_seq,
                     problems=problems)


@router.get("/metrics", summary="Prometheus metrics (text format)",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
def metrics(service: ServiceDep) -> Response:
    service.refresh_gauges()
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)
