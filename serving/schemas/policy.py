"""The policy as served: the validated document and which version of it is in force."""

from __future__ import annotations

from pydantic import BaseModel

from predictor.policy.config import PolicyConfig

__all__ = ["PolicyPublic"]


class PolicyPublic(BaseModel):
    policy_id: int | None  # None: the default / file policy, never changed through the API
    policy: PolicyConfig
