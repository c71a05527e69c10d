"""Under a burst a real uvicorn sheds at once (503 + Retry-After) instead of queueing; past a caller's
deadline it answers with the analytic fallback and says so; /metrics counts both."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.serving.conftest import auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

JOB = {"job_id": "j-0", "num_gpus": 2, "team": "nlp", "time_limit_s": 7200, "model_params": 7e9,
       "precision": "bf16", "batch_size": 8, "seq_len": 4096}
BATCH = {"jobs": [{**JOB, "job_id": f"j-{i}", "num_gpus": 1 + i % 4} for i in range(200)]}


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}(\{{{re.escape(want)}\}})? ([0-9.e+-]+)$" if want else rf"^{re.escape(name)} ([0-9.e+-]+)$"
    for line in text.splitlines():
        m = re.match(pattern, line)
        if m:
            return float(m.groups()[-1])
    return 0.0


async def _burst(base: str, n: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, headers=auth("scheduler"), timeout=60, limits=limits) as api:
        return await asyncio.gather(*(api.post("/v1/score", json=BATCH) for _ in range(n)))


def test_a_burst_is_shed_at_once_not_queued(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_MAX_CONCURRENCY="1",
                     PREDICTOR_MAX_QUEUE="2", PREDICTOR_QUEUE_WAIT_MS="60000", PREDICTOR_RETRY_AFTER_S="2")
    with live_server(env, tmp_path / "uvicorn.log") as base:
        answers = asyncio.run(_burst(base, 40))
        statuses = [r.status_code for r in answers]
        shed = [r for r in answers if r.status_code == 503]
        assert set(statuses) <= {200, 503}
        # one in progress and two waiting at most while the rest of the burst is read: most are shed
        assert statuses.count(200) >= 1 and len(shed) >= 10
        for r in shed:
            assert r.headers["retry-after"] == "2"
            assert r.json()["reason"] == "queue_full" and r.headers["x-shed-reason"] == "queue_full"
        # once the burst is over, requests are served again, and the health routes never wait
        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
            assert api.post("/v1/score", json=JOB).status_code == 200
            text = api.get("/metrics").text
        assert _metric(text, "predictor_shed_requests_total", reason="queue_full") == len(shed)
        assert _metric(text, "predictor_http_request_duration_seconds_count", method="GET", route="/metrics",
                       status="200") == 0.0  # this scrape is the first: health routes are not limited


def test_past_the_deadline_the_fallback_answers_and_says_so(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "uvicorn.log", factory="tests.serving.live_app:create_model_app") as base, \
            httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
        normal = api.post("/v1/score", json=JOB, headers={"X-Deadline-Ms": "60000"})
        assert normal.status_code == 200
        assert normal.json()["model"]["version"] == "job-predictor/7" and "degraded" not in normal.json()

        late = api.post("/v1/score", json=JOB, headers={"X-Deadline-Ms": "0.01"})
        assert late.status_code == 200
        body = late.json()
        assert body["degraded"] == "deadline" and late.headers["x-degraded"] == "deadline"
        assert body["model"]["fallback"] is True and body["model"]["fallback_reason"].startswith("deadline")
        result = body["results"][0]
        assert result["prediction"]["fallback"] is True and result["decision"]["action"] in ("start", "reserve", "wait")

        bad = api.post("/v1/score", json=JOB, headers={"X-Deadline-Ms": "-5"})
        assert bad.status_code == 422 and "x-deadline-ms" in str(bad.json()["detail"][0]["loc"]).lower()

        text = api.get("/metrics").text
        assert _metric(text, "predictor_degraded_requests_total", reason="deadline") == 1.0
        assert "predictor_worker_cpu_seconds{pid=" in text
