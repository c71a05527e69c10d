from __future__ import annotations

import pytest

from predictor.store import audit_entries
from tests.serving.conftest import TestClient, auth

JOB = {"job_id": "train-1", "num_gpus": 8, "team": "nlp", "time_limit_s": 7200}


def test_submission_is_idempotent_by_job_id(client: TestClient) -> None:
    first = client.post("/v1/jobs", json=JOB, headers=auth("scheduler"))
    again = client.post("/v1/jobs", json=JOB, headers=auth("scheduler"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    clash = client.post("/v1/jobs", json={**JOB, "num_gpus": 4}, headers=auth("scheduler"))
    assert clash.status_code == 409 and "different fields" in clash.json()["detail"]
    assert len(client.get("/v1/jobs", headers=auth("admin")).json()["jobs"]) == 1


def test_a_job_through_its_life(client: TestClient) -> None:
    h = auth("scheduler")
    job = client.post("/v1/jobs", json=JOB, headers=h).json()
    assert job["status"] == "pending" and job["decision"]["action"] == "start"
    placement = job["decision"]["placement"]
    started = client.post("/v1/jobs/train-1/events", json={"kind": "started"}, headers=h).json()
    assert started["status"] == "running" and started["start_ts"] is not None
    assert client.post("/v1/jobs/train-1/events", json={"kind": "checkpointed"}, headers=h).status_code == 200
    ended = client.post("/v1/jobs/train-1/events",
                        json={"kind": "finished", "peak_vram_mib": 31000, "placement_class": "nvlink"},
                        headers=h).json()
    assert (ended["status"], ended["state"]) == ("ended", "COMPLETED")
    assert placement["gpus_by_node"][0]["gpus"] == 8
    again = client.post("/v1/jobs/train-1/events", json={"kind": "finished"}, headers=h)
    assert again.status_code == 409


@pytest.mark.parametrize(("body", "loc"), [
    ({"kind": "exploded"}, ["body", "kind"]),
    ({"kind": "finished", "state": "RUNNING"}, ["body", "state"]),
    ({"kind": "started", "nodes": [{"node": "node-0000", "gpu_indices": []}]}, ["body", "nodes", 0, "gpu_indices"]),
    ({"kind": "started", "colour": "red"}, ["body", "colour"]),
])
def test_bad_events_name_the_field(client: TestClient, body: dict, loc: list) -> None:
    client.post("/v1/jobs", json=JOB, headers=auth("scheduler"))
    r = client.post("/v1/jobs/train-1/events", json=body, headers=auth("scheduler"))
    assert r.status_code == 422 and loc in [e["loc"] for e in r.json()["detail"]]


def test_a_started_job_on_unknown_gpus_is_a_422_naming_nodes(client: TestClient) -> None:
    client.post("/v1/jobs", json=JOB, headers=auth("scheduler"))
    r = client.post("/v1/jobs/train-1/events", json={"kind": "started", "nodes": [
        {"node": "no-such-node", "gpu_indices": [0]}]}, headers=auth("scheduler"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "nodes"]


def test_patch_and_delete(client: TestClient) -> None:
    h = auth("scheduler")
    client.post("/v1/jobs", json=JOB, headers=h)
    patched = client.patch("/v1/jobs/train-1", json={"time_limit_s": 600, "tier": "production"}, headers=h).json()
    assert patched["request"]["time_limit_s"] == 600 and patched["tier"] == "production"
    assert patched["decision"]["tier"] == "production"
    assert client.patch("/v1/jobs/train-1", json={"job_id": "other"}, headers=h).status_code == 422
    assert client.delete("/v1/jobs/train-1", headers=h).json()["status"] == "cancelled"
    assert client.delete("/v1/jobs/train-1", headers=h).status_code == 409
    assert client.get("/v1/jobs/nope", headers=h).status_code == 404


def test_changes_are_audited(client: TestClient) -> None:
    client.post("/v1/jobs", json=JOB, headers=auth("nlp"))
    client.delete("/v1/jobs/train-1", headers=auth("admin"))
    with client.service.db.session() as s:
        entries = audit_entries(s, target="train-1")
    assert [(e.action, e.actor, e.role) for e in entries] == [("job.delete", "ops", "admin"),
                                                              ("job.create", "alice", "member")]


def test_another_teams_job_id_is_answered_like_a_taken_id_of_ones_own(client: TestClient) -> None:
    """A member learns nothing of another team's jobs: POSTing an id vision holds answers exactly what
    an id nlp itself holds with other fields answers (the id is taken), never "already exists"."""
    assert client.post("/v1/jobs", json={"job_id": "vis-1", "team": "vision"}, headers=auth("vision")).status_code == 201
    assert client.post("/v1/jobs", json={"job_id": "nlp-1", "team": "nlp"}, headers=auth("nlp")).status_code == 201
    theirs = client.post("/v1/jobs", json={"job_id": "vis-1", "team": "nlp", "num_gpus": 2}, headers=auth("nlp"))
    ours = client.post("/v1/jobs", json={"job_id": "nlp-1", "team": "nlp", "num_gpus": 2}, headers=auth("nlp"))
    assert theirs.status_code == ours.status_code == 409
    assert theirs.json()["detail"] == ours.json()["detail"].replace("nlp-1", "vis-1")
    assert not [w for w in ("exist", "vision", "different") if w in theirs.json()["detail"]], theirs.text
    assert client.get("/v1/jobs/vis-1", headers=auth("nlp")).status_code == 404
    same = client.post("/v1/jobs", json={"job_id": "vis-1", "team": "vision"}, headers=auth("nlp"))
    assert same.status_code == 403  # for another team: refused before any lookup


def test_replayed_submissions_make_one_job_and_one_creation_audit(client: TestClient) -> None:
    """Sixteen identical POSTs at once: one job, one ``job.create`` in the audit log (replays change
    nothing, so they are not audited)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        codes = sorted(pool.map(lambda _: client.post("/v1/jobs", json=JOB, headers=auth("scheduler")).status_code,
                                range(16)))
    assert codes == [200] * 15 + [201]
    with client.service.db.session() as s:
        entries = audit_entries(s, target="train-1")
    assert [(e.action, e.actor) for e in entries] == [("job.create", "slurm-webhook")]
