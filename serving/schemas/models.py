"""Model promotion as served."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from serving.schemas.results import ModelStatusPublic

__all__ = ["PromotionRequest", "PromotionResult"]

class PromotionRequest(BaseModel):
    """Move alias ``target`` to the version ``source`` points at, if it is not worse (``force`` skips
    the check and needs a ``reason``, recorded on the model version)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = Field(default="challenger", min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    target: str = Field(default="champion", min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    force: bool = False
    reason: str | None = Field(default=None, min_length=1, max_length=1000)


class PromotionResult(BaseModel):
    promoted: bool = Field(description="the alias moved")
    unchanged: bool = Field(default=False, description="the alias pointed at that version already: nothing to do")
    version: str | None = None
    previous: str | None = None
    reason: str | None = None
    details: dict[str, Any] = Field(default_factory=dict, description="both versions' metrics, when compared")
    model: ModelStatusPublic
