"""A score request alone in its worker is scored on the event loop (no thread hand-off); once others
are there, in a worker thread, so the loop keeps reading and shedding them."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from serving.app import create_app
from serving.load_shedding import LoadSheddingMiddleware, alone
from serving.service import build_service
from tests.serving.conftest import TestClient, auth
from tests.serving.doubles import no_model_slot
from tests.serving.live import live_server, server_env
from tests.serving.test_load_shedding import JOB, _metric


def _recording_app(seen: list[bool], gate: asyncio.Event | None = None):  # noqa: ANN202
    async def app(scope, receive, send) -> None:  # noqa: ANN001
        await asyncio.sleep(0)  # what FastAPI does before the endpoint runs: the body is read
        seen.append(alone(scope))
        if gate is not None:
            await gate.wait()  # hold the slot until the test lets go
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


async def _call(mw: LoadSheddingMiddleware, path: str = "/v1/score") -> None:
    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    await mw({"type": "http", "path": path, "headers": []}, receive, send)


def test_alone_counts_every_request_the_worker_holds() -> None:
    seen: list[bool] = []

    async def run() -> None:
        mw = LoadSheddingMiddleware(_recording_app(seen), max_concurrency=2, max_queue=10)
        await _call(mw)  # one after another: each is alone
        await _call(mw)
        assert seen == [True, True]
        gate = asyncio.Event()
        held = LoadSheddingMiddleware(_recording_app(seen, gate), max_concurrency=2, max_queue=10)
        burst = asyncio.gather(*(_call(held) for _ in range(3)))  # read in one pass
        for _ in range(5):
            await asyncio.sleep(0)
        assert held.present == 3 and seen[2:] == [False, False]  # two in progress, one waiting: none alone
        gate.set()
        await burst
        assert held.present == 0 and len(seen) == 5
        # the one that waited ran after the others were done: alone by then
        assert seen[4] is True

    asyncio.run(run())


def test_a_request_no_middleware_counted_is_never_alone() -> None:
    assert alone({"type": "http", "path": "/v1/score", "state": {}}) is False
    assert alone({"type": "http", "path": "/v1/score"}) is False


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_worker_scores_alone_requests_inline_and_a_burst_in_threads(tmp_path) -> None:  # noqa: ANN001
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_MAX_CONCURRENCY="1",
                     PREDICTOR_MAX_QUEUE="2", PREDICTOR_QUEUE_WAIT_MS="60000")
    with live_server(env, tmp_path / "uvicorn.log") as base:
        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
            for i in range(5):
                assert api.post("/v1/score", json={**JOB, "job_id": f"s-{i}"}).status_code == 200
            inline = _metric(api.get("/metrics").text, "predictor_inline_scores_total")
        assert inline == 5  # one at a time: every one on the event loop

        async def burst(n: int) -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            async with httpx.AsyncClient(base_url=base, headers=auth("scheduler"), timeout=60, limits=limits) as c:
                return await asyncio.gather(*(c.post("/v1/score", json={**JOB, "job_id": f"b-{k}"})
                                              for k in range(n)))

        answers = asyncio.run(burst(40))
        statuses = [r.status_code for r in answers]
        assert set(statuses) <= {200, 503} and statuses.count(503) >= 10  # still shed at once
        with httpx.Client(base_url=base, headers=auth("scheduler"), timeout=30) as api:
            after = _metric(api.get("/metrics").text, "predictor_inline_scores_total")
        # requests read together are not alone: at most the stragglers of the burst went inline
        assert after - inline < statuses.count(200), (after, inline, statuses.count(200))


@pytest.mark.parametrize(("inline_ms", "on_loop"), [(10.0, True), (0.0, False)])
def test_inline_score_ms_says_where_a_lone_request_is_scored(settings, monkeypatch, inline_ms, on_loop) -> None:  # noqa: ANN001
    from serving.routers import score as score_router

    where: list[bool] = []
    real = score_router._score

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        try:
            asyncio.get_running_loop()
            where.append(True)  # on the event loop's thread
        except RuntimeError:
            where.append(False)  # in a worker thread (no loop runs there)
        return real(*args, **kwargs)

    monkeypatch.setattr(score_router, "_score", spy)
    settings = settings.model_copy(update={"inline_score_ms": inline_ms})
    service = build_service(settings, model=no_model_slot())
    with TestClient(create_app(service=service)) as c:
        for i in range(3):
            r = c.post("/v1/score", json={**JOB, "job_id": f"t-{i}"}, headers=auth("scheduler"))
            assert r.status_code == 200, r.text
        inline = _metric(c.get("/metrics").text, "predictor_inline_scores_total")
    assert where == [on_loop] * 3
    assert inline == (3 if on_loop else 0)
