"""Errors of tracked-queue operations; the API maps them to 404, 409 and 403."""

from __future__ import annotations

__all__ = ["NotFoundError", "ConflictError", "PermissionDeniedError"]


class NotFoundError(LookupError):
    """No such tracked job (or not one the caller may see)."""


class ConflictError(RuntimeError):
    """The request contradicts the job's state or an earlier request with the same id."""


class PermissionDeniedError(PermissionError):
    """The caller may not do this to this job."""
