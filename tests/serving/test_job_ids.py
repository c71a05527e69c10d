"""Every id form a scheduler uses round-trips through every job route (issue 11, item 5).

Kueue names a Workload ``namespace/name``; Slurm array and heterogeneous jobs are ``123_4`` and
``123+0``. Each is submitted, read, listed, changed, reported on and withdrawn, by its plain id in the
path and by its percent-encoded form (what ``encodeURIComponent`` and most HTTP clients send).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.serving.conftest import TestClient, auth

IDS = ["team-a/train-llama-7b", "123_4", "123+0", "ns/name.with.dots", "a:b@c=d"]
ID_PARAMS = [pytest.param(i, id=i) for i in IDS]
ENCODINGS = [pytest.param(lambda i: i, id="plain"), pytest.param(lambda i: quote(i, safe=""), id="encoded")]


def _submit(client: TestClient, job_id: str) -> None:
    r = client.post("/v1/jobs", json={"job_id": job_id, "num_gpus": 1, "team": "nlp"}, headers=auth("scheduler"))
    assert r.status_code == 201, r.text
    assert r.json()["job_id"] == job_id


@pytest.mark.parametrize("encode", ENCODINGS)
@pytest.mark.parametrize("job_id", ID_PARAMS)
def test_get(client: TestClient, job_id: str, encode) -> None:
    _submit(client, job_id)
    r = client.get(f"/v1/jobs/{encode(job_id)}", headers=auth("scheduler"))
    assert r.status_code == 200, r.text
    assert r.json()["job_id"] == job_id


@pytest.mark.parametrize("job_id", ID_PARAMS)
def test_list(client: TestClient, job_id: str) -> None:
    _submit(client, job_id)
    listed = client.get("/v1/jobs", headers=auth("scheduler")).json()["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]


@pytest.mark.parametrize("encode", ENCODINGS)
@pytest.mark.parametrize("job_id", ID_PARAMS)
def test_patch(client: TestClient, job_id: str, encode) -> None:
    _submit(client, job_id)
    r = client.patch(f"/v1/jobs/{encode(job_id)}", json={"time_limit_s": 600}, headers=auth("scheduler"))
    assert r.status_code == 200, r.text
    assert (r.json()["job_id"], r.json()["request"]["time_limit_s"]) == (job_id, 600)


@pytest.mark.parametrize("encode", ENCODINGS)
@pytest.mark.parametrize("job_id", ID_PARAMS)
def test_events(client: TestClient, job_id: str, encode) -> None:
    _submit(client, job_id)
    h = auth("scheduler")
    started = client.post(f"/v1/jobs/{encode(job_id)}/events", json={"kind": "started"}, headers=h)
    assert started.status_code == 200, started.text
    assert (started.json()["job_id"], started.json()["status"]) == (job_id, "running")
    ended = client.post(f"/v1/jobs/{encode(job_id)}/events", json={"kind": "finished"}, headers=h)
    assert ended.status_code == 200 and ended.json()["status"] == "ended", ended.text


@pytest.mark.parametrize("encode", ENCODINGS)
@pytest.mark.parametrize("job_id", ID_PARAMS)
def test_delete(client: TestClient, job_id: str, encode) -> None:
    _submit(client, job_id)
    r = client.delete(f"/v1/jobs/{encode(job_id)}", headers=auth("scheduler"))
    assert r.status_code == 200, r.text
    assert (r.json()["job_id"], r.json()["status"]) == (job_id, "cancelled")


def test_an_id_ending_in_events_is_still_one_job(client: TestClient) -> None:
    """``GET /v1/jobs/ns/events`` reads the job ``ns/events``; only POST to ``.../events`` reports an event."""
    _submit(client, "ns/events")
    assert client.get("/v1/jobs/ns/events", headers=auth("scheduler")).json()["job_id"] == "ns/events"
    r = client.post("/v1/jobs/ns/events/events", json={"kind": "started"}, headers=auth("scheduler"))
    assert r.status_code == 200 and r.json()["job_id"] == "ns/events", r.text


@pytest.mark.parametrize("bad", ["ns//name", "ns/", "ns/../x", "ns/./x", "/abs", "-dash", "sp ace"])
def test_ids_that_would_not_round_trip_are_refused(client: TestClient, bad: str) -> None:
    """Empty, ``.`` and ``..`` segments are rewritten by URL normalisation: refused at submission."""
    r = client.post("/v1/jobs", json={"job_id": bad, "num_gpus": 1, "team": "nlp"}, headers=auth("scheduler"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "job_id"], r.text
