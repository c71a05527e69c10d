"""The app factory: ``uvicorn --factory serving.app:create_app`` (what ``predictor serve`` runs).

Settings come from the environment (``serving.settings``); the store is migrated, the policy,
inventory and tracked queue loaded at start-up; the model loads in the background (the fallback
answers until it is in, and says so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from serving.errors import install_error_handlers
from serving.load_shedding import LoadSheddingMiddleware
from serving.middleware import ObservabilityMiddleware
from serving.routers import ROUTERS
from serving.service import Service, build_service
from serving.settings import Settings, get_settings

__all__ = ["create_app"]

API_DESCRIPTION = """Scores GPU training jobs for a shared cluster: predicted duration (p10/p50/p90),
peak GPU memory and placement slowdown, and a decision (priority with its factor breakdown, GPU flavor,
placement or capacity reservation, preemption plan). Tracks a queue persistently and streams every
change over the WebSocket `/v1/stream`. Authenticate with `Authorization: Bearer <token>`."""


def create_app(settings: Settings | None = None, *, service: Service | None = None,
               service_factory: Callable[[], Service] | None = None) -> FastAPI:
    """Build the FastAPI app.

    Parameters
    ----------
    settings : Settings, optional
        Defaults to :func:`serving.settings.get_settings` (the environment).
    service : Service, optional
        A service built already (tests); otherwise built from ``settings`` at start-up.
    service_factory : callable, optional
        Builds the service at start-up instead of ``build_service(settings)`` (tests).
    """
    settings = settings or (service.settings if service is not None else get_settings())
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc = service or (service_factory() if service_factory else build_service(settings))
        app.state.service = svc
        await svc.start()
        try:
            yield
        finally:
            await svc.stop()

    # /docs (Swagger UI) loads its scripts from the package, not a CDN: it works offline. No /redoc:
    # ReDoc's page always fetches its maker's logo from the internet.
    app = FastAPIOffline(title="GPU job predictor", version="1", description=API_DESCRIPTION, lifespan=lifespan,
                         max_body_size=settings.max_body_bytes, redoc_url=None)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)

    # the last added is the outermost: requests shed for capacity are still timed and labelled
    app.add_middleware(LoadSheddingMiddleware, max_concurrency=settings.max_concurrency, max_queue=settings.max_queue,
                       queue_wait_ms=settings.queue_wait_ms, retry_after_s=settings.retry_after_s)
    app.add_middleware(ObservabilityMiddleware)
    return app
