"""Start estimates on the stream (``/v1/stream?estimates=true``) from a real uvicorn on loopback:
all current estimates after the hello, then the ones that moved, members seeing their team's only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from tests.serving.conftest import auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _next_estimates(ws, until=lambda m: True, timeout_s: float = 30.0) -> dict:  # noqa: ANN001
    """The next ``start_estimates`` message satisfying ``until`` (numbered events are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        msg = json.loads(ws.recv(timeout=max(deadline - time.monotonic(), 0.1)))
        if msg["kind"] == "start_estimates":
            assert "seq" not in msg  # derived state: not numbered, not replayed
            if until(msg):
                return msg


def test_the_stream_carries_start_estimates_as_the_queue_changes(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "server.log") as base, httpx.Client(
            base_url=base, headers=auth("scheduler"), timeout=30) as api:
        for i in range(4):  # the 64-GPU default cluster is full
            assert api.post("/v1/jobs", json={"job_id": f"run-{i}", "num_gpus": 16, "team": "vision",
                                              "time_limit_s": 7200}).status_code == 201
            assert api.post(f"/v1/jobs/run-{i}/events", json={"kind": "started"}).status_code == 200
        ws_url = base.replace("http", "ws", 1) + "/v1/stream"
        with connect(ws_url + "?estimates=true", additional_headers=auth("admin")) as admin, \
                connect(ws_url + "?estimates=true", additional_headers=auth("vision")) as vision, \
                connect(ws_url, additional_headers=auth("admin")) as plain:
            for ws in (admin, vision, plain):
                assert json.loads(ws.recv(timeout=10))["kind"] == "stream.hello"
            full = _next_estimates(admin)
            assert full["full"] is True and full["estimates"] == {} and full["removed"] == []
            assert _next_estimates(vision)["full"] is True

            assert api.post("/v1/jobs", json={"job_id": "wait", "num_gpus": 16, "team": "nlp",
                                              "time_limit_s": 3600}).status_code == 201
            delta = _next_estimates(admin, lambda m: "wait" in m["estimates"])
            est = delta["estimates"]["wait"]
            assert delta["full"] is False and est["basis"] == "planned"
            assert time.time() - 60 < est["p10_ts"] <= est["p50_ts"] <= est["p90_ts"]
            # the same estimate GET /v1/queue shows (both read the service's kept plan)
            queued = next(j for j in api.get("/v1/queue").json()["jobs"] if j["job_id"] == "wait")
            assert queued["start_estimate"]["p50_ts"] == pytest.approx(est["p50_ts"], abs=120)
            assert delta["as_of_seq"] >= 10  # 4 x (created, decision, started) then "wait"

            # the vision member does not see nlp's job; it sees its own
            assert api.post("/v1/jobs", json={"job_id": "mine", "num_gpus": 16, "team": "vision",
                                              "time_limit_s": 3600}).status_code == 201
            seen = _next_estimates(vision, lambda m: "mine" in m["estimates"])
            assert "wait" not in seen["estimates"]

            # a job that starts leaves the estimates
            assert api.post("/v1/jobs/run-0/events", json={"kind": "finished"}).status_code == 200
            assert api.post("/v1/jobs/wait/events", json={"kind": "started"}).status_code == 200
            gone = _next_estimates(admin, lambda m: "wait" in m["removed"])
            assert "wait" not in gone["estimates"]

            # a client without ?estimates=true gets the numbered events only
            plain_kinds = set()
            while True:
                msg = json.loads(plain.recv(timeout=10))
                plain_kinds.add(msg["kind"])
                if msg["kind"] == "job.state" and msg["job_id"] == "wait":
                    break
            assert "start_estimates" not in plain_kinds

        # a client connecting later gets every current estimate at once, its team's only for a member
        with connect(ws_url + "?estimates=true", additional_headers=auth("admin")) as late:
            json.loads(late.recv(timeout=10))
            first = _next_estimates(late)
            assert first["full"] is True and set(first["estimates"]) == {"mine"}
            assert first["as_of_seq"] >= gone["as_of_seq"]
