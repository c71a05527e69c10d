"""The scheduling policy: read it; admins replace it (validated, audited, streamed to every worker)."""

from __future__ import annotations

from fastapi import APIRouter

from predictor.policy.config import PolicyConfig
from serving.deps import AdminOnly, PrincipalDep, ServiceDep
from serving.schemas.policy import PolicyPublic

router = APIRouter(prefix="/v1", tags=["policy"])


@router.get("/policy", response_model=PolicyPublic, summary="The policy in force")
def get_policy(service: ServiceDep, principal: PrincipalDep) -> dict:
    return {"policy_id": service.queue.policy_id, "policy": service.engine.policy}


@router.put("/policy", response_model=PolicyPublic, summary="Replace the policy (admin)",
            responses={403: {"description": "not an admin"}})
def put_policy(body: PolicyConfig, service: ServiceDep, admin: AdminOnly) -> dict:
    """The whole policy document (fields left out take their defaults); unknown fields and invalid
    values are 422s naming the field. The queue is re-planned under the new policy at once."""
    policy_id = service.queue.put_policy(body, admin.as_actor())
    return {"policy_id": policy_id, "policy": service.engine.policy}
