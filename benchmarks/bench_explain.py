"""Benchmark of ``explain`` (issue 16: under 50 ms for a job in a 10,000-job queue).

The queue is bench_policy.py's large scenario: 10,000 pending jobs (tiers, teams, deadlines,
predictions) on 1,000 8-GPU nodes with ~1,800 running jobs holding 80 % of the GPUs, default policy.
Measured, CPU seconds (``time.process_time``, the steadier figure on a shared machine) and wall:

- ``plan_and_estimate``: what a refresh of the kept plan costs (``decide`` on the queue, then the
  start estimates of every pending job with what-if checkpoints); the service pays it once per queue
  change or every ``max_age_s`` (30 s), not per request;
- ``explain``: one ``explain_job`` on the kept plan (the per-request cost), for jobs at ranks 1, 100,
  1,000, 5,000 and 10,000 and a random sample; median and max;
- ``candidate``: the start estimate of a job scored now (``/v1/score?start_estimate=true``);
- ``changed_queue``: the realistic case, the queue changed since the kept plan (rule *latest plan*,
  ``QueueEstimates.explain``): the request answers from the kept plan after checking the job is still
  pending in the new picture, while the refresh of the new queue (another 10,000-job queue: ``decide``
  and estimates) runs in a background thread of the same process. Per request: the request thread's
  CPU (``time.thread_time``) and wall, which include waiting for the GIL the refresh holds; and the
  cost of the one case that waits, a job submitted since the kept plan (= a refresh).

Prints one JSON document. Run: ``.venv/bin/python benchmarks/bench_explain.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_policy import build_snapshot  # noqa: E402

from predictor.policy.presets import load_policy  # noqa: E402
from predictor.policy.scheduler import decide  # noqa: E402
from predictor.queue.explain import explain_job  # noqa: E402
from predictor.queue.start_estimate import estimate_starts  # noqa: E402


def timed(fn):  # noqa: ANN001, ANN201
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="2,000 pending jobs on 200 nodes")
    args = ap.parse_args(argv)
    nodes, running, pending = (200, 400, 2000) if args.quick else (1000, 2000, args.pending)
    rng = np.random.default_rng(0)
    snap = build_snapshot(rng, nodes, running, pending)
    policy = load_policy(None)
    load0 = os.getloadavg()[0]
    cpu_plan, wall_plan, plan = timed(lambda: decide(snap, policy))
    rd = snap.running
    d90 = rd.predicted_end_ts - rd.start_ts
    durations = [d90 * 0.5, d90 * 0.8, d90]  # the builder's running jobs know only a p90 end
    cpu_est, wall_est, est = timed(lambda: estimate_starts(plan, durations, what_if=True))
    rank = np.empty(len(plan.order), dtype=np.int64)
    rank[plan.order] = np.arange(len(plan.order))
    order = plan.order
    picks = {f"rank_{r}": str(snap.pending.job_id[order[min(r, len(order)) - 1]]) for r in (1, 100, 1000, 5000, 10_000)
             if r <= len(order)}
    for k, j in enumerate(rng.choice(len(order), 20, replace=False)):
        picks[f"random_{k}"] = str(snap.pending.job_id[j])
    cpu, wall = {}, {}
    for label, job_id in picks.items():
        c, w, doc = timed(lambda job_id=job_id: explain_job(plan, est, job_id, rank))
        cpu[label], wall[label] = c, w
    assert doc["chain"]["start_estimate"]["rule"]
    # the queue changed since the kept plan: answer from it while the new one is made in the background
    snap2 = build_snapshot(np.random.default_rng(1), nodes, running, pending)
    refresh: dict = {}

    def refresh_new_queue() -> None:
        c0, t0 = time.thread_time(), time.perf_counter()
        plan2 = decide(snap2, policy)
        r2 = snap2.running
        d2 = r2.predicted_end_ts - r2.start_ts
        estimate_starts(plan2, [d2 * 0.5, d2 * 0.8, d2], what_if=True)
        refresh.update(cpu_s=time.thread_time() - c0, wall_s=time.perf_counter() - t0)

    still_pending = snap2.pending.job_id
    bg = threading.Thread(target=refresh_new_queue)
    changed_cpu, changed_wall, during = {}, {}, 0
    bg.start()
    for label, job_id in picks.items():
        c0, t0 = time.thread_time(), time.perf_counter()
        bool(np.any(still_pending == job_id))  # QueueEstimates.explain's "still pending?" check
        explain_job(plan, est, job_id, rank)
        changed_cpu[label], changed_wall[label] = time.thread_time() - c0, time.perf_counter() - t0
        during += bg.is_alive()
    bg.join()
    cand = []
    for _ in range(20):
        c, _, _ = timed(lambda: est.start_with(-1, allowed=np.ones(snap.layout.n_types, bool),
                                               position=int(rng.integers(0, len(order))), num_gpus=8, duration=3600.0))
        cand.append(c)
    out = {
        "scenario": {"pending": len(snap.pending), "running": len(snap.running), "gpus": snap.layout.n_gpus,
                     "policy": policy.name},
        "plan_and_estimate": {"decide_cpu_s": cpu_plan, "decide_wall_s": wall_plan,
                              "estimate_cpu_s": cpu_est, "estimate_wall_s": wall_est},
        "explain": {"per_job_cpu_s": cpu, "median_cpu_s": statistics.median(cpu.values()),
                    "max_cpu_s": max(cpu.values()), "median_wall_s": statistics.median(wall.values()),
                    "max_wall_s": max(wall.values()), "target_s": 0.05,
                    "met_on_the_kept_plan": max(cpu.values()) < 0.05},
        "changed_queue": {"rule": "latest plan", "per_job_cpu_s": changed_cpu,
                          "median_cpu_s": statistics.median(changed_cpu.values()),
                          "max_cpu_s": max(changed_cpu.values()),
                          "median_wall_s": statistics.median(changed_wall.values()),
                          "max_wall_s": max(changed_wall.values()),
                          "requests_while_refreshing": during, "requests": len(changed_cpu),
                          "background_refresh": refresh, "target_s": 0.05,
                          "met_in_cpu": max(changed_cpu.values()) < 0.05,
                          "wall_under_target": max(changed_wall.values()) < 0.05,  # GIL shared, machine load
                          "job_submitted_since_plan_waits_s": refresh.get("wall_s")},
        "candidate_estimate": {"median_cpu_s": statistics.median(cand), "max_cpu_s": max(cand)},
        "load_average_1min": [round(load0, 2), round(os.getloadavg()[0], 2)], "cpus": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
