from __future__ import annotations

import json

import pytest

from tests.serving.conftest import TestClient, auth

JOB = {"job_id": "train-1", "num_gpus": 8, "team": "nlp", "time_limit_s": 7200, "precision": "bf16"}


def test_one_job_gets_a_prediction_and_a_decision(client: TestClient) -> None:
    r = client.post("/v1/score", json=JOB, headers=auth("scheduler"))
    assert r.status_code == 200
    [result] = r.json()["results"]
    assert result["job_id"] == "train-1"
    pred, dec = result["prediction"], result["decision"]
    assert pred["duration"] == {"p10_s": 1200.0, "p50_s": 3600.0, "p90_s": 7200.0}  # p50 / 3, capped at the limit
    assert set(pred["slowdown"]) == {"nvlink", "pcie_same_numa", "cross_numa", "cross_node_same_rack", "cross_rack"}
    assert dec["action"] == "start" and dec["flavor"] == "A100-80GB" and dec["placement"]["num_gpus"] == 8
    assert dec["priority"] > 0 and dec["reason"]
    names = {f["name"] for f in dec["factors"]}
    assert {"tier", "age", "fairshare", "shortness"} <= names
    assert dec["score"] == pytest.approx(sum(f["contribution"] for f in dec["factors"]))


def test_every_response_says_the_fallback_answered(client: TestClient) -> None:
    r = client.post("/v1/score", json=JOB, headers=auth("scheduler"))
    body = r.json()
    assert body["model"] == {"version": "fallback", "fallback": True,
                             "fallback_reason": "no model registered at models:/job-predictor@champion"}
    assert body["results"][0]["prediction"]["fallback"] and body["results"][0]["decision"]["fallback"]
    for response in (r, client.get("/v1/queue", headers=auth("admin")), client.get("/healthz")):
        assert response.headers["x-model-fallback"] == "true"
        assert response.headers["x-model-version"] == "fallback"


def test_a_batch_is_decided_together_and_changes_nothing(client: TestClient) -> None:
    jobs = [{**JOB, "job_id": f"j{i}", "num_gpus": 16} for i in range(6)]
    r = client.post("/v1/score", json={"jobs": jobs}, headers=auth("scheduler"))
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["job_id"] for x in results] == [j["job_id"] for j in jobs]
    actions = [x["decision"]["action"] for x in results]
    assert actions.count("start") == 4  # 64 GPUs hold four 16-GPU gangs; the rest reserve or wait
    assert set(actions[4:]) <= {"reserve", "wait"}
    assert client.get("/v1/queue", headers=auth("admin")).json()["jobs"] == []
    assert client.get("/v1/jobs", headers=auth("admin")).json()["jobs"] == []
    assert client.get("/readyz").json()["stream_last_seq"] == 0


