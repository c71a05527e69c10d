"""CPU an idle service costs, per worker and second, from the workers' own counters; prints JSON.

Starts ``uvicorn --factory serving.app:create_app`` as ``bench_api.py`` does (a temporary SQLite
store, no registered model: the fallback answers, which changes nothing here since no request is
scored), waits until it is ready, lets it settle, then reads each worker's
``predictor_worker_cpu_seconds`` twice, ``--seconds`` apart, with no request in between but the
scrapes themselves. At a given request rate the idle cost adds ``idle_ms_per_s / rate per worker``
to every request's server CPU, which is why it matters for issue 17's 2.5 ms per single job.

``--set NAME=VALUE`` passes service settings (``PREDICTOR_STREAM_POLL_S=3600`` turns the stream
follower's timed reads off, ``PREDICTOR_MODEL_POLL_S=3600`` the registry checks), to see what each
costs.

Run: ``.venv/bin/python benchmarks/bench_idle.py [--workers 2] [--seconds 30] [--set NAME=VALUE ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project root

from benchmarks.bench_api import free_port, start_server, wait_ready, worker_cpu_s


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0, help="idle window between the two readings")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait after ready before the first reading")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a PREDICTOR_* setting for the service (repeat)")
    args = ap.parse_args(argv)
    settings = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("PREDICTOR_"):
            ap.error(f"--set expects PREDICTOR_NAME=VALUE, got {item!r}")
        settings[name] = value
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start_server(workdir, f"sqlite:///{workdir / 'mlflow.db'}", args.workers, port, settings=settings)
        try:
            wait_ready(base, proc, None, workers=args.workers)
            time.sleep(args.settle)
            first, t0 = worker_cpu_s(base, args.workers), time.monotonic()
            time.sleep(args.seconds)
            second, elapsed = worker_cpu_s(base, args.workers), time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait(30)
    per_worker = {pid: round(1000.0 * (second[pid] - first[pid]) / elapsed, 2) for pid in first if pid in second}
    result = {
        "benchmark": "idle",
        "command": "benchmarks/bench_idle.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "workers": args.workers, "settings": settings, "idle_seconds": round(elapsed, 1),
        "idle_ms_cpu_per_s_by_worker": per_worker,
        "idle_ms_cpu_per_s_median": statistics.median(per_worker.values()) if per_worker else None,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
