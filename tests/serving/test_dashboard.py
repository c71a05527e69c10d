"""The dashboard in a real headless Chromium against a real uvicorn: rows appear without a reload."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.serving.conftest import TOKENS, auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]
def test_live_queue_reservations_and_teams_update_over_the_websocket(browser, tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_INVENTORY_FILE="")
    env.pop("PREDICTOR_INVENTORY_FILE")
    with live_server(env, tmp_path / "uvicorn.log") as base:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(f"{base}/dashboard/#token={TOKENS['admin'].token}")
        page.wait_for_selector("#conn.on", timeout=15_000)
        assert "token=" not in page.url  # the token leaves the address bar
        assert page.inner_text("#model") == "model: fallback"
        assert "fallback" in page.inner_text("#fallback-note")

        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=10) as api:
            for i in range(4):  # fill the 64-GPU cluster, then one more must reserve
                assert api.post("/v1/jobs", json={"job_id": f"run-{i}", "num_gpus": 16, "team": "vision",
                                                  "time_limit_s": 4 * 3600}).status_code == 201
                api.post(f"/v1/jobs/run-{i}/events", json={"kind": "started"})
            r = api.post("/v1/jobs", json={"job_id": "train-1", "num_gpus": 16, "team": "nlp", "tier": "production",
                                          "time_limit_s": 7200, "model_params": 7e9, "precision": "bf16",
                                          "optimizer": "adamw", "finetune_method": "lora", "batch_size": 4,
                                          "seq_len": 4096})
            assert r.status_code == 201 and r.json()["decision"]["action"] == "reserve"

        row = page.wait_for_selector('#queue tr[data-job-id="train-1"]', timeout=10_000)
        cells = [c.inner_text() for c in row.query_selector_all("td")]
        assert cells[1:5] == ["train-1", "nlp", "production", "pending"]
        assert cells[6] == str(r.json()["decision"]["priority"])
        assert cells[8].strip() == "20m - 60m - 2.0h"  # the fallback: half the limit, / and x 3, capped
        assert "GiB" in cells[9] and cells[10] == "reserve"
        assert len(row.query_selector_all(".stack span")) == len(r.json()["decision"]["factors"])
        page.wait_for_selector("#timeline rect", timeout=10_000)
        assert "train-1" in page.inner_text("#reservations-section")
        page.wait_for_selector('#teams tr[data-team="vision"]', timeout=10_000)
        assert page.locator("#queue tbody tr").count() == 5
        shot = Path(os.environ.get("PREDICTOR_SCREENSHOT_DIR", tmp_path)) / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        assert errors == []
