"""The model answering requests; admins can make the service check the registry now."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from predictor.store import record_audit
from serving.deps import AdminOnly, PrincipalDep, ServiceDep
from serving.schemas.results import ModelStatusPublic

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models", response_model=ModelStatusPublic, summary="The loaded model version (or the fallback)")
def get_models(service: ServiceDep, principal: PrincipalDep) -> ModelStatusPublic:
    return service.model_status()


@router.post("/models/reload", response_model=ModelStatusPublic, summary="Check the registry alias now (admin)",
             responses={403: {"description": "not an admin"}})
async def reload_model(service: ServiceDep, admin: AdminOnly) -> ModelStatusPublic:
    """Load the version the alias points at if it moved (this worker; others follow at their next poll)."""
    swapped = await run_in_threadpool(service.engine.model.check_once)
    status = service.model_status()
    with service.db.writing() as s:
        record_audit(s, admin.as_actor(), "model.reload", service.engine.model.uri,
                     {"swapped": swapped, "version": status.version, "fallback": status.fallback}, status.last_checked_at or 0.0)
    return status
