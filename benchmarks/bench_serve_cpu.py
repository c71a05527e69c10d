"""Server CPU per ``POST /v1/score`` request, in this process, through the whole ASGI app; prints JSON.

The figure issue 17 asks to move (server CPU per single-job request, per job in batches) measured
without HTTP sockets or a load generator sharing the cores: each request is one call of the app
(middleware, auth, validation, scoring, the response body) driven by a minimal ASGI caller on one
event loop, timed with ``time.process_time`` (CPU of this process: the scoring thread included).
On a shared host, run two trees back to back (``--repeat``) and compare the ratio, not the figures.

1. Trains a model bundle on a synthetic history (``features.synth``, ``--history-jobs``, seed 7 as
   ``bench_api.py``), or loads one pickled by an earlier run (``--bundle``), and compiles its boosters
   (``models.compiled``, cached on disk as in serving).
2. Builds the service on a temporary SQLite store with that model and fills the tracked queue
   (``--tracked`` jobs, two thirds running) through the API, as ``bench_api.py`` does.
3. Times ``--singles`` single-job requests and ``--batches`` batches of ``--batch-size`` (after one
   warm-up pass each), ``--repeat`` times; reports the median pass and the least (``*_min``: the
   figure other work on a shared host inflates least, as ``timeit`` takes the minimum). ``--profile FILE`` writes a
   cProfile of one more pass of each kind (``FILE.single``, ``FILE.batch``).

Targets (issue 17): <= 2.5 ms per single-job request, <= 0.1 ms per job in batches of 100.

Run: ``.venv/bin/python benchmarks/bench_serve_cpu.py [--bundle /tmp/bundle.pkl] [--profile /tmp/prof]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project root

from benchmarks.bench_api import job_specs, synthetic_jobs
from benchmarks.bench_api import trained_bundle as api_bundle

TOKEN = "bench-token-0123456789abcdef"


def trained_bundle(path: Path | None, history_jobs: int):  # noqa: ANN201 - a JobPredictorBundle
    """The bundle ``bench_api.py`` trains (pickled to ``path`` the first time, read from it after)."""
    return api_bundle(synthetic_jobs(history_jobs, seed=7), path)


class ASGICaller:
    """Calls an ASGI app with one HTTP request at a time and returns (status, headers, body)."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app = app

    async def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                      ) -> tuple[int, dict[str, str], bytes]:
        raw_path, _, query = path.partition("?")
        hdrs = [(b"host", b"bench"), (b"authorization", f"Bearer {TOKEN}".encode()),
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        hdrs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(),
                 "root_path": "", "headers": hdrs, "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
                 "state": {}}
        sent = False
        out: dict = {"status": 0, "headers": {}, "body": []}

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = {k.decode(): v.decode() for k, v in message.get("headers", ())}
            elif message["type"] == "http.response.body":
                out["body"].append(message.get("body", b""))

        await self.app(scope, receive, send)
        return out["status"], out["headers"], b"".join(out["body"])


async def lifespan(app, run):  # noqa: ANN001, ANN201
    """Run ``run()`` inside the app's lifespan (start-up and shut-down as uvicorn does them)."""
    to_app: asyncio.Queue = asyncio.Queue()
    from_app: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                   to_app.get, from_app.put))
    await to_app.put({"type": "lifespan.startup"})
    started = await from_app.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"app start-up failed: {started}")
    try:
        return await run()
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        await from_app.get()
        await task


