"""The dashboard's start column and explain panel in a real headless Chromium against a real uvicorn."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.serving.conftest import TOKENS, auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]


def test_clicking_a_waiting_job_shows_why_it_waits(browser, tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_INVENTORY_FILE="")
    env.pop("PREDICTOR_INVENTORY_FILE")
    with live_server(env, tmp_path / "uvicorn.log") as base:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(f"{base}/dashboard/#token={TOKENS['admin'].token}")
        page.wait_for_selector("#conn.on", timeout=15_000)
        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=10) as api:
            for i in range(4):  # fill the 64-GPU cluster; the next job waits
                assert api.post("/v1/jobs", json={"job_id": f"run-{i}", "num_gpus": 16, "team": "vision",
                                                  "time_limit_s": 4 * 3600}).status_code == 201
                api.post(f"/v1/jobs/run-{i}/events", json={"kind": "started"})
            assert api.post("/v1/jobs", json={"job_id": "waits", "num_gpus": 16, "team": "nlp",
                                              "time_limit_s": 3600}).status_code == 201
        page.wait_for_selector('#queue tr[data-job-id="waits"]', timeout=10_000)
        page.wait_for_function(
            """() => { const c = document.querySelector('#queue tr[data-job-id="waits"] td.start');
                       return c && /^[0-9.]+(s|m|h|d)$/.test(c.innerText.trim()); }""", timeout=10_000)
        cell = page.locator('#queue tr[data-job-id="waits"] td.start')  # rows are re-drawn: found afresh
        assert "p10" in cell.get_attribute("title")
        cell.click()
        page.wait_for_selector("#explain-section:not([hidden])", timeout=10_000)
        assert page.inner_text("#explain-job") == "waits"
        summary = page.inner_text("#explain-summary")
        assert "Rank 1 of 1" in summary and "Estimated start in" in summary
        assert page.locator("#explain-ahead tbody tr.self").count() == 1
        page.click("#explain-close")
        assert page.locator("#explain-section").is_hidden()
        assert errors == []
