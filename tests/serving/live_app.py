"""The app factory live tests run under uvicorn: the real app, with the test predictor as fallback."""

from __future__ import annotations

from fastapi import FastAPI

from serving.app import create_app
from serving.service import build_service
from serving.settings import get_settings
from tests.serving.doubles import no_model_slot


def create_test_app() -> FastAPI:
    settings = get_settings()
    return create_app(settings, service_factory=lambda: build_service(settings, model=no_model_slot()))
