"""Several uvicorn workers on one PostgreSQL database stay consistent (a real ``--workers 2`` server)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from websockets.sync.client import connect

from predictor.store import Database, audit_entries
from predictor.store.tables import JobRow, StreamEventRow
from tests.predictor.store.postgres import reset_postgres
from tests.serving.conftest import auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]
JOB = {"job_id": "same-job", "num_gpus": 8, "team": "nlp", "time_limit_s": 3600}


def _collect(url: str, out: list[dict], ready: threading.Event, stop: threading.Event) -> None:
    with connect(url, additional_headers=auth("admin"), open_timeout=10) as ws:
        out.append(json.loads(ws.recv(timeout=10)))  # hello
        ready.set()
        while not stop.is_set():
            try:
                out.append(json.loads(ws.recv(timeout=0.2)))
            except TimeoutError:
                continue


def test_two_workers_one_job_one_sequence(postgres_url: str, tmp_path: Path) -> None:
    reset_postgres(postgres_url)
    env = server_env(postgres_url, tmp_path)
    with live_server(env, tmp_path / "uvicorn.log", workers=2) as base:
        ws_url = base.replace("http", "ws", 1) + "/v1/stream"
        streams: list[list[dict]] = [[] for _ in range(4)]
        stop = threading.Event()
        readies = [threading.Event() for _ in streams]
        listeners = [threading.Thread(target=_collect, args=(ws_url, s, r, stop), daemon=True)
                     for s, r in zip(streams, readies, strict=True)]
        for t in listeners:
            t.start()
        assert all(r.wait(15) for r in readies)

        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
            with ThreadPoolExecutor(16) as pool:  # the same job, sixteen times at once, to both workers
                codes = sorted(pool.map(lambda _: api.post("/v1/jobs", json=JOB).status_code, range(16)))
            assert codes == [200] * 15 + [201]
            with ThreadPoolExecutor(8) as pool:  # different jobs and their events, interleaved
                list(pool.map(lambda i: _lifecycle(api, f"job-{i}"), range(8)))
            policy = api.get("/v1/policy", headers=auth("admin")).json()["policy"]
            assert api.put("/v1/policy", json={"policy": {**policy, "name": "changed"}}, headers=auth("admin")).status_code == 200
            time.sleep(1.0)  # the other worker follows the event log
            names = {api.get("/v1/policy").json()["policy"]["name"] for _ in range(12)}
            assert names == {"changed"}
        time.sleep(1.5)
        stop.set()
        for t in listeners:
            t.join(10)

    db = Database(postgres_url)
    try:
        with db.session() as s:
            assert len(s.scalars(select(JobRow).where(JobRow.job_id == "same-job")).all()) == 1
            seqs = list(s.scalars(select(StreamEventRow.seq).order_by(StreamEventRow.seq)))
            created = s.scalars(select(StreamEventRow).where(StreamEventRow.kind == "job.created",
                                                             StreamEventRow.job_id == "same-job")).all()
            audited = [e.action for e in audit_entries(s, target="same-job")]
    finally:
        db.dispose()
    assert len(created) == 1
    assert audited == ["job.create"]  # the fifteen replays changed nothing and are not audited
    assert seqs == list(range(1, len(seqs) + 1))  # unique and gap-free across both workers
    for events in streams:  # every client, whichever worker it landed on, saw every event in order
        assert [e["seq"] for e in events[1:]] == seqs


def _lifecycle(api: httpx.Client, job_id: str) -> None:
    assert api.post("/v1/jobs", json={**JOB, "job_id": job_id, "num_gpus": 1}).status_code == 201
    assert api.post(f"/v1/jobs/{job_id}/events", json={"kind": "started"}).status_code == 200
    assert api.post(f"/v1/jobs/{job_id}/events", json={"kind": "finished"}).status_code == 200

