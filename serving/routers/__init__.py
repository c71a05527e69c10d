"""One router per resource, collected in ``ROUTERS`` (the order they appear in the OpenAPI schema)."""

from serving.routers import dashboard, health, jobs, models, policy, queue, score, stream

ROUTERS = (score.router, jobs.router, queue.router, policy.router, models.router, stream.router, health.router,
           dashboard.router)

__all__ = ["ROUTERS"]
