"""FastAPI dependencies as reusable annotated types (``ServiceDep``, ``PrincipalDep``, role checks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from serving.auth import Principal
from serving.service import Service

__all__ = ["ServiceDep", "PrincipalDep", "SchedulerOrAdmin", "AdminOnly", "get_service", "get_principal",
           "require_roles"]


# The dependencies are ``async def``: they do no I/O, and FastAPI would run a plain ``def`` one in the
# thread pool (a thread hop per dependency per request, a large share of a scoring request's cost).


async def get_service(request: Request) -> Service:
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


async def get_principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer <token>``; 401 when missing or unknown. Calls
    ``get_service`` itself rather than declaring ``ServiceDep``: a declared sub-dependency costs
    FastAPI a resolution pass per request (its path, query, header and cookie parameters), and every
    authenticated route resolves this one."""
    service = await get_service(request)
    principal = service.tokens.from_authorization(request.headers.get("authorization"))
    if principal is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or unknown bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_roles(*roles: str) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency that lets only ``roles`` through (403 for the others)."""

    async def check(principal: PrincipalDep) -> Principal:
        if principal.role not in roles:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                f"role {principal.role!r} may not do this (needs {' or '.join(roles)})")
        return principal

    return check


SchedulerOrAdmin = Annotated[Principal, Depends(require_roles("scheduler", "admin"))]
AdminOnly = Annotated[Principal, Depends(require_roles("admin"))]