async def _inline(func, *args, **kwargs):  # noqa: ANN001, ANN202 - run_in_threadpool without the thread
    return func(*args, **kwargs)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, help="pickle of the trained bundle (written if absent)")
    ap.add_argument("--history-jobs", type=int, default=3000)
    ap.add_argument("--tracked", type=int, default=30)
    ap.add_argument("--singles", type=int, default=300)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--explain", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--profile", type=Path, help="write cProfile stats of one more pass to PROFILE.single/.batch")
    args = ap.parse_args(argv)

    from starlette.concurrency import run_in_threadpool

    import serving.routers.score as score_router
    from models.compiled import compile_boosters
    from predictor.engine.model_slot import ModelSlot
    from serving.app import create_app
    from serving.service import build_service
    from serving.settings import Settings, TokenSpec

    t = time.process_time()
    bundle = trained_bundle(args.bundle, args.history_jobs)
    compiled = compile_boosters(bundle)
    prepared_s = time.process_time() - t
    specs = job_specs(synthetic_jobs(2000, seed=8), 2000)
    query = "" if args.explain else "?explain=false"
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'state.db'}",
                            mlflow_tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}",
                            tokens=[TokenSpec(name="bench", role="admin", token=TOKEN)],
                            queue_wait_ms=600_000, max_queue=100_000)
        service = build_service(settings, model=ModelSlot.fixed(bundle, "job-predictor/1"))
        app = create_app(service=service)
        caller = ASGICaller(app)
        singles = [json.dumps(s).encode() for s in specs[:args.singles]]
        batches = [json.dumps({"jobs": [{**s, "job_id": f"b{k}-{j}"} for j, s in
                                        enumerate(specs[(k * args.batch_size) % 1000:][:args.batch_size])]}).encode()
                   for k in range(args.batches)]

        async def run() -> dict:
            for i, spec in enumerate(specs[1000:1000 + args.tracked]):
                status, _, body = await caller.request("POST", "/v1/jobs", json.dumps({**spec, "job_id": f"tracked-{i}"}).encode())
                assert status in (200, 201), body
                if i < 2 * args.tracked // 3:
                    status, _, body = await caller.request("POST", f"/v1/jobs/tracked-{i}/events", b'{"kind": "started"}')
                    assert status == 200, body

            async def one_pass(bodies: list[bytes]) -> float:
                t0 = time.process_time()
                for b in bodies:
                    status, _, out = await caller.request("POST", "/v1/score" + query, b)
                    if status != 200:
                        raise SystemExit(f"POST /v1/score: {status} {out[:300]!r}")
                return time.process_time() - t0

            out: dict = {}
            for name, bodies, jobs in (("single", singles, 1), ("batch", batches, args.batch_size)):
                await one_pass(bodies)  # warm-up
                passes = [await one_pass(bodies) for _ in range(args.repeat)]
                ms = 1000 * statistics.median(passes) / len(bodies)
                least = 1000 * min(passes) / len(bodies)
                out[name] = {"requests": len(bodies), "jobs_per_request": jobs, "passes": args.repeat,
                             "cpu_ms_per_request": round(ms, 3), "cpu_ms_per_job": round(ms / jobs, 4),
                             # the least pass: on a shared host, the estimate least inflated by other work
                             "cpu_ms_per_request_min": round(least, 3), "cpu_ms_per_job_min": round(least / jobs, 4),
                             "cpu_ms_per_request_passes": [round(1000 * p / len(bodies), 3) for p in passes],
                             "jobs_per_cpu_s": round(1000 * jobs / ms, 1)}
                if args.profile is not None:  # scoring inline: cProfile sees only the thread that enables it
                    score_router.run_in_threadpool = _inline
                    prof = cProfile.Profile()
                    prof.enable()
                    await one_pass(bodies)
                    prof.disable()
                    prof.dump_stats(f"{args.profile}.{name}")
                    score_router.run_in_threadpool = run_in_threadpool
            _, _, sample = await caller.request("POST", "/v1/score" + query, singles[0])
            out["sample_single_response_bytes"] = len(sample)
            return out

        measured = asyncio.run(lifespan(app, run))
    result = {"benchmark": "serve_cpu", "command": "benchmarks/bench_serve_cpu.py " + " ".join(argv or sys.argv[1:]),
              "tree": str(Path(__file__).resolve().parents[1]), "load_avg": [round(x, 2) for x in os.getloadavg()],
              "model": {"boosters": compiled, "prepare_cpu_s": round(prepared_s, 1)},
              "tracked_queue": {"pending": args.tracked - 2 * args.tracked // 3, "running": 2 * args.tracked // 3},
              "explain": args.explain, **measured,
              "targets": {"cpu_ms_per_single_request": 2.5, "cpu_ms_per_job_in_batches": 0.1}}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
