"""``started`` events name real GPUs: shape errors are 422s, GPUs another job holds are 409s (issue 12, item 6).

The fixture's cluster is the default inventory: 8-GPU nodes ``node-0000``, ``node-0001``...
"""

from __future__ import annotations

import pytest

from tests.serving.conftest import TestClient, auth

H = auth("scheduler")


def _submit(client: TestClient, job_id: str, num_gpus: int, **extra) -> None:
    r = client.post("/v1/jobs", json={"job_id": job_id, "num_gpus": num_gpus, "team": "nlp", **extra}, headers=H)
    assert r.status_code == 201, r.text


def _start(client: TestClient, job_id: str, nodes: list[dict]):
    return client.post(f"/v1/jobs/{job_id}/events", json={"kind": "started", "nodes": nodes}, headers=H)


@pytest.mark.parametrize(("num_gpus", "nodes", "loc", "words"), [
    pytest.param(2, [{"node": "node-0000", "gpu_indices": [0, 0]}], ["body", "nodes", 0, "gpu_indices"],
                 "twice", id="duplicate-index"),
    pytest.param(2, [{"node": "node-0000", "gpu_indices": [0]}, {"node": "node-0000", "gpu_indices": [1]}],
                 ["body", "nodes"], "node-0000", id="node-listed-twice"),
    pytest.param(4, [{"node": "node-0000", "gpu_indices": [0]}], ["body", "nodes"], "4 GPU", id="too-few"),
    pytest.param(1, [{"node": "node-0000", "gpu_indices": [0, 1]}], ["body", "nodes"], "1 GPU", id="too-many"),
    pytest.param(1, [{"node": "dgx-00", "gpu_indices": [0]}], ["body", "nodes"], "dgx-00", id="unknown-node"),
    pytest.param(1, [{"node": "node-0000", "gpu_indices": [8]}], ["body", "nodes"], "no GPU 8", id="no-such-gpu"),
])
def test_impossible_allocations_are_422_naming_the_gpus(client: TestClient, num_gpus: int, nodes: list,
                                                         loc: list, words: str) -> None:
    _submit(client, "j1", num_gpus)
    r = _start(client, "j1", nodes)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert loc in [e["loc"] for e in detail] and any(words in e["msg"] for e in detail), detail
    job = client.get("/v1/jobs/j1", headers=H).json()
    assert (job["status"], job["allocation"]) == ("pending", None)  # nothing stored


def test_gpus_a_running_job_holds_are_a_409_naming_them(client: TestClient) -> None:
    _submit(client, "a", 2)
    _submit(client, "b", 2)
    assert _start(client, "a", [{"node": "node-0001", "gpu_indices": [2, 3]}]).status_code == 200
    r = _start(client, "b", [{"node": "node-0001", "gpu_indices": [3, 4]}])
    assert r.status_code == 409, r.text
    assert "node-0001 GPU 3" in r.json()["detail"] and "a" in r.json()["detail"]
    assert "GPU 4" not in r.json()["detail"]
    assert client.get("/v1/jobs/b", headers=H).json()["status"] == "pending"
    assert _start(client, "b", [{"node": "node-0001", "gpu_indices": [4, 5]}]).status_code == 200


def test_fractional_jobs_share_a_gpu_up_to_its_whole(client: TestClient) -> None:
    for name, milli in (("half-1", 500), ("half-2", 500), ("third", 300)):
        _submit(client, name, 1, gpu_milli=milli)
    gpu = [{"node": "node-0000", "gpu_indices": [7]}]
    assert _start(client, "half-1", gpu).status_code == 200
    assert _start(client, "half-2", gpu).status_code == 200
    r = _start(client, "third", gpu)
    assert r.status_code == 409 and "node-0000 GPU 7" in r.json()["detail"], r.text


def test_the_job_shows_its_allocation(client: TestClient) -> None:
    _submit(client, "a", 2)
    assert client.get("/v1/jobs/a", headers=H).json()["allocation"] is None
    _start(client, "a", [{"node": "node-0002", "gpu_indices": [1, 0]}])
    job = client.get("/v1/jobs/a", headers=H).json()
    assert job["allocation"] == [{"node": "node-0002", "gpu_indices": [1, 0]}]
    chosen = client.post("/v1/jobs", json={"job_id": "b", "num_gpus": 4, "team": "nlp"}, headers=H)
    assert chosen.status_code == 201
    client.post("/v1/jobs/b/events", json={"kind": "started"}, headers=H)
    held = client.get("/v1/jobs/b", headers=H).json()["allocation"]
    assert sum(len(p["gpu_indices"]) for p in held) == 4
    assert not {("node-0002", 0), ("node-0002", 1)} & {(p["node"], g) for p in held for g in p["gpu_indices"]}
    client.post("/v1/jobs/a/events", json={"kind": "finished"}, headers=H)
    assert client.get("/v1/jobs/a", headers=H).json()["allocation"] is None
