from __future__ import annotations

import pytest

from predictor.store import audit_entries
from tests.serving.conftest import TestClient, auth


def test_put_policy_validates_and_names_the_field(client: TestClient) -> None:
    policy = client.get("/v1/policy", headers=auth("admin")).json()["policy"]
    bad = {**policy, "weights": {**policy["weights"], "age": -1}}
    r = client.put("/v1/policy", json={"policy": bad}, headers=auth("admin"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "policy", "weights"]
    r = client.put("/v1/policy", json={"policy": {**policy, "colour": "red"}}, headers=auth("admin"))
    assert r.status_code == 422 and ["body", "policy", "colour"] in [e["loc"] for e in r.json()["detail"]]
    r = client.put("/v1/policy", json={"policy": {**policy, "default_tier": "nope"}}, headers=auth("admin"))
    assert r.status_code == 422 and "default_tier" in r.text


def test_a_new_policy_is_in_force_at_once_and_audited(client: TestClient) -> None:
    client.post("/v1/jobs", json={"job_id": "a", "num_gpus": 8, "team": "nlp"}, headers=auth("scheduler"))
    before = client.get("/v1/queue", headers=auth("admin")).json()["jobs"][0]["decision"]
    policy = client.get("/v1/policy", headers=auth("admin")).json()["policy"]
    new = {**policy, "name": "tier-only", "weights": {"tier": 1.0}}
    r = client.put("/v1/policy", json={"policy": new}, headers=auth("admin"))
    assert r.status_code == 200 and r.json()["policy_id"] == 1
    assert client.get("/v1/policy", headers=auth("nlp")).json()["policy"]["name"] == "tier-only"
    after = client.get("/v1/queue", headers=auth("admin")).json()["jobs"][0]["decision"]
    assert [f["name"] for f in after["factors"]] == ["tier"] != [f["name"] for f in before["factors"]]
    with client.service.db.session() as s:
        [entry] = audit_entries(s, target="policy")
    assert (entry.action, entry.actor, entry.detail["name"]) == ("policy.update", "ops", "tier-only")


def _get(client: TestClient) -> dict:
    return client.get("/v1/policy", headers=auth("admin")).json()


def test_the_document_get_returns_is_put_able_as_is(client: TestClient) -> None:
    doc = _get(client)
    r = client.put("/v1/policy", json=doc, headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert r.json()["policy"] == doc["policy"] and r.json()["policy_id"] == 1
    again = _get(client)
    assert client.put("/v1/policy", json=again, headers=auth("admin")).json()["policy_id"] == 2


def test_a_put_based_on_a_stale_read_is_a_409(client: TestClient) -> None:
    stale = _get(client)
    assert client.put("/v1/policy", json=stale, headers=auth("admin")).status_code == 200
    r = client.put("/v1/policy", json={**stale, "policy": {**stale["policy"], "name": "late"}}, headers=auth("admin"))
    assert r.status_code == 409 and "policy_id 1" in r.json()["detail"], r.text
    unconditional = {"policy": {**stale["policy"], "name": "late"}}  # no policy_id: replace whatever is in force
    assert client.put("/v1/policy", json=unconditional, headers=auth("admin")).status_code == 200


@pytest.mark.parametrize(("path", "value"), [
    pytest.param(("quotas", "enabled"), "yes", id="bool-as-string"),
    pytest.param(("teams",), {"nlp": {"share": "2"}}, id="number-as-string"),
    pytest.param(("factors", "age", "cap_s"), True, id="bool-as-number"),
    pytest.param(("tiers", "production", "kueue_priority"), 1.5, id="fraction-as-integer"),
    pytest.param(("name",), 7, id="number-as-string-field"),
])
def test_put_is_as_strict_as_the_job_api(client: TestClient, path: tuple, value) -> None:
    doc = _get(client)
    node = doc["policy"]
    for key in path[:-1]:
        node = node[key]
    assert path[-1] in node or path == ("teams",), f"no field {path} in the policy"
    node[path[-1]] = value
    r = client.put("/v1/policy", json=doc, headers=auth("admin"))
    assert r.status_code == 422, r.text
    assert any(e["loc"][:len(path) + 2] == ["body", "policy", *path] for e in r.json()["detail"]), r.text


def test_a_put_missing_sections_is_refused_naming_them(client: TestClient) -> None:
    r = client.put("/v1/policy", json={}, headers=auth("admin"))
    assert r.status_code == 422 and ["body", "policy"] in [e["loc"] for e in r.json()["detail"]]
    r = client.put("/v1/policy", json={"policy": {}}, headers=auth("admin"))
    assert r.status_code == 422
    missing = {tuple(e["loc"]) for e in r.json()["detail"] if e["type"] == "missing"}
    assert ("body", "policy", "weights") in missing and ("body", "policy", "tiers") in missing
    doc = _get(client)
    del doc["policy"]["aging"]
    r = client.put("/v1/policy", json=doc, headers=auth("admin"))
    assert r.status_code == 422 and [e["loc"] for e in r.json()["detail"]] == [["body", "policy", "aging"]]
    assert _get(client)["policy_id"] is None  # nothing was put in force


def test_patch_is_a_json_merge_patch_over_the_policy_in_force(client: TestClient) -> None:
    before = _get(client)["policy"]
    r = client.patch("/v1/policy", json={"weights": {"age": 4.0, "topology": None}, "teams": {"nlp": {"share": 2}}},
                     headers={**auth("admin"), "Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    after = r.json()["policy"]
    want = {k: v for k, v in before["weights"].items() if k != "topology"} | {"age": 4.0}
    assert after["weights"] == want  # one weight changed, one factor switched off, the rest kept
    assert after["teams"]["nlp"]["share"] == 2 and after["tiers"] == before["tiers"]
    assert _get(client)["policy"] == after
    bad = client.patch("/v1/policy", json={"quotas": {"enabled": "yes"}}, headers=auth("admin"))
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "quotas", "enabled"], bad.text
    assert client.patch("/v1/policy", json={"weights": 1}, headers=auth("admin")).status_code == 422
    assert client.patch("/v1/policy", json={}, headers=auth("nlp")).status_code == 403


@pytest.mark.parametrize("content", [b"", b"not json", b"[1, 2]"], ids=["empty", "not-json", "not-an-object"])
def test_a_patch_that_is_not_a_json_object_is_a_422(client: TestClient, content: bytes) -> None:
    r = client.patch("/v1/policy", content=content, headers={**auth("admin"), "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] == "body", r.text
