"""``GET /v1/teams/{team}``: one team's fair-share explained (usage over time, factor, recovery)."""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, status

from predictor.queue.teams_view import team_fairshare
from serving.deps import PrincipalDep, ServiceDep
from serving.schemas.explain import TeamFairSharePublic

router = APIRouter(prefix="/v1", tags=["queue"])


@router.get("/teams/{team}", response_model=TeamFairSharePublic,
            summary="A team's decayed usage over time, share, factor and when the factor recovers",
            responses={404: {"description": "no such team in the policy or the usage records"}})
def get_team(team: str, service: ServiceDep, principal: PrincipalDep) -> dict:
    """Decayed GPU-hours over the last two half-lives, the fair-share factor (2^(-usage/share)), and
    how long until the factor is back to 0.5 with every team holding the GPUs it holds now."""
    try:
        return team_fairshare(service.db, service.engine, team, time.time())
    except KeyError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc.args[0])) from None
