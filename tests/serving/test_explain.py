"""``GET /v1/jobs/{id}/explain``, ``POST /v1/score?start_estimate=true``, start estimates in
``GET /v1/queue`` and ``GET /v1/teams/{team}`` against the in-process app (real store, real engine)."""

from __future__ import annotations

import time

from tests.serving.conftest import TestClient, auth


def _submit(client: TestClient, job_id: str, **fields) -> dict:
    r = client.post("/v1/jobs", json={"job_id": job_id, **fields}, headers=auth("scheduler"))
    assert r.status_code == 201, r.text
    return r.json()


def _fill(client: TestClient, limit_s: float = 4 * 3600) -> None:
    """Four 16-GPU jobs running on the 64-GPU default cluster."""
    for i in range(4):
        _submit(client, f"run-{i}", num_gpus=16, team="vision", time_limit_s=limit_s)
        assert client.post(f"/v1/jobs/run-{i}/events", json={"kind": "started"},
                           headers=auth("scheduler")).status_code == 200


def test_explain_names_what_holds_the_gpus_who_is_ahead_and_when_it_starts(client: TestClient) -> None:
    _fill(client)
    _submit(client, "first", num_gpus=16, team="nlp", tier="production", time_limit_s=3600)
    _submit(client, "second", num_gpus=32, team="nlp", tier="research", time_limit_s=7200)
    r = client.get("/v1/jobs/second/explain", headers=auth("admin"))
    assert r.status_code == 200, r.text
    doc = r.json()
    chain = doc["chain"]
    assert chain["asks"]["num_gpus"] == 32
    assert chain["could_run_on"]["can_ever_run"] is True
    held = chain["held_by"]
    assert held["free_gpus_now"] == 0 and held["running_jobs_on_these_types"] == 4
    assert {h["job_id"] for h in held["next_to_free"]} == {f"run-{i}" for i in range(4)}
    ends = [h["predicted_end_ts"] for h in held["next_to_free"]]
    assert ends == sorted(ends)
    ahead = chain["ahead"]
    assert ahead["rank"] == 2 and [j["job_id"] for j in ahead["just_ahead"]] == ["first"]
    assert ahead["just_ahead"][0]["priority"] > ahead["priority"]
    assert {f["name"] for f in ahead["just_ahead"][0]["factors"]} == {f["name"] for f in ahead["factors"]}
    est = chain["start_estimate"]
    now = time.time()
    assert now - 60 < est["p10_ts"] <= est["p50_ts"] <= est["p90_ts"]
    # it needs 32 GPUs: two of the running 16-GPU jobs must end first (at their p90 in the p90 walk)
    assert est["p90_ts"] >= sorted(ends)[1] - 1.0
    assert est["p50_ts"] > now + 60
    for part in ("asks", "could_run_on", "held_by", "ahead", "reservation", "decision", "start_estimate", "what_if"):
        assert chain[part]["rule"], part
    assert any("Rank 2 of 2" in s for s in doc["summary"])
    options = chain["what_if"]["options"]
    halved = next(o for o in options if o["change"].startswith("ask for 16 GPUs"))
    assert halved["p50_start_ts"] <= est["p50_ts"]


def test_explain_answers_404_for_running_unknown_and_other_teams_jobs(client: TestClient) -> None:
    _fill(client)
    _submit(client, "mine", num_gpus=8, team="nlp", time_limit_s=3600)
    assert client.get("/v1/jobs/run-0/explain", headers=auth("admin")).status_code == 404
    assert client.get("/v1/jobs/nope/explain", headers=auth("admin")).status_code == 404
    assert client.get("/v1/jobs/mine/explain", headers=auth("vision")).status_code == 404
    assert client.get("/v1/jobs/mine/explain", headers=auth("nlp")).status_code == 200
    assert client.get("/v1/jobs/mine/explain").status_code == 401


def test_queue_and_score_carry_start_estimates(client: TestClient) -> None:
    _fill(client)
    _submit(client, "waiting", num_gpus=16, team="nlp", time_limit_s=3600)
    jobs = client.get("/v1/queue", headers=auth("admin")).json()["jobs"]
    pending = [j for j in jobs if j["status"] == "pending"]
    assert len(pending) == 1 and pending[0]["start_estimate"]["p50_ts"] > time.time() - 60
    assert all(j["start_estimate"] is None for j in jobs if j["status"] == "running")
    body = {"job_id": "what-if", "num_gpus": 16, "team": "nlp", "time_limit_s": 3600}
    plain = client.post("/v1/score", json=body, headers=auth("nlp")).json()
    assert plain["results"][0].get("start_estimate") is None
    scored = client.post("/v1/score?start_estimate=true", json=body, headers=auth("nlp")).json()
    start = scored["results"][0]["start_estimate"]
    assert start["p10_ts"] <= start["p50_ts"] <= start["p90_ts"]
    # the same job behind the tracked one cannot start before it
    assert start["p50_ts"] >= pending[0]["start_estimate"]["p50_ts"] - 1.0
    small = client.post("/v1/score?start_estimate=true", json={**body, "num_gpus": 1, "job_id": "x"},
                        headers=auth("nlp")).json()["results"][0]["start_estimate"]
    assert small["p50_ts"] <= start["p50_ts"]


