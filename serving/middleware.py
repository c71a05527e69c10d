"""ASGI middleware: request latency into the metrics, and the model in use on every response.

Every HTTP response carries ``X-Model-Version`` and ``X-Model-Fallback`` (``true`` while the service
scores with the fallback), so a caller always knows what answered it.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ObservabilityMiddleware"]


class ObservabilityMiddleware:
    """Times each HTTP request by route template and adds the model headers (from ``app.state.service``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = getattr(scope["app"].state, "service", None)
        if service is None:  # not started yet
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                if not any(name == b"x-model-version" for name, _ in headers):  # a scoring response names its own
                    headers += service.model_headers()
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            service.metrics.request_seconds.labels(scope["method"], path, str(status)).observe(
                time.perf_counter() - start)
