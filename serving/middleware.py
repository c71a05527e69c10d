"""ASGI middleware: request latency into the metrics, the model in use on every response, and
keep-alive connections recycled.

Every HTTP response carries ``X-Model-Version`` and ``X-Model-Fallback`` (``true`` while the service
scores with the fallback), so a caller always knows what answered it.

After ``KEEPALIVE_REQUESTS`` requests on one HTTP/1.1 connection, the response says
``Connection: close`` (as nginx's ``keepalive_requests`` does) and the client reconnects. uvicorn's
workers share one listening socket and a connection stays with the worker that accepted it, so a few
long-lived clients can all sit on one worker while the others idle; a new connection is accepted by a
worker that is waiting, not one busy scoring, so recycling moves load to idle workers.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ObservabilityMiddleware", "KEEPALIVE_REQUESTS"]

#: Requests served on one keep-alive connection before the response asks the client to reconnect.
KEEPALIVE_REQUESTS = 100
#: Connections tracked per worker at most (entries of connections the client closed are dropped then).
_MAX_TRACKED = 10_000


class ObservabilityMiddleware:
    """Times each HTTP request by route template and adds the model headers (from ``app.state.service``)."""

    def __init__(self, app: ASGIApp, keepalive_requests: int = KEEPALIVE_REQUESTS) -> None:
        self.app = app
        self.keepalive_requests = keepalive_requests
        self._served: dict[tuple, int] = {}  # requests so far per (client, server) address pair

    def _last_on_connection(self, scope: Scope) -> bool:
        """Count this request on its connection; True when the connection should close after it."""
        if scope.get("http_version") != "1.1" or scope.get("client") is None:
            return False
        key = (tuple(scope["client"]), tuple(scope.get("server") or ()))
        served = self._served.get(key, 0) + 1
        if served >= self.keepalive_requests:
            self._served.pop(key, None)
            return True
        if len(self._served) >= _MAX_TRACKED:
            self._served.clear()
        self._served[key] = served
        return False

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
        close = self._last_on_connection(scope)

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                if not any(name == b"x-model-version" for name, _ in headers):  # a scoring response names its own
                    headers += service.model_headers()
                if close:
                    headers.append((b"connection", b"close"))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            service.metrics.request_seconds.labels(scope["method"], path, str(status)).observe(
                time.perf_counter() - start)
