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
        priority = r.json()["decision"]["priority"]
        assert cells[6] == f"{round(priority / 1e6):,}M"  # short, one scale for the column
        assert f"priority {priority:,}" in row.query_selector("td.priority").get_attribute("title")
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


def _fill(api: httpx.Client) -> None:
    """A queue that stresses the layout: long ids, running jobs, a reservation with a long label,
    several teams with shares and usage."""
    for i in range(4):  # fill the 64-GPU cluster
        job_id = f"team-vision/pretrain-vit-huge-{i}"
        assert api.post("/v1/jobs", json={"job_id": job_id, "num_gpus": 16, "team": "vision",
                                          "time_limit_s": 4 * 3600}).status_code == 201
        api.post(f"/v1/jobs/{job_id}/events", json={"kind": "started"})
    for i, team in enumerate(["nlp", "speech", "recsys", "multimodal-research"]):
        body = {"job_id": f"team-{team}/finetune-llama-70b-lora-{i}", "num_gpus": 16, "team": team,
                "tier": "production", "time_limit_s": 7200, "model_params": 7e9, "precision": "bf16"}
        assert api.post("/v1/jobs", json=body).status_code == 201


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_column_and_label_is_visible(browser, tmp_path: Path, width: int) -> None:
    """No horizontal scrolling anywhere, every header cell inside its panel and the window, every
    reservation label left of its bar, priorities short with the exact value in the tooltip."""
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_INVENTORY_FILE="")
    env.pop("PREDICTOR_INVENTORY_FILE")
    with live_server(env, tmp_path / "uvicorn.log") as base:
        with httpx.Client(base_url=base, headers=auth("admin"), timeout=10) as api:
            policy = api.get("/v1/policy").json()
            policy["policy"]["teams"] = {"nlp": {"share": 4}, "speech": {"share": 2}, "vision": {"share": 1}}
            assert api.put("/v1/policy", json=policy).status_code == 200
            _fill(api)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(f"{base}/dashboard/#token={TOKENS['admin'].token}")
        page.wait_for_selector("#conn.on", timeout=15_000)
        page.wait_for_selector("#timeline text.label", timeout=10_000)
        page.wait_for_selector('#teams tr[data-team="vision"]', timeout=10_000)
        page.wait_for_timeout(500)
        shot = Path(os.environ.get("PREDICTOR_SCREENSHOT_DIR", tmp_path)) / f"dashboard-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        layout = page.evaluate("""() => {
            const out = {doc: [document.documentElement.scrollWidth, window.innerWidth], sections: [], headers: []};
            for (const s of document.querySelectorAll("section")) out.sections.push([s.id, s.scrollWidth, s.clientWidth]);
            for (const th of document.querySelectorAll("th")) {
                const r = th.getBoundingClientRect(), p = th.closest("section").getBoundingClientRect();
                out.headers.push([th.textContent, r.left >= p.left && r.right <= p.right + 0.5 && r.right <= window.innerWidth]);
            }
            const labels = [...document.querySelectorAll("#timeline text.label")].map((t) => t.getBBox());
            const bars = [...document.querySelectorAll("#timeline rect")].map((b) => b.getBBox());
            out.labels = labels.map((l) => [l.x + l.width, Math.min(...bars.map((b) => b.x))]);
            out.priorities = [...document.querySelectorAll("#queue td.priority")].map((td) => [td.textContent, td.title]);
            out.teams = [...document.querySelectorAll("#teams tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent));
            return out;
        }""")
    assert layout["doc"][0] <= layout["doc"][1], layout["doc"]
    assert all(scroll <= client for _, scroll, client in layout["sections"]), layout["sections"]
    assert all(inside for _, inside in layout["headers"]), [h for h, inside in layout["headers"] if not inside]
    assert layout["labels"] and all(right < bar for right, bar in layout["labels"]), layout["labels"]
    for text, title in layout["priorities"]:
        assert len(text) <= 7 and title.startswith("priority ") and "," in title, (text, title)
    teams = {row[0]: row for row in layout["teams"]}
    assert (teams["nlp"][1], teams["speech"][1], teams["vision"][1]) == ("4", "2", "1")
    assert float(teams["vision"][2]) > 0  # its running jobs' GPU-hours so far
