"""``predictor serve``: the scoring API, the live stream and the dashboard, under uvicorn.

The command lives beside the service it starts: the ``predictor`` command line finds it through the
``predictor.commands`` entry point (``pyproject.toml``), so ``predictor`` never imports ``serving``.
uvicorn imports ``serving.app:create_app`` by name (``factory=True``). Settings reach the workers
through the environment (``serving.settings``); the options here set the matching ``PREDICTOR_*``
variables before the workers start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from serving.settings import get_settings, load_tokens, load_tokens_file
from serving.tokens_file import LOCAL_TOKENS_FILE, generate_admin_tokens_file, local_admin_token

ORDER = 60
APP_FACTORY = "serving.app:create_app"
def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        bind: Annotated[str | None, typer.Option("--bind", help="host:port (default: PREDICTOR_BIND or "
                                                 "127.0.0.1:8000).", show_default=False)] = None,
        workers: Annotated[int | None, typer.Option("--workers", min=1, max=64, show_default=False,
                                                    help="uvicorn worker processes (default: PREDICTOR_WORKERS "
                                                    "or 1). Several workers need PostgreSQL.")] = None,
        log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    ) -> None:
        """Serve the scoring API, the WebSocket stream and the dashboard.

        State goes to PREDICTOR_DATABASE_URL (default: predictor.db here), the model comes from the MLflow
        registry (models:/job-predictor@champion in MLFLOW_TRACKING_URI, default mlflow.db here), hot
        reloaded when the alias moves. With no tokens configured, the tokens in ./predictor-tokens.yaml
        are used, and an admin token is generated into it the first time (it keeps working across
        restarts; `predictor tokens rotate` replaces it).

        Example: predictor serve --bind 0.0.0.0:8000 --workers 2
        """
        import uvicorn

        from predictor.store import Database

        if bind is not None:
            os.environ["PREDICTOR_BIND"] = bind
        if workers is not None:
            os.environ["PREDICTOR_WORKERS"] = str(workers)
        get_settings.cache_clear()
        settings = get_settings()
        token = None
        if not load_tokens(settings):
            path = Path.cwd() / LOCAL_TOKENS_FILE
            if path.exists():  # the one an earlier run wrote: its token keeps working across restarts
                token = local_admin_token(load_tokens_file(path))
                typer.echo(f"no API tokens configured: using the API tokens in {path} "
                           "(`predictor tokens rotate` replaces them)", err=True)
            else:
                token = generate_admin_tokens_file(path)
                typer.echo(f"no API tokens configured: wrote an admin token to {path}", err=True)
            os.environ["PREDICTOR_TOKENS_FILE"] = str(path)
            get_settings.cache_clear()  # the app (in this process with one worker) reads it again
        db = Database(settings.database_url)
        if settings.workers > 1 and not db.is_postgres:
            from features.errors import InputError

            raise InputError("several workers need PostgreSQL (PREDICTOR_DATABASE_URL=postgresql://...); "
                             "SQLite allows one writer process")
        db.upgrade()  # once, before the workers start (they find nothing left to do)
        db.dispose()
        base = f"http://{settings.host if ':' not in settings.host else f'[{settings.host}]'}:{settings.port}"
        typer.echo(f"API:       {base}/v1  (OpenAPI: {base}/docs)", err=True)
        typer.echo(f"dashboard: {base}/dashboard/" + (f"#token={token}" if token else ""), err=True)
        typer.echo(f"stream:    {base.replace('http', 'ws', 1)}/v1/stream", err=True)
        uvicorn.run(APP_FACTORY, factory=True, host=settings.host, port=settings.port, workers=settings.workers,
                    log_level=log_level, proxy_headers=False)