BAD = [
    ({**JOB, "num_gpus": 0}, ["body", "single", "num_gpus"]),
    ({**JOB, "num_gpus": "eight"}, ["body", "single", "num_gpus"]),
    ({**JOB, "gpus": 8}, ["body", "single", "gpus"]),
    ({**JOB, "precision": "fp64"}, ["body", "single", "precision"]),
    ({**JOB, "gpu_milli": 1001}, ["body", "single", "gpu_milli"]),
    ({**JOB, "job_id": "bad id with spaces"}, ["body", "single", "job_id"]),
    ({**JOB, "time_limit_s": -5}, ["body", "single", "time_limit_s"]),
    ({k: v for k, v in JOB.items() if k != "job_id"}, ["body", "single", "job_id"]),
    ({"jobs": []}, ["body", "batch", "jobs"]),
    ({"jobs": [JOB], "extra": 1}, ["body", "batch", "extra"]),
    ({"jobs": [{**JOB, "mem_mib": -1}]}, ["body", "batch", "jobs", 0, "mem_mib"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD, ids=[str(loc[2:]) for _, loc in BAD])
def test_bad_fields_are_named_in_a_422(client: TestClient, body: dict, loc: list) -> None:
    r = client.post("/v1/score", json=body, headers=auth("scheduler"))
    assert r.status_code == 422
    assert loc in [e["loc"] for e in r.json()["detail"]], r.json()


def test_non_finite_numbers_are_rejected(client: TestClient) -> None:
    body = '{"job_id": "x", "num_gpus": 1, "time_limit_s": NaN}'
    r = client.post("/v1/score", content=body, headers={**auth("scheduler"), "Content-Type": "application/json"})
    assert r.status_code == 422


def test_duplicate_ids_in_a_batch_are_a_422(client: TestClient) -> None:
    r = client.post("/v1/score", json={"jobs": [JOB, JOB]}, headers=auth("scheduler"))
    assert r.status_code == 422
    assert "appears twice" in r.json()["detail"][0]["msg"]


def test_batches_larger_than_the_configured_limit_are_refused(settings, tmp_path) -> None:
    from serving.app import create_app
    from serving.service import build_service
    from tests.serving.doubles import no_model_slot

    service = build_service(settings.model_copy(update={"max_batch": 3}), model=no_model_slot())
    with TestClient(create_app(service=service)) as c:
        jobs = [{**JOB, "job_id": f"j{i}"} for i in range(4)]
        r = c.post("/v1/score", json={"jobs": jobs}, headers=auth("scheduler"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "jobs"]


def test_bodies_over_the_limit_are_a_413(client: TestClient) -> None:
    big = {"jobs": [{**JOB, "job_id": f"j{i}", "job_name": "x" * 900} for i in range(100)]}  # ~100 KB > 64 KiB
    r = client.post("/v1/score", json=big, headers=auth("scheduler"))
    assert r.status_code == 413

    def chunks():  # no Content-Length: the limit is enforced while reading
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    r = client.post("/v1/score", content=chunks(), headers={**auth("scheduler"), "Content-Type": "application/json"})
    assert r.status_code == 413


def test_explain_false_gives_the_same_decisions_without_the_text(client: TestClient) -> None:
    jobs = [{**JOB, "job_id": f"e{i}", "num_gpus": 16, "deadline_ts": 2e9} for i in range(6)]
    full_body = client.post("/v1/score", json={"jobs": jobs}, headers=auth("scheduler")).json()
    terse_body = client.post("/v1/score?explain=false", json={"jobs": jobs}, headers=auth("scheduler")).json()
    full, terse = full_body["results"], terse_body["results"]
    shift = terse_body["scored_at"] - full_body["scored_at"]  # two requests: times move with "now"
    assert [r["job_id"] for r in terse] == [j["job_id"] for j in jobs]
    for a, b in zip(full, terse, strict=True):
        assert a["prediction"] == b["prediction"]
        da, db = a["decision"], b["decision"]
        for key in ("action", "priority", "kueue_priority", "flavor", "placement", "eviction",
                    "time_limit_s", "sla_at_risk", "num_gpus", "tier"):
            assert da[key] == db[key], key
        assert (da["reservation"] is None) == (db["reservation"] is None)
        if da["reservation"] is not None:
            assert da["reservation"]["placement"] == db["reservation"]["placement"]
            for t in ("start_ts", "expires_ts", "predicted_end_ts"):
                assert db["reservation"][t] - da["reservation"][t] == pytest.approx(shift, abs=1e-3)
        assert [(f["name"], f["value"], f["weight"]) for f in da["factors"]] == \
               [(f["name"], f["value"], f["weight"]) for f in db["factors"]]
        assert all(f["detail"] for f in da["factors"]) and not any(f["detail"] for f in db["factors"])
        assert db["reason"] and len(db["reason"]) < len(da["reason"]) and db["warnings"] == []
    r = client.post("/v1/score?explain=maybe", json=JOB, headers=auth("scheduler"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "explain"]
