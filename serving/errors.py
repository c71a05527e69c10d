"""Errors as HTTP answers: the store's errors to 404/409/403, user errors to field-level 422s."""

from __future__ import annotations

import re

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from features.errors import InputError
from predictor.queue.errors import ConflictError, NotFoundError, PermissionDeniedError
from predictor.store.codec import jsonable

__all__ = ["install_error_handlers"]

_FIELD = re.compile(r"^([a-z_][a-z0-9_.]*): (.+)$", re.DOTALL)


def _detail(message: str) -> list[dict]:
    """One FastAPI-style error; ``"field: problem"`` messages name the field in ``loc``."""
    m = _FIELD.match(message)
    loc = ["body", *m.group(1).split(".")] if m else ["body"]
    return [{"loc": loc, "msg": m.group(2) if m else message, "type": "value_error"}]


def _validation_detail(errors: list[dict]) -> list[dict]:
    """FastAPI's 422 detail, with inputs made JSON-safe (NaN/infinity as null) and kept short."""
    out = []
    for e in errors:
        e = dict(e)
        if "input" in e:
            text = repr(e["input"])
            e["input"] = jsonable(e["input"]) if len(text) <= 500 else text[:500] + "..."
        if "ctx" in e:
            e["ctx"] = jsonable(e["ctx"])  # may hold the exception raised by a validator
        out.append(e)
    return jsonable_encoder(out)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_detail(list(exc.errors()))},
                            status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0]) if exc.args else "not found"}, status.HTTP_404_NOT_FOUND)

    @app.exception_handler(ConflictError)
    async def conflict(request: Request, exc: ConflictError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_409_CONFLICT)

    @app.exception_handler(PermissionDeniedError)
    async def forbidden(request: Request, exc: PermissionDeniedError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_403_FORBIDDEN)

    @app.exception_handler(InputError)
    async def bad_input(request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse({"detail": _detail(str(exc))}, status.HTTP_422_UNPROCESSABLE_CONTENT)
