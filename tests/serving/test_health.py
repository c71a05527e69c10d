from __future__ import annotations

import re

from tests.serving.conftest import TestClient, auth


def test_readyz_says_degraded_while_the_fallback_answers(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "degraded" and body["database"] == "ok"
    assert body["model"]["fallback"] and body["model"]["version"] == "fallback"
    assert body["problems"] == ["scoring with the fallback: no model registered at models:/job-predictor@champion"]


def test_readyz_is_503_when_the_store_is_unreachable(client: TestClient) -> None:
    client.service.db.engine.dispose()
    real_ping = client.service.db.ping

    def broken() -> None:
        raise OSError("connection refused")

    client.service.db.ping = broken
    try:
        r = client.get("/readyz")
    finally:
        client.service.db.ping = real_ping
    assert r.status_code == 503 and r.json()["status"] == "not_ready"
    assert "database unreachable: connection refused" in r.json()["problems"]


def _sample(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    raise AssertionError(f"no sample {name}{{{want}}}")


def test_metrics_count_requests_decisions_queue_model_and_fallbacks(client: TestClient) -> None:
    client.post("/v1/score", json={"jobs": [{"job_id": "a", "num_gpus": 1}, {"job_id": "b", "num_gpus": 1}]},
                headers=auth("scheduler"))
    client.post("/v1/jobs", json={"job_id": "c", "num_gpus": 1}, headers=auth("scheduler"))
    text = client.get("/metrics").text
    assert _sample(text, "predictor_http_request_duration_seconds_count", method="POST", route="/v1/score",
                   status="200") == 1
    assert _sample(text, "predictor_decisions_total", tier="research", action="start", source="score") == 2
    assert _sample(text, "predictor_fallback_predictions_total") == 2
    assert _sample(text, "predictor_queue_jobs", status="pending") == 1
    assert _sample(text, "predictor_model_info", version="fallback", fallback="true") == 1
    assert "predictor_stream_clients" in text
