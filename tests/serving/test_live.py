"""A real uvicorn on loopback: a restart loses nothing; a slow stream client is dropped, not waited for."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.serving.conftest import auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _state(api: httpx.Client) -> dict:
    queue = api.get("/v1/queue").json()
    return {
        "queue": [(j["job_id"], j["status"], j["rank"], j["decision"]["action"] if j["decision"] else None)
                  for j in queue["jobs"]],
        "reservations": api.get("/v1/reservations").json()["reservations"],
        "teams": [(t["team"], round(t["usage_gpu_hours"], 3)) for t in api.get("/v1/teams").json()["teams"]],
        "jobs": api.get("/v1/jobs", params={"limit": 1000}).json()["jobs"],
        "policy": api.get("/v1/policy").json(),
    }


def test_a_restart_loses_nothing(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "first.log") as base, httpx.Client(
            base_url=base, headers=auth("admin"), timeout=30) as api:
        for i in range(4):
            api.post("/v1/jobs", json={"job_id": f"run-{i}", "num_gpus": 16, "team": "vision", "time_limit_s": 7200})
            api.post(f"/v1/jobs/run-{i}/events", json={"kind": "started"})
        api.post("/v1/jobs/run-0/events", json={"kind": "finished"})
        api.post("/v1/jobs", json={"job_id": "wait", "num_gpus": 32, "team": "nlp", "tier": "production"})
        policy = api.get("/v1/policy").json()["policy"]
        api.put("/v1/policy", json={"policy": {**policy, "name": "tuned"}})
        before = _state(api)
        with connect(base.replace("http", "ws", 1) + "/v1/stream?since=0", additional_headers=auth("admin")) as ws:
            hello = json.loads(ws.recv(timeout=10))
            history = [json.loads(ws.recv(timeout=10)) for _ in range(hello["last_seq"])]
    assert before["reservations"] and before["policy"]["policy"]["name"] == "tuned"

    with live_server(env, tmp_path / "second.log") as base, httpx.Client(
            base_url=base, headers=auth("admin"), timeout=30) as api:
        after = _state(api)
        elapsed_h = 0.1  # generous bound on the time between the two reads
        with connect(base.replace("http", "ws", 1) + "/v1/stream?since=0", additional_headers=auth("admin")) as ws:
            hello_after = json.loads(ws.recv(timeout=10))
            replay = [json.loads(ws.recv(timeout=10)) for _ in range(hello_after["last_seq"])]
    usage_before, usage_after = before.pop("teams"), after.pop("teams")
    assert after == before
    for (team, u0), (team1, u1) in zip(usage_before, usage_after, strict=True):
        assert team == team1 and u0 <= u1 <= u0 + 48 * elapsed_h  # running jobs keep using GPUs meanwhile
    assert hello_after["last_seq"] == hello["last_seq"] and replay == history


def _dropped(api: httpx.Client) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("predictor_stream_dropped_clients_total "):
            return float(line.split()[1])
    return 0.0


def test_a_slow_client_is_dropped_and_resumes_with_since(tmp_path: Path) -> None:
    """A client that stops reading fills the socket buffers, then its bounded queue on the server; it is
    closed (4429) while the server and a fast client carry on, and resumes with ``since`` losing nothing.

    The server listens on a Unix socket here: its kernel buffers are small and fixed, so a few hundred
    kilobytes of events fill them (on TCP loopback the kernel first absorbs about 4 MB per client, and
    permessage-deflate shrinks these near-identical events to ~100 bytes each).
    """
    from websockets.sync.client import unix_connect

    uds = tmp_path / "api.sock"
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_STREAM_BUFFER="16")
    with live_server(env, tmp_path / "uvicorn.log", uds=uds) as base, httpx.Client(
            base_url=base, headers=auth("scheduler"), timeout=30,
            transport=httpx.HTTPTransport(uds=str(uds))) as api:
        ws_url = "ws://localhost/v1/stream"
        # the slow client reads one frame and stops; without compression each event is its full size
        with unix_connect(str(uds), ws_url, additional_headers=auth("admin"), max_queue=1,
                          ping_interval=None, compression=None) as slow, \
                unix_connect(str(uds), ws_url, additional_headers=auth("admin")) as fast:
            assert json.loads(slow.recv(timeout=10))["kind"] == "stream.hello"
            fast.recv(timeout=10)
            api.post("/v1/jobs", json={"job_id": "j", "num_gpus": 1, "team": "nlp", "job_name": "x" * 1024})
            latencies, fast_seqs, changes = [], [], 0
            while _dropped(api) == 0 and changes < 1000:
                for _ in range(50):  # each change streams the job's document (~3.7 KB)
                    t = time.perf_counter()
                    r = api.patch("/v1/jobs/j", json={"time_limit_s": 3600 + changes % 2})
                    latencies.append(time.perf_counter() - t)
                    assert r.status_code == 200
                    changes += 1
                while True:
                    try:
                        fast_seqs.append(json.loads(fast.recv(timeout=0))["seq"])
                    except TimeoutError:
                        break
            assert _dropped(api) == 1, f"slow client not dropped after {changes} changes"
            last = api.get("/readyz").json()["stream_last_seq"]
            while fast_seqs[-1:] != [last]:
                fast_seqs.append(json.loads(fast.recv(timeout=10))["seq"])
            assert fast_seqs == list(range(1, last + 1))  # the fast client got everything, in order
            assert sorted(latencies)[int(0.99 * len(latencies))] < 0.5  # the server kept answering

            received: list[int] = []  # read what the slow client was sent before it was dropped
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    received.append(json.loads(slow.recv(timeout=10))["seq"])
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429
        assert closed.value.rcvd.reason.startswith("too slow; resume with since=")
        assert received == list(range(1, len(received) + 1)) and len(received) < last
        with unix_connect(str(uds), f"{ws_url}?since={received[-1]}", additional_headers=auth("admin")) as again:
            assert json.loads(again.recv(timeout=10))["since"] == received[-1]
            rest = [json.loads(again.recv(timeout=10))["seq"] for _ in range(last - received[-1])]
        assert rest == list(range(received[-1] + 1, last + 1))  # resumed: nothing missed