def test_team_fairshare_explained(client: TestClient) -> None:
    _fill(client)
    _submit(client, "n1", num_gpus=8, team="nlp", time_limit_s=3600)
    r = client.get("/v1/teams/vision", headers=auth("nlp"))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["team"] == "vision" and doc["running_gpus"] == 64
    assert len(doc["usage_history"]) >= 2 and doc["usage_history"][-1]["ts"] == doc["as_of"]
    # vision holds every GPU: it uses all the usage, over its share, and at this rate never recovers
    assert doc["usage_fraction"] > 0.99 and doc["over_share"] and doc["factor"] < 0.5
    assert doc["recovers_in_s"] is None
    assert client.get("/v1/teams/nobody", headers=auth("admin")).status_code == 404


def test_after_a_queue_change_explain_answers_from_the_latest_plan_and_says_how_old(client: TestClient) -> None:
    _fill(client)
    _submit(client, "early", num_gpus=16, team="nlp", time_limit_s=3600)
    first = client.get("/v1/jobs/early/explain", headers=auth("admin")).json()["plan"]
    assert first["current"] is True and first["as_of_seq"] == first["queue_seq"]
    estimates = client.app.state.service._queue_estimates  # noqa: SLF001
    estimates.wait_background(30)
    _submit(client, "later", num_gpus=16, team="vision", time_limit_s=3600)
    # the kept plan predates "later": explain answers from it at once, says so, refreshes behind
    stale = client.get("/v1/jobs/early/explain", headers=auth("admin")).json()
    assert stale["plan"]["current"] is False and stale["plan"]["as_of_seq"] == first["as_of_seq"]
    assert stale["plan"]["queue_seq"] > stale["plan"]["as_of_seq"]
    assert stale["chain"]["ahead"]["rank"] == 1
    estimates.wait_background(30)
    fresh = client.get("/v1/jobs/early/explain", headers=auth("admin")).json()["plan"]
    assert fresh["current"] is True and fresh["as_of_seq"] == fresh["queue_seq"] > first["as_of_seq"]
    # a job submitted since the kept plan is not in it: explain waits for a plan that holds it
    _submit(client, "newest", num_gpus=16, team="nlp", time_limit_s=3600)
    newest = client.get("/v1/jobs/newest/explain", headers=auth("admin"))
    assert newest.status_code == 200, newest.text
    assert newest.json()["plan"]["current"] is True and newest.json()["chain"]["ahead"]["rank"] >= 2
    # a job that started since the kept plan is not explained from it
    estimates.wait_background(30)
    assert client.post("/v1/jobs/early/events", json={"kind": "started"}, headers=auth("scheduler")).status_code == 200
    assert client.get("/v1/jobs/early/explain", headers=auth("admin")).status_code == 404


def test_start_estimates_learn_from_the_starts_they_predicted(client: TestClient) -> None:
    """Rule *calibrated interval*: a job estimated while queued and seen running later is one sample."""
    _fill(client)
    _submit(client, "early", num_gpus=16, team="nlp", time_limit_s=3600)
    first = client.get("/v1/queue", headers=auth("admin")).json()["jobs"]
    est = next(j for j in first if j["job_id"] == "early")["start_estimate"]
    assert est["interval"]["samples"] == 0 and est["interval"]["calibrated"] is False
    assert est["interval"]["p10_wait_factor"] == 1.0 and est["interval"]["rule"]
    for kind, job in (("finished", "run-0"), ("started", "early")):
        r = client.post(f"/v1/jobs/{job}/events", json={"kind": kind}, headers=auth("scheduler"))
        assert r.status_code == 200, r.text
    _submit(client, "late", num_gpus=16, team="nlp", time_limit_s=3600)
    jobs = client.get("/v1/queue", headers=auth("admin")).json()["jobs"]
    late = next(j for j in jobs if j["job_id"] == "late")["start_estimate"]
    assert late["interval"]["samples"] == 1  # "early"'s estimate against its start
    scored = client.post("/v1/score?start_estimate=true", json={"job_id": "what-if", "num_gpus": 16, "team": "nlp"},
                         headers=auth("nlp")).json()["results"][0]["start_estimate"]
    assert scored["interval"]["samples"] == 1
