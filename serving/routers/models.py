"""The model answering requests; admins can make the service check the registry now."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from predictor.engine.wiring import promote_model
from predictor.store import record_audit
from serving.deps import AdminOnly, PrincipalDep, ServiceDep
from serving.schemas.models import PromotionRequest, PromotionResult
from serving.schemas.results import ModelStatusPublic

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models", response_model=ModelStatusPublic, summary="The loaded model version (or the fallback)")
def get_models(service: ServiceDep, principal: PrincipalDep) -> ModelStatusPublic:
    return service.model_status()


@router.post("/models/reload", response_model=ModelStatusPublic, summary="Check the registry alias now (admin)",
             responses={403: {"description": "not an admin"}})
async def reload_model(service: ServiceDep, admin: AdminOnly) -> ModelStatusPublic:
    """Load the version the alias points at if it moved (this worker; others follow at their next poll).
    Answers once the version is swapped in; its boosters are compiled after that (``compiling``)."""
    swapped = await run_in_threadpool(service.engine.model.check_once, warmup="background")
    status = service.model_status()
    with service.db.writing() as s:
        record_audit(s, admin.as_actor(), "model.reload", service.engine.model.uri,
                     {"swapped": swapped, "version": status.version, "fallback": status.fallback}, time.time())
    return status


@router.post("/models/promote", response_model=PromotionResult, summary="Promote a model version (admin)",
             responses={403: {"description": "not an admin"}, 422: {"description": "no such alias, or force without reason"}})
async def promote(body: PromotionRequest, service: ServiceDep, admin: AdminOnly) -> PromotionResult:
    """Compare the ``source`` version with the ``target`` one on the same held-out jobs and move the
    alias if it is not worse (``models.registry.promote``); then load it. Audited either way."""
    report = await run_in_threadpool(promote_model, service.settings, source=body.source, target=body.target,
                                     force=body.force, reason=body.reason)
    if report.get("promoted"):
        await run_in_threadpool(service.engine.model.check_once, warmup="background")
    status = service.model_status()
    details = {k: v for k, v in report.items() if k not in ("promoted", "unchanged", "version", "previous", "reason")}
    with service.db.writing() as s:
        record_audit(s, admin.as_actor(), "model.promote", f"{body.source}->{body.target}",
                     {**body.model_dump(), "promoted": bool(report.get("promoted")), "version": report.get("version"),
                      "outcome": report.get("reason")}, time.time())
    return PromotionResult(promoted=bool(report.get("promoted")), unchanged=bool(report.get("unchanged")),
                           version=report.get("version"),
                           previous=report.get("previous"), reason=report.get("reason"), details=details, model=status)
