from __future__ import annotations

from tests.serving.conftest import TestClient, auth


def _submit(client: TestClient, job_id: str, **fields) -> dict:
    r = client.post("/v1/jobs", json={"job_id": job_id, **fields}, headers=auth("scheduler"))
    assert r.status_code == 201, r.text
    return r.json()


def test_queue_is_ordered_with_factor_breakdowns(client: TestClient) -> None:
    _submit(client, "research", num_gpus=8, team="nlp", tier="research", time_limit_s=7200)
    _submit(client, "prod", num_gpus=8, team="nlp", tier="production", time_limit_s=7200)
    _submit(client, "best", num_gpus=8, team="vision", tier="best_effort", time_limit_s=7200)
    jobs = client.get("/v1/queue", headers=auth("admin")).json()["jobs"]
    assert [j["job_id"] for j in jobs] == ["prod", "research", "best"]
    assert [j["rank"] for j in jobs] == [1, 2, 3]
    priorities = [j["decision"]["priority"] for j in jobs]
    assert priorities == sorted(priorities, reverse=True)
    tier = {j["job_id"]: next(f for f in j["decision"]["factors"] if f["name"] == "tier") for j in jobs}
    assert tier["prod"]["value"] > tier["research"]["value"] > tier["best"]["value"]


def test_running_jobs_follow_pending_ones_and_hold_capacity(client: TestClient) -> None:
    for i in range(4):
        _submit(client, f"r{i}", num_gpus=16, team="nlp", time_limit_s=7200)
        client.post(f"/v1/jobs/r{i}/events", json={"kind": "started"}, headers=auth("scheduler"))
    waiting = _submit(client, "w", num_gpus=16, team="vision", time_limit_s=3600)
    assert waiting["decision"]["action"] == "reserve"
    jobs = client.get("/v1/queue", headers=auth("admin")).json()["jobs"]
    assert [j["status"] for j in jobs] == ["pending"] + ["running"] * 4
    [res] = client.get("/v1/reservations", headers=auth("admin")).json()["reservations"]
    assert (res["job_id"], res["num_gpus"], res["gpu_type"]) == ("w", 16, "A100-80GB")
    assert res["start_ts"] < res["predicted_end_ts"] <= res["start_ts"] + 2 * 3600 * 1.5
    assert client.get("/v1/reservations", headers=auth("nlp")).json()["reservations"] == []


def test_teams_show_usage_share_and_factor(client: TestClient) -> None:
    _submit(client, "a", num_gpus=8, team="nlp", time_limit_s=7200)
    client.post("/v1/jobs/a/events", json={"kind": "started"}, headers=auth("scheduler"))
    _submit(client, "b", num_gpus=8, team="vision", time_limit_s=7200)
    teams = {t["team"]: t for t in client.get("/v1/teams", headers=auth("nlp")).json()["teams"]}
    assert teams["nlp"]["running_gpus"] == 8 and teams["vision"]["pending_jobs"] == 1
    assert teams["nlp"]["usage_gpu_hours"] >= 0 and teams["vision"]["usage_gpu_hours"] == 0
    assert teams["vision"]["factor"] == 1.0 and teams["nlp"]["factor"] <= 1.0
