"""``/docs`` (Swagger UI) renders in a real Chromium with no request leaving the machine (issue 12,
item 10): its assets are served by the app from a pinned distribution (fastapi-offline). There is no
``/redoc``: ReDoc's page always fetches its maker's logo from the internet."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.serving.browser import offline
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]


def test_the_pages_point_at_local_assets_only(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "uvicorn.log") as base:
        html = httpx.get(f"{base}/docs").text
        assert "https://" not in html and "/static-offline-docs/swagger-ui-bundle.js" in html
        assert httpx.get(f"{base}/static-offline-docs/swagger-ui-bundle.js").status_code == 200
        assert httpx.get(f"{base}/redoc").status_code == 404


def test_swagger_ui_renders_offline(browser, tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "uvicorn.log") as base:
        operations = sum(len(v) for v in httpx.get(f"{base}/openapi.json").json()["paths"].values())
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        left = offline(page)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{base}/docs")
        page.wait_for_selector(".opblock", timeout=20_000)
        assert page.locator(".opblock").count() == operations
        assert "GPU job predictor" in page.inner_text(".info .title")
        assert page.locator(".errors-wrapper").count() == 0  # the spec parsed (OpenAPI 3.1)
    assert left == [], f"requests left the machine: {left}"
    assert errors == []
