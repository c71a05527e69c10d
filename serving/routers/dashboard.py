"""The live dashboard: static HTML + JS served by the app (no build step)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
_FILES = {"index.html": "text/html", "dashboard.js": "text/javascript", "dashboard.css": "text/css"}

router = APIRouter(include_in_schema=False)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard/")


@router.get("/dashboard/")
def dashboard() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


@router.get("/dashboard/{name}")
def asset(name: str) -> FileResponse:
    if name not in _FILES:
        raise HTTPException(404, f"no dashboard file {name!r}")
    return FileResponse(STATIC_DIR / name, media_type=_FILES[name])
