"""The policy as served: the document in force and its id (``PolicyPublic``, what GET returns), the
same shape to replace it (``PolicyPut``: every section required), and a JSON merge patch to change part.

Both are validated strictly, as the job API is: ``"yes"`` is not a boolean, ``"2"`` not a number.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from predictor.policy.config import PolicyConfig

__all__ = ["PolicyPublic", "PolicyPut", "PolicyDocument", "merge_patch"]


class PolicyPublic(BaseModel):
    policy_id: int | None = Field(description="null: the default / file policy, never changed through the API")
    policy: PolicyConfig


#: The policy document with every top-level section required: a PUT replaces the whole policy, so a
#: section left out is an error rather than a silent reset to its default (PATCH changes part).
PolicyDocument = create_model(
    "PolicyDocument", __base__=PolicyConfig, __doc__="The whole policy: every section, as GET returns it.",
    **{name: (field.annotation, Field(..., description=field.description))
       for name, field in PolicyConfig.model_fields.items()},
)


class PolicyPut(BaseModel):
    """A whole policy to put in force: the document ``GET /v1/policy`` returns, changed or not."""

    model_config = ConfigDict(extra="forbid")

    policy_id: int | None = Field(None, description=(
        "the policy_id GET returned: refused with 409 if another policy was put in force since "
        "(leave it out to replace whatever is in force)"))
    policy: PolicyDocument  # type: ignore[valid-type]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
