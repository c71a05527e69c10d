"""``GET /v1/jobs/{job_id}/explain``: why a pending job is not running, and when it will start."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from fastapi import APIRouter, HTTPException, status

from predictor.policy.decision import Decision
from predictor.queue.queue_estimates import QueueEstimates
from serving.deps import PrincipalDep, ServiceDep
from serving.schemas.explain import ExplainPublic
from serving.schemas.jobs import JobSpec
from serving.service import Service

router = APIRouter(prefix="/v1", tags=["jobs"])


def queue_estimates(service: Service) -> QueueEstimates:
    """The service's kept plan and start estimates (made on first use; one per service)."""
    kept = getattr(service, "_queue_estimates", None)
    if kept is None:
        kept = QueueEstimates(service.engine, service.db)
        service._queue_estimates = kept  # type: ignore[attr-defined]  # noqa: SLF001
    return kept


def candidate_starts(service: Service, specs: Sequence[JobSpec], decisions: Sequence[Decision],
                     durations: Sequence[Sequence[float]], peak_upper_mib: Sequence[float], now: float) -> list[dict]:
    """When each scored job would start if submitted now (``QueueEstimates.candidate``): ``decisions``
    in the order of ``specs``, ``durations`` the (p10, p50, p90) columns of their predictions (seconds),
    ``peak_upper_mib`` their predicted peak memory upper bounds (NaN: none)."""
    est = queue_estimates(service)
    p10, p50, p90 = (np.asarray(d, dtype=np.float64) for d in durations)
    peak = np.asarray(peak_upper_mib, dtype=np.float64)
    out = []
    for k, (spec, d) in enumerate(zip(specs, decisions, strict=True)):
        out.append(est.candidate(
            d, num_gpus=int(spec.num_gpus or 1), gpu_milli=int(spec.gpu_milli or 1000),
            peak_upper_mib=float(peak[k]) if np.isfinite(peak[k]) else None,
            requested=(spec.gpu_type,) if spec.gpu_type else (),
            durations=(float(p10[k]), float(p50[k]), float(p90[k])), now=now))
    return out


@router.get("/jobs/{job_id}/explain", response_model=ExplainPublic,
            summary="Why a pending job is not running: the chain of reasons and the change that starts it soonest",
            responses={404: {"description": "no pending job with this id (or not the member's team)"}})
def explain(job_id: str, service: ServiceDep, principal: PrincipalDep) -> dict:
    """What the job asks (and whether that is sensible), which GPU types and nodes could hold it, what
    holds them and until when, who is ahead and why (factor breakdowns), reservations, quota and
    fair-share limits, its start estimate (p10/p50/p90) and what-ifs. Each reason names its rule."""
    est = queue_estimates(service)
    now = time.time()
    try:
        doc = est.explain(job_id, now)
    except KeyError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pending job {job_id!r} (running, ended and unknown "
                            "jobs have nothing to explain)") from None
    if principal.is_member:
        team = doc["chain"]["limits"].get("fairshare", {}).get("team")
        if team != principal.team:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pending job {job_id!r}")
        for entry in doc["chain"]["ahead"]["just_ahead"]:  # other teams' jobs: their factors, not their ids
            if entry["team"] != principal.team:
                entry["job_id"] = None
    return doc
