"""The queue in priority order, the reservations, and the teams' fair-share."""

from __future__ import annotations

import time

from fastapi import APIRouter

from predictor.queue.views import queue_view, reservations_view, teams_view
from serving.deps import PrincipalDep, ServiceDep
from serving.routers.explain import queue_estimates
from serving.schemas.queue import QueueView, ReservationList, TeamList

router = APIRouter(prefix="/v1", tags=["queue"])


@router.get("/queue", response_model=QueueView, summary="Pending jobs in priority order, then running jobs")
def get_queue(service: ServiceDep, principal: PrincipalDep) -> dict:
    """Each pending job carries the decision made for it now: priority with each factor's value,
    weight and contribution, action, flavor, placement or reservation, and a readable reason.
    Members see their team's jobs (ranks are those of the whole queue)."""
    now = time.time()
    estimates = queue_estimates(service)
    return queue_view(service.db, service.engine, now, principal.team if principal.is_member else None,
                      start_estimate=lambda job_id: estimates.estimate_of(job_id, now))


@router.get("/reservations", response_model=ReservationList, summary="Capacity reserved for pending jobs")
def get_reservations(service: ServiceDep, principal: PrincipalDep) -> dict:
    return reservations_view(service.db, time.time(), principal.team if principal.is_member else None)


@router.get("/teams", response_model=TeamList, summary="Per-team usage, share and fair-share factor")
def get_teams(service: ServiceDep, principal: PrincipalDep) -> dict:
    return teams_view(service.db, service.engine, time.time())
