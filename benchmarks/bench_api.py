"""Scoring API throughput and latency, against a real uvicorn on loopback; prints JSON.

1. Trains a model on a synthetic job history (``features.synth``), registers it in a temporary
   MLflow store and makes it ``champion`` (``--model fallback`` skips this: the analytic fallback).
2. Starts ``uvicorn --factory serving.app:create_app`` (``--workers N``) on a free loopback port with
   a temporary SQLite store, and fills the tracked queue (``--tracked`` jobs, two thirds running), so
   every decision is made against a busy cluster.
3. Single jobs: ``POST /v1/score`` at a fixed offered rate (``--rate``, open loop: requests leave on
   schedule whether or not earlier ones returned; latency is measured from the scheduled time, so a
   stalled server cannot hide its queueing), for ``--duration`` seconds after a warm-up, over
   ``--connections`` keep-alive connections used in turn (more are opened when all are busy).
4. Batches: ``--concurrency`` clients each sending batches of ``--batch-size`` jobs back to back for
   ``--batch-duration`` seconds; jobs/s = jobs scored / elapsed. The clients connect 50 ms apart
   (see ``closed_loop``), so their keep-alive connections spread over the workers.

The load generator is a small asyncio HTTP/1.1 client on uvloop with keep-alive connections (one per
request in flight) and bodies encoded before the clock starts, so its own cost per request stays far
below the server's. It shares the machine's cores with the server: the figures are for both on the
same host. Each phase reports the CPU seconds the server processes (uvicorn and its workers, from
``/proc``) and the client used, per request, how busy each server process was (cores), and the load
average: on a shared host, the server's
CPU per request is the figure that does not depend on what else runs.

5. Overload: single jobs at ``--overload`` times ``--rate`` (default 2x): the service sheds what it cannot
   serve with 503 + Retry-After (``serving.load_shedding``) instead of queueing; accepted requests'
   latency and shed requests' latency are reported apart.

CPU per request comes from the server's own counters (``predictor_worker_cpu_seconds{pid}`` in
``/metrics``, scraped until every worker answered: ``server_counters_ms_per_request``, and per job in
batches) and, as a cross-check, from ``/proc`` for the whole uvicorn process tree.

Targets (issues 6 and 17, on 2 cores): single-job p99 < 20 ms at 200 requests/s; at 400 requests/s
offered, accepted p99 < 50 ms and the rest shed; >= 20,000 jobs/s in batches; server CPU <= 2.5 ms per
single-job request and <= 0.1 ms per job in batches.

Run: ``.venv/bin/python benchmarks/bench_api.py [--workers 2] [--model trained|fallback]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

try:  # uvicorn[standard] brings uvloop: a cheaper client loop leaves more of the cores to the server
    import uvloop
except ImportError:  # pragma: no cover - plain asyncio works the same, a little more slowly
    uvloop = None

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789abcdef"
JOB_FIELDS = ("user", "team", "queue", "tier", "time_limit_s", "job_name", "model_params", "precision", "optimizer",
              "finetune_method", "batch_size", "seq_len")
console = Console(stderr=True)


# ---------------------------------------------------------------------------------------------- jobs
def synthetic_jobs(n: int, seed: int):  # noqa: ANN201 - a DataFrame
    from features.synth.pipeline import generate

    return generate(n, seed=seed)


def job_specs(jobs, n: int) -> list[dict]:  # noqa: ANN001
    """API job documents from synthetic records (fields the API takes, valid values only)."""
    specs = []
    for i, row in enumerate(jobs.head(n).to_dict("records")):
        spec: dict = {"job_id": f"bench-{i}", "num_gpus": int(min(max(row.get("num_gpus") or 1, 1), 64))}
        for key in JOB_FIELDS:
            value = row.get(key)
            if value is None or value != value:
                continue
            spec[key] = value.item() if hasattr(value, "item") else value
        if isinstance(spec.get("time_limit_s"), float) and spec["time_limit_s"] <= 0:
            spec.pop("time_limit_s")
        specs.append(spec)
    return specs


def trained_bundle(jobs, path: Path | None = None):  # noqa: ANN001, ANN201 - a JobPredictorBundle
    """A bundle fitted on ``jobs`` with the settings ``predictor train`` uses (``models.fit``'s
    ``DEFAULT_DURATION_PARAMS``: the model a user serves, and the one ``bench_predict.py`` measures);
    with ``path``, read from that pickle when it exists (written there after fitting otherwise), so
    that repeated runs and ``bench_serve_cpu.py`` measure the same model without fitting it again."""
    if path is not None and path.exists():
        with path.open("rb") as f:
            return pickle.load(f)
    from models.fit import fit_bundle

    bundle = fit_bundle(jobs)
    if path is not None:
        with path.open("wb") as f:
            pickle.dump(bundle, f)
    return bundle


def register_model(jobs, workdir: Path, tracking: str, bundle_path: Path | None = None) -> str:  # noqa: ANN001
    """Fit a bundle (``trained_bundle``) and make it ``champion``; returns its version."""
    import mlflow
    from mlflow import MlflowClient

    from models.registry import ensure_experiment, log_bundle, register_version

    bundle = trained_bundle(jobs, bundle_path)
    os.chdir(workdir)
    mlflow.set_tracking_uri(tracking)
    mlflow.set_experiment(experiment_id=ensure_experiment("bench-api"))
    with mlflow.start_run():
        info = log_bundle(bundle, jobs.iloc[:3])
    version = register_version(info.model_uri, {"purpose": "bench_api"})
    MlflowClient(tracking_uri=tracking).set_registered_model_alias("job-predictor", "champion", version)
    return f"job-predictor/{version}"


# ---------------------------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path, tracking: str, workers: int, port: int,
                 settings: dict[str, str] | None = None) -> subprocess.Popen:
    """uvicorn with the service on ``port``; ``settings``: more ``PREDICTOR_*`` variables (the caller's
    own environment's are not passed on, so that the service runs on its defaults unless told)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREDICTOR_")}
    env.update(settings or {})
    env.update({
        "PREDICTOR_DATABASE_URL": f"sqlite:///{workdir / 'state.db'}", "MLFLOW_TRACKING_URI": tracking,
        "PREDICTOR_TOKENS": json.dumps([{"name": "bench", "role": "admin", "token": TOKEN}]),
        "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
    })
    log = open(workdir / "uvicorn.log", "wb")  # noqa: SIM115 - lives as long as the server
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "serving.app:create_app", "--host", "127.0.0.1",
           "--port", str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    return subprocess.Popen(cmd, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(base: str, proc: subprocess.Popen, want_model: str | None, timeout_s: float = 900,
               workers: int = 1) -> dict:
    """Wait until the service answers with ``want_model`` and its boosters are compiled: the version
    answers with LightGBM at once and compiles them after (``compiling`` in ``/readyz``); the phases
    measure the compiled model. Each worker compiles (or loads from the cache) on its own, so the
    answer must hold on ``2 * workers + 4`` fresh connections in a row (they land on the workers at
    random)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    in_a_row, ready = 0, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"uvicorn exited with {proc.returncode}")
        try:
            ready = httpx.get(f"{base}/readyz", timeout=5).json()
            ok = ready["status"] in ("ready", "degraded") and (want_model is None or ready["model"]["version"] == want_model)
            in_a_row = in_a_row + 1 if ok and not ready["model"].get("compiling") else 0
            if in_a_row >= 2 * workers + 4:
                return ready
        except (httpx.HTTPError, ValueError, KeyError):
            in_a_row = 0
        time.sleep(0.3 if in_a_row == 0 else 0.02)
    raise SystemExit(f"server not ready with its boosters compiled in {timeout_s:.0f}s (last /readyz: {ready})")


def fill_queue(base: str, specs: list[dict], tracked: int) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as api:
        for i, spec in enumerate(specs[:tracked]):
            api.post("/v1/jobs", json={**spec, "job_id": f"tracked-{i}"}).raise_for_status()
            if i < 2 * tracked // 3:
                api.post(f"/v1/jobs/tracked-{i}/events", json={"kind": "started"}).raise_for_status()
        counts = {"pending": 0, "running": 0}
        for job in api.get("/v1/queue").json()["jobs"]:
            counts[job["status"]] += 1
    return counts


# ---------------------------------------------------------------------------------------------- cpu
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) used so far by ``pid`` and each of its live descendants, by process
    (Linux ``/proc``; empty elsewhere)."""
    stats = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            out[p] = stats[p][1]
        todo.extend(child for child, (parent, _) in stats.items() if parent == p)
    return out


def worker_cpu_s(base: str, workers: int, tries: int = 60) -> dict[str, float]:
    """CPU seconds of each worker from its own counter (``predictor_worker_cpu_seconds{pid}`` in
    ``/metrics``): a scrape reaches one worker, so scrape on fresh connections until every worker
    answered (or ``tries`` is spent: then the workers seen)."""
    import httpx

    seen: dict[str, float] = {}
    for _ in range(tries):
        with httpx.Client(base_url=base, timeout=10) as c:  # a new connection each time
            for line in c.get("/metrics").text.splitlines():
                if line.startswith("predictor_worker_cpu_seconds{"):
                    pid = line.split('pid="', 1)[1].split('"', 1)[0]
                    seen[pid] = float(line.rsplit(" ", 1)[1])
        if len(seen) >= workers:
            break
    return seen


def run_phase(server_pid: int, requests_of: str, coro, base: str = "", workers: int = 0) -> dict:  # noqa: ANN001
    """Run a load phase; add the CPU the server and this client used (per request) and the load."""
    load = os.getloadavg()
    counters0 = worker_cpu_s(base, workers) if base else {}
    server0, client0, t0 = tree_cpu_s(server_pid), time.process_time(), time.perf_counter()
    result = uvloop.run(coro) if uvloop is not None else asyncio.run(coro)
    server1, client_s, wall = tree_cpu_s(server_pid), time.process_time() - client0, time.perf_counter() - t0
    counters1 = worker_cpu_s(base, workers) if base else {}
    by_process = {p: server1[p] - server0.get(p, 0.0) for p in server1}
    n = max(result[requests_of] + result.pop("warmup_requests"), 1)
    own = [counters1[p] - counters0[p] for p in counters1 if p in counters0]
    jobs = n * result.get("batch_size", 1)
    accepted = result.pop("answered_200_with_warmup", None)
    result["cpu"] = {"server_counters_ms_per_request": round(1000 * sum(own) / n, 3) if own else None,
                     "server_counters_ms_per_accepted": (round(1000 * sum(own) / accepted, 3)
                                                         if own and accepted else None),
                     "server_counters_ms_per_job": round(1000 * sum(own) / jobs, 4) if own else None,
                     "server_counters_workers_seen": len(own),
                     "server_ms_per_request": round(1000 * sum(by_process.values()) / n, 2),
                     "client_ms_per_request": round(1000 * client_s / n, 2),
                     "server_cores_busy_by_process": sorted((round(v / wall, 2) for v in by_process.values()),
                                                            reverse=True),
                     "load_avg_1m": [round(load[0], 2), round(os.getloadavg()[0], 2)]}
    return result


# ---------------------------------------------------------------------------------------------- load
class Connection:
    """One keep-alive HTTP/1.1 connection."""

    #: uvicorn closes keep-alive connections idle for 5 s; never reuse one idle for this long
    MAX_IDLE_S = 4.0

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.last_used = time.perf_counter()
        self.closed = False  # the server said Connection: close (it recycles keep-alive connections)

    def stale(self) -> bool:
        return self.closed or time.perf_counter() - self.last_used > self.MAX_IDLE_S

    def close(self) -> None:
        self.writer.close()

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def post(self, request: bytes) -> int:
        """Send one request, read its response; ``closed`` is set when the server asked to reconnect."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            name = line[:15].lower()
            if name == b"content-length:":
                length = int(line[15:])
            elif name[:11] == b"connection:" and b"close" in line[11:].lower():
                self.closed = True
        await self.reader.readexactly(length)
        self.last_used = time.perf_counter()
        return status


def request_bytes(body: dict, port: int, path: str = "/v1/score") -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


async def open_loop(port: int, requests: list[bytes], rate: float, duration_s: float, warmup_s: float,
                    pool: int = 8) -> dict:
    """Send ``rate`` requests/s on schedule; latency from each request's scheduled time to its answer.

    ``pool`` keep-alive connections are opened first and requests take the one idle longest (FIFO),
    as requests from that many independent clients would; a new connection is opened only when none is
    idle. (Taking the most recently used one instead funnels nearly every request into one connection,
    hence one uvicorn worker, since workers balance connections, not requests.)
    """
    idle: collections.deque[Connection] = collections.deque(
        [await Connection.open(port) for _ in range(pool)])
    latencies: list[float] = []
    statuses: list[int] = []
    total = int((warmup_s + duration_s) * rate)
    warm = warm_ok = 0
    start = time.perf_counter() + 0.2

    async def one(i: int, due: float) -> None:
        while idle and idle[0].stale():
            idle.popleft().close()
        conn = idle.popleft() if idle else await Connection.open(port)
        try:
            status = await conn.post(requests[i % len(requests)])
        except (OSError, asyncio.IncompleteReadError):
            status = 599
            conn = None
        nonlocal warm, warm_ok
        done = time.perf_counter()
        if due - start >= warmup_s:
            latencies.append(done - due)
            statuses.append(status)
        else:
            warm += 1
            warm_ok += status == 200
        if conn is not None and conn.closed:
            conn.close()
        elif conn is not None:
            idle.append(conn)

    tasks = []
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - (start + warmup_s)
    lat = np.array(latencies) * 1000
    status = np.array(statuses)
    ok, shed = lat[status == 200], lat[(status == 503) | (status == 429)]

    def pct(values: np.ndarray, q: float) -> float | None:
        return round(float(np.percentile(values, q)), 2) if len(values) else None

    return {"offered_rps": rate, "duration_s": duration_s, "requests": len(lat),
            "achieved_rps": round(len(lat) / elapsed, 1), "accepted_rps": round(len(ok) / elapsed, 1),
            "shed": int(len(shed)), "errors": int(len(lat) - len(ok) - len(shed)),
            "p50_ms": pct(ok, 50), "p90_ms": pct(ok, 90), "p99_ms": pct(ok, 99),
            "max_ms": round(float(ok.max()), 2) if len(ok) else None,
            "shed_p50_ms": pct(shed, 50), "shed_p99_ms": pct(shed, 99),
            "connections": len(idle), "warmup_requests": warm, "answered_200_with_warmup": int(len(ok) + warm_ok)}


async def closed_loop(port: int, requests: list[bytes], batch_size: int, concurrency: int,
                      duration_s: float, warmup_s: float) -> dict:
    """``concurrency`` clients sending batches back to back; jobs/s over the measured window."""
    latencies: list[float] = []
    errors = shed = 0
    warm = 0
    start = time.perf_counter()
    measure_from, stop_at = start + warmup_s, start + warmup_s + duration_s

    async def client(k: int) -> None:
        nonlocal errors, shed, warm
        # Connect one client after another (50 ms apart, in the warm-up): uvicorn's workers share one
        # listening socket, and connections opened all at once are all accepted by whichever worker
        # wakes first, leaving the other idle; opened while a worker is busy, they reach the idle one.
        await asyncio.sleep(k * 0.05)
        conn = await Connection.open(port)
        i = k
        while time.perf_counter() < stop_at:
            t = time.perf_counter()
            status = await conn.post(requests[i % len(requests)])
            if conn.closed:  # the server recycles keep-alive connections: reconnect, as any client does
                conn.close()
                conn = await Connection.open(port)
            i += concurrency
            if t >= measure_from:
                if status == 200:
                    latencies.append(time.perf_counter() - t)
                elif status in (429, 503):
                    shed += 1
                    await asyncio.sleep(0.01)  # a client backs off a little (Retry-After is for people)
                else:
                    errors += 1
            else:
                warm += 1

    await asyncio.gather(*(client(k) for k in range(concurrency)))
    lat = np.array(latencies) * 1000
    return {"batch_size": batch_size, "concurrency": concurrency, "duration_s": duration_s, "batches": len(lat),
            "jobs_per_s": round(len(lat) * batch_size / duration_s, 1), "errors": int(errors), "shed": int(shed),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "warmup_requests": warm}


# ---------------------------------------------------------------------------------------------- stages
def stage_breakdown(workdir: Path, tracking: str, singles: list[dict], batch_bodies: list[dict],
                    repeats: int) -> dict:
    """CPU milliseconds (``time.process_time``) per request in each stage of ``POST /v1/score``, in this
    process, on the server's store (same tracked queue) and registered model; HTTP excluded."""
    from pydantic import TypeAdapter

    from predictor.engine.queue_picture import frame_of
    from serving.convert import batch_response, job_columns
    from serving.schemas.jobs import JobSpec
    from serving.schemas.score import ScoreRequest
    from serving.service import build_service
    from serving.settings import Settings, TokenSpec

    settings = Settings(database_url=f"sqlite:///{workdir / 'state.db'}", mlflow_tracking_uri=tracking,
                        tokens=[TokenSpec(name="bench", role="admin", token=TOKEN)], migrate_on_start=False)
    service = build_service(settings)
    service.engine.model.check_once()  # load the champion now, in this thread (compiled, from the cache)
    engine, parse = service.engine, TypeAdapter(ScoreRequest).validate_json
    out = {"model": engine.model.current.version}
    for name, bodies in (("single", [json.dumps(b).encode() for b in singles]),
                         ("batch", [json.dumps(b).encode() for b in batch_bodies])):
        spent = dict.fromkeys(("validate", "columns", "predict", "decide", "response"), 0.0)
        n = 0
        for rep in range(repeats + 1):
            for body in bodies:
                t0 = time.process_time()
                req = parse(body)
                specs = [req] if isinstance(req, JobSpec) else req.jobs
                t1 = time.process_time()
                now = time.time()
                columns = job_columns(specs, now)
                frame = frame_of(columns)
                t2 = time.process_time()
                engine.predict_columns(frame, now, columns=columns)
                t3 = time.process_time()
                batch = engine.score_batch(frame, now, columns=columns)  # predicts again
                t4 = time.process_time()
                batch_response(batch, now)
                t5 = time.process_time()
                if rep == 0:
                    continue  # warm-up
                n += 1
                for key, value in (("validate", t1 - t0), ("columns", t2 - t1), ("predict", t3 - t2),
                                   ("decide", (t4 - t3) - (t3 - t2)), ("response", t5 - t4)):
                    spent[key] += value
        out[name] = {k: round(1000 * v / n, 3) for k, v in spent.items()}
        out[name]["total"] = round(sum(out[name].values()), 3)
    service.db.dispose()
    return out


# ---------------------------------------------------------------------------------------------- main
def _at_most(phase: dict, key: str, limit: float) -> bool | None:
    value = phase["cpu"].get(key)
    return None if value is None else value <= limit


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("trained", "fallback"), default="trained")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="offered rate of the single-job phase (the target's)")
    ap.add_argument("--also-rates", default="50", help="comma-separated lower rates also measured (open loop), "
                    "to show what this machine sustains; empty for none")
    ap.add_argument("--overload", type=float, default=2.0,
                    help="also offer this many times --rate (open loop) to show shedding, not collapse (0: skip)")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--connections", type=int, default=8,
                    help="keep-alive connections the single-job phases open first and use in turn")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--batch-duration", type=float, default=15.0)
    ap.add_argument("--terse-batches", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure batches with ?explain=false (no factor details, warnings, reason sentence)")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--queue-wait-ms", type=float, default=None,
                    help="the service's PREDICTOR_QUEUE_WAIT_MS (default: the service's own default)")
    ap.add_argument("--tracked", type=int, default=30, help="jobs in the tracked queue (two thirds running)")
    ap.add_argument("--history-jobs", type=int, default=3000, help="synthetic jobs to train on")
    ap.add_argument("--bundle", type=Path, help="pickle of the trained bundle: read if it exists, else written "
                    "after training (the same file bench_serve_cpu.py --bundle reads and writes)")
    ap.add_argument("--stage-repeats", type=int, default=2,
                    help="passes over 300 single jobs and 10 batches for the in-process stage breakdown (0: skip)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        workdir = Path(tmp)
        tracking = f"sqlite:///{workdir / 'mlflow.db'}"
        with console.status("generating synthetic jobs"):
            jobs = synthetic_jobs(args.history_jobs, seed=7)
            specs = job_specs(synthetic_jobs(2000, seed=8), 2000)
        model = None
        if args.model == "trained":
            with console.status(f"training on {len(jobs)} synthetic jobs and registering"):
                t = time.perf_counter()
                model = register_model(jobs, workdir, tracking, args.bundle)
                console.print(f"registered {model} as champion in {time.perf_counter() - t:.0f} s")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start_server(workdir, tracking, args.workers, port, settings=dict(
            [("PREDICTOR_QUEUE_WAIT_MS", str(args.queue_wait_ms))] if args.queue_wait_ms is not None else []))
        try:
            with console.status("starting uvicorn (and compiling the model's boosters)"):
                ready = wait_ready(base, proc, model, workers=args.workers)
            tracked = fill_queue(base, specs[1000:], args.tracked)
            singles = [request_bytes(s, port) for s in specs[:1000]]
            batch_bodies = [{"jobs": [{**s, "job_id": f"b{k}-{j}"} for j, s in
                                      enumerate(specs[(k * args.batch_size) % 1000:][:args.batch_size])]}
                            for k in range(20)]
            batches = [request_bytes(b, port) for b in batch_bodies]
            with console.status(f"single jobs at {args.rate:.0f} requests/s for {args.duration:.0f} s"):
                single = run_phase(proc.pid, "requests", open_loop(port, singles, args.rate, args.duration, args.warmup,
                                                                          args.connections), base, args.workers)
            lower = []
            for rate in [float(r) for r in args.also_rates.split(",") if r.strip()]:
                with console.status(f"single jobs at {rate:.0f} requests/s for {args.duration:.0f} s"):
                    lower.append(run_phase(proc.pid, "requests",
                                           open_loop(port, singles, rate, args.duration, args.warmup,
                                                     args.connections), base, args.workers))
            overload = None
            if args.overload > 0:
                rate = args.overload * args.rate
                with console.status(f"overload: single jobs at {rate:.0f} requests/s for {args.duration:.0f} s"):
                    overload = run_phase(proc.pid, "requests", open_loop(port, singles, rate, args.duration,
                                                                         args.warmup, args.connections),
                                         base, args.workers)
            with console.status(f"batches of {args.batch_size} for {args.batch_duration:.0f} s"):
                batch = run_phase(proc.pid, "batches", closed_loop(port, batches, args.batch_size, args.concurrency,
                                                                   args.batch_duration, args.warmup),
                                  base, args.workers)
            terse = None
            if args.terse_batches:
                with console.status(f"batches of {args.batch_size}, explain=false, for {args.batch_duration:.0f} s"):
                    terse = run_phase(proc.pid, "batches", closed_loop(
                        port, [request_bytes(b, port, "/v1/score?explain=false") for b in batch_bodies],
                        args.batch_size, args.concurrency, args.batch_duration, args.warmup), base, args.workers)
        finally:
            proc.terminate()
            proc.wait(30)
        stages = None
        if args.stage_repeats > 0:
            with console.status("stage breakdown in this process"):
                stages = stage_breakdown(workdir, tracking, specs[:300], batch_bodies[:10], args.stage_repeats)
    result = {
        "benchmark": "api",
        "command": "benchmarks/bench_api.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "client_loop": "uvloop" if uvloop is not None else "asyncio",
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "server": {"workers": args.workers, "model": ready["model"]["version"], "fallback": ready["model"]["fallback"],
                   "tracked_queue": tracked, "trained_on": f"{len(jobs)} synthetic jobs" if model else None,
                   "queue_wait_ms": args.queue_wait_ms if args.queue_wait_ms is not None else "default"},
        "single": single,
        "single_at_lower_rates": lower,
        "overload": overload,
        "batch": batch,
        "batch_explain_false": terse,
        "stages_cpu_ms_per_request": stages,
        "targets": {"single_p99_ms": 20.0, "batch_jobs_per_s": 20000.0, "overload_accepted_p99_ms": 50.0,
                    "server_cpu_ms_per_single": 2.5, "server_cpu_ms_per_job_in_batches": 0.1},
        "met": {"single_p99": single["p99_ms"] is not None and single["p99_ms"] < 20.0 and single["errors"] == 0,
                "batch_jobs_per_s": batch["jobs_per_s"] >= 20000.0 and batch["errors"] == 0,
                "overload_accepted_p99": None if overload is None else (
                    overload["p99_ms"] is not None and overload["p99_ms"] < 50.0 and overload["errors"] == 0),
                "server_cpu_per_single": _at_most(single, "server_counters_ms_per_accepted", 2.5),
                "server_cpu_per_job_in_batches": _at_most(batch, "server_counters_ms_per_job", 0.1)},
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
