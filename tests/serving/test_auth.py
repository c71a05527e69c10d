from __future__ import annotations

import pytest

from tests.serving.conftest import TestClient, auth

ENDPOINTS = [
    ("post", "/v1/score", {"job_id": "x", "num_gpus": 1}),
    ("post", "/v1/jobs", {"job_id": "x", "num_gpus": 1}),
    ("get", "/v1/jobs", None),
    ("get", "/v1/jobs/x", None),
    ("patch", "/v1/jobs/x", {"time_limit_s": 60}),
    ("delete", "/v1/jobs/x", None),
    ("post", "/v1/jobs/x/events", {"kind": "started"}),
    ("get", "/v1/jobs/x/explain", None),
    ("get", "/v1/queue", None),
    ("get", "/v1/reservations", None),
    ("get", "/v1/teams", None),
    ("get", "/v1/teams/x", None),
    ("get", "/v1/policy", None),
    ("put", "/v1/policy", {}),
    ("get", "/v1/models", None),
    ("post", "/v1/models/reload", None),
    ("post", "/v1/models/promote", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
@pytest.mark.parametrize("header", [None, "Bearer not-a-token-at-all", "Basic YWRtaW46YWRtaW4="],
                         ids=["none", "unknown", "basic"])
def test_every_api_endpoint_needs_a_known_bearer_token(client: TestClient, method, path, body, header) -> None:
    headers = {} if header is None else {"Authorization": header}
    r = client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/dashboard/", "/openapi.json"])
def test_probes_metrics_and_the_dashboard_shell_are_open(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200


@pytest.mark.parametrize(("who", "code"), [("admin", 200), ("scheduler", 403), ("nlp", 403)])
def test_only_admins_change_the_policy_or_reload_the_model(client: TestClient, who: str, code: int) -> None:
    policy = client.get("/v1/policy", headers=auth(who)).json()
    assert client.put("/v1/policy", json=policy, headers=auth(who)).status_code == code
    assert client.post("/v1/models/reload", headers=auth(who)).status_code == code


def test_members_see_and_change_only_their_team(client: TestClient) -> None:
    assert client.post("/v1/jobs", json={"job_id": "n1", "num_gpus": 1}, headers=auth("nlp")).status_code == 201
    assert client.post("/v1/jobs", json={"job_id": "v1", "num_gpus": 1}, headers=auth("vision")).status_code == 201
    r = client.post("/v1/jobs", json={"job_id": "v2", "num_gpus": 1, "team": "vision"}, headers=auth("nlp"))
    assert r.status_code == 403
    assert [j["job_id"] for j in client.get("/v1/queue", headers=auth("nlp")).json()["jobs"]] == ["n1"]
    assert [j["job_id"] for j in client.get("/v1/jobs", headers=auth("nlp")).json()["jobs"]] == ["n1"]
    assert sorted(j["job_id"] for j in client.get("/v1/queue", headers=auth("scheduler")).json()["jobs"]) == ["n1", "v1"]
    for method, path, body in [("get", "/v1/jobs/v1", None), ("patch", "/v1/jobs/v1", {"time_limit_s": 60}),
                               ("delete", "/v1/jobs/v1", None), ("post", "/v1/jobs/v1/events", {"kind": "started"})]:
        assert client.request(method, path, json=body, headers=auth("nlp")).status_code == 404, path
    assert client.get("/v1/jobs/v1", headers=auth("vision")).status_code == 200
