"""The scheduling policy: read it; admins replace it (PUT) or change part of it (PATCH, a JSON merge
patch). Validated strictly, audited, and streamed to every worker."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from predictor.policy.config import PolicyConfig
from serving.deps import AdminOnly, PrincipalDep, ServiceDep
from serving.schemas.policy import PolicyPublic, PolicyPut, merge_patch

router = APIRouter(prefix="/v1", tags=["policy"])

_CHANGE_ERRORS = {403: {"description": "not an admin"},
                  409: {"description": "another policy was put in force since the policy_id given"}}


def _strict(model: type[BaseModel], document: str | bytes, loc: tuple[str, ...] = ("body",)) -> Any:
    """``model`` from JSON in strict mode (no string-to-number or string-to-bool coercion), or a 422
    naming each field."""
    try:
        return model.model_validate_json(document, strict=True)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": (*loc, *e["loc"])} for e in exc.errors()]) from None


async def _strict_put(request: Request) -> PolicyPut:
    return _strict(PolicyPut, await request.body())


async def _patch_document(request: Request) -> dict:
    try:
        patch = json.loads(await request.body())
    except ValueError:  # no body, or not JSON
        raise RequestValidationError([{"loc": ("body",), "msg": "a JSON merge patch (an object) is required",
                                       "type": "json_invalid", "input": None}]) from None
    if not isinstance(patch, dict):
        raise RequestValidationError([{"loc": ("body",), "msg": "a merge patch is a JSON object",
                                       "type": "dict_type", "input": patch}])
    return patch


@router.get("/policy", response_model=PolicyPublic, summary="The policy in force")
def get_policy(service: ServiceDep, principal: PrincipalDep) -> dict:
    return {"policy_id": service.queue.policy_id, "policy": service.engine.policy}


@router.put("/policy", response_model=PolicyPublic, summary="Replace the policy (admin)", responses=_CHANGE_ERRORS)
def put_policy(admin: AdminOnly, body: PolicyPut, strict: Annotated[PolicyPut, Depends(_strict_put)],
               service: ServiceDep) -> dict:
    """The document ``GET /v1/policy`` returns, changed or not: every section is required (a section
    left out is a 422, never a silent reset to its default), and a map given (``weights``, ``teams``,
    ``tiers``...) is the whole map: a factor left out of ``weights`` is off. To change part of the
    policy, PATCH it. With ``policy_id``, the PUT is refused (409) if another policy was put in force
    since that one. The queue is re-planned under the new policy at once."""
    policy = PolicyConfig.model_validate(strict.policy.model_dump())
    policy_id = service.queue.put_policy(lambda _current: policy, admin.as_actor(),
                                         expected_id=strict.policy_id, check_expected="policy_id" in
                                         strict.model_fields_set)
    return {"policy_id": policy_id, "policy": service.engine.policy}


@router.patch("/policy", response_model=PolicyPublic, summary="Change part of the policy (admin)",
              responses=_CHANGE_ERRORS)
def patch_policy(admin: AdminOnly, body: Annotated[dict[str, Any], Body(
                     media_type="application/merge-patch+json",
                     description="a JSON merge patch (RFC 7386) of the policy document: objects merge key by "
                                 "key, null removes a key (a factor from weights, a team; a section: back to "
                                 "its default), any other value replaces",
                     examples=[{"weights": {"age": 4.0, "topology": None}, "teams": {"nlp": {"share": 2}}}])],
                 patch: Annotated[dict, Depends(_patch_document)], service: ServiceDep) -> dict:
    """Applied to the policy in force when the change is written (so two patches never lose one
    another's change), then validated as strictly as PUT; errors name the field."""

    def patched(current: PolicyConfig) -> PolicyConfig:
        merged = merge_patch(current.model_dump(mode="json"), patch)
        return _strict(PolicyConfig, json.dumps(merged))

    policy_id = service.queue.put_policy(patched, admin.as_actor())
    return {"policy_id": policy_id, "policy": service.engine.policy}
