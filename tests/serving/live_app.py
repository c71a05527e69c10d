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


def create_model_app() -> FastAPI:
    """The real app with a stand-in model ``job-predictor/7`` in use and the real analytic fallback."""
    from models.fallback import FallbackPredictor
    from predictor.engine.model_slot import ModelSlot
    from tests.serving.doubles import TimeLimitPredictor

    settings = get_settings()

    def slot() -> ModelSlot:
        return ModelSlot(uri="models:/job-predictor@champion", resolve=lambda: "job-predictor/7",
                         load=TimeLimitPredictor, fallback=FallbackPredictor(), poll_s=3600)

    return create_app(settings, service_factory=lambda: build_service(settings, model=slot()))
