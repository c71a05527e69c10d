from __future__ import annotations

from predictor.store import audit_entries
from tests.serving.conftest import TestClient, auth


def test_put_policy_validates_and_names_the_field(client: TestClient) -> None:
    policy = client.get("/v1/policy", headers=auth("admin")).json()["policy"]
    bad = {**policy, "weights": {**policy["weights"], "age": -1}}
    r = client.put("/v1/policy", json=bad, headers=auth("admin"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "weights"]
    r = client.put("/v1/policy", json={**policy, "colour": "red"}, headers=auth("admin"))
    assert r.status_code == 422 and ["body", "colour"] in [e["loc"] for e in r.json()["detail"]]
    r = client.put("/v1/policy", json={**policy, "default_tier": "nope"}, headers=auth("admin"))
    assert r.status_code == 422 and "default_tier" in r.text


def test_a_new_policy_is_in_force_at_once_and_audited(client: TestClient) -> None:
    client.post("/v1/jobs", json={"job_id": "a", "num_gpus": 8, "team": "nlp"}, headers=auth("scheduler"))
    before = client.get("/v1/queue", headers=auth("admin")).json()["jobs"][0]["decision"]
    policy = client.get("/v1/policy", headers=auth("admin")).json()["policy"]
    new = {**policy, "name": "tier-only", "weights": {"tier": 1.0}}
    r = client.put("/v1/policy", json=new, headers=auth("admin"))
    assert r.status_code == 200 and r.json()["policy_id"] == 1
    assert client.get("/v1/policy", headers=auth("nlp")).json()["policy"]["name"] == "tier-only"
    after = client.get("/v1/queue", headers=auth("admin")).json()["jobs"][0]["decision"]
    assert [f["name"] for f in after["factors"]] == ["tier"] != [f["name"] for f in before["factors"]]
    with client.service.db.session() as s:
        [entry] = audit_entries(s, target="policy")
    assert (entry.action, entry.actor, entry.detail["name"]) == ("policy.update", "ops", "tier-only")
