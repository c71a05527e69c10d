"""One router per resource, collected in ``ROUTERS`` (the order they appear in the OpenAPI schema; ``explain``
before ``jobs``, whose ``/v1/jobs/{job_id:path}`` would take ``.../explain``)."""

from serving.routers import dashboard, explain, health, jobs, models, policy, queue, score, stream, teams

ROUTERS = (score.router, explain.router, jobs.router, queue.router, teams.router, policy.router, models.router,
           stream.router, health.router, dashboard.router)

__all__ = ["ROUTERS"]
