"""Benchmark of the rules layer: one ``decide()`` on a large cluster, and many on a replay-sized one.

Scenario "large" (issue #4's target: under 1 s on one core): 10,000 pending jobs against a
1,000-node inventory (8 GPUs per node, NVLink islands, 2 NUMA domains, 16 nodes per rack) with 2,000
running jobs, under the default policy (multifactor priority, sizing, reservations, wait-for-better,
preemption). Reported: building the snapshot from arrays, ``decide()`` itself (median of several
runs), and writing a Decision for every pending job (``plan.queue()``).

Scenario "replay-sized": the per-cycle cost a replay pays, on a 1,000-GPU cluster 97% busy with
200 pending and ~300 running jobs, for each preset, with ``explain=False`` (what a replay passes).

Scenario "deep queue": the same replay-sized cluster with 5,000 pending jobs (an overloaded
replay's queue), ``ours`` with its default scheduling depth (``queueing.scheduling_depth``) and
without a depth limit, ``explain=False``.

Prints one JSON document. Run: ``.venv/bin/python benchmarks/bench_policy.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import homogeneous_inventory
from predictor.capacity.layout import ClusterLayout
from predictor.policy.presets import load_policy, policy_from_mapping, preset_names
from predictor.policy.scheduler import decide
from predictor.policy.snapshot import ClusterSnapshot, PendingJobs, RunningJobs

TIERS = ("production", "debug", "sla", "research", "best_effort")
TEAMS = tuple(f"team-{i:02d}" for i in range(20))


def build_snapshot(rng: np.random.Generator, n_nodes: int, n_running: int, n_pending: int,
                   busy: float = 0.8) -> ClusterSnapshot:
    """A synthetic snapshot built the way a replay builds one: from arrays (``busy``: GPUs in use)."""
    layout = ClusterLayout.of(homogeneous_inventory(n_nodes * 8))
    sizes = rng.choice([1, 2, 4, 8, 16], size=n_running, p=[0.4, 0.2, 0.2, 0.15, 0.05])
    budget = int(layout.n_gpus * busy)
    keep = np.cumsum(sizes) <= budget
    sizes = sizes[keep]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    # pack running jobs onto GPUs in a shuffled node order (fragmentation like a live cluster)
    gpu_order = (rng.permutation(n_nodes)[:, None] * 8 + np.arange(8)[None, :]).ravel()
    gpus = [gpu_order[offsets[i]:offsets[i + 1]] for i in range(len(sizes))]
    now = 1_000_000.0
    start = now - rng.uniform(0, 20_000, len(sizes))
    running = RunningJobs.from_columns(
        job_id=np.array([f"run-{i}" for i in range(len(sizes))], dtype=object), gpus=gpus, start_ts=start,
        team=rng.integers(0, len(TEAMS), len(sizes)), tier=rng.integers(0, len(TIERS), len(sizes)),
        predicted_end_ts=start + rng.lognormal(9.0, 1.2, len(sizes)),
        checkpoint_interval_s=np.full(len(sizes), 1800.0), priority=rng.integers(1, 2**31 - 1, len(sizes)),
    )
    p50 = rng.lognormal(8.0, 1.5, n_pending)
    slow = np.cumprod(np.c_[np.ones(n_pending), 1.0 + rng.uniform(0, 0.15, (n_pending, 4))], axis=1)
    pending = PendingJobs.from_columns(
        job_id=np.array([f"job-{i}" for i in range(n_pending)], dtype=object),
        submit_ts=now - rng.uniform(0, 200_000, n_pending),
        num_gpus=rng.choice([1, 2, 4, 8, 16, 32], size=n_pending, p=[0.4, 0.2, 0.15, 0.15, 0.07, 0.03]),
        team=rng.integers(0, len(TEAMS), n_pending), tier=rng.integers(0, len(TIERS), n_pending),
        deadline_ts=np.where(rng.random(n_pending) < 0.1, now + rng.uniform(0, 100_000, n_pending), np.nan),
        p10_s=p50 * 0.5, p50_s=p50, p90_s=p50 * 2.0,
        peak_vram_upper_mib=rng.uniform(5_000, 90_000, n_pending), slowdown=slow[:, :len(PLACEMENT_CLASSES)],
    )
    usage = rng.uniform(0, 1e7, len(TEAMS))
    return ClusterSnapshot(now=now, layout=layout, pending=pending, running=running, teams=TEAMS, tiers=TIERS,
                           team_usage_gpu_s=usage)


def timed(fn, repeat: int) -> tuple[float, float, object]:
    """Median wall-clock and CPU seconds of ``repeat`` calls (CPU time is what one core spends; on a
    shared machine it is the steadier figure), and the last result."""
    wall, cpu, out = [], [], None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(wall), statistics.median(cpu), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rep = 2 if args.quick else 5
    rng = np.random.default_rng(args.seed)
    policy = load_policy()

    build_s, _, snap = timed(lambda: build_snapshot(np.random.default_rng(args.seed), 1000, 2000, 10_000), 1)
    decide(snap, policy)  # warm caches (layout compilation happens once per inventory)
    decide_s, decide_cpu, plan = timed(lambda: decide(snap, policy), rep)
    queue_s, queue_cpu, _ = timed(lambda: decide(snap, policy).queue(), max(1, rep // 2))
    large = {
        "nodes": snap.layout.n_nodes, "gpus": snap.layout.n_gpus, "running_jobs": len(snap.running),
        "pending_jobs": len(snap.pending), "free_gpus_at_start": int((snap.free_milli == 1000).sum()),
        "snapshot_build_s": round(build_s, 4), "decide_wall_s": round(decide_s, 4),
        "decide_cpu_s": round(decide_cpu, 4), "decide_plus_all_decisions_wall_s": round(queue_s, 4),
        "decide_plus_all_decisions_cpu_s": round(queue_cpu, 4), "target_s": 1.0,
        "meets_target": decide_cpu < 1.0 and queue_cpu < 1.0,
        "plan": {k: v for k, v in plan.stats.items() if k != "seconds"},
        "phase_s": {k: round(v, 4) for k, v in plan.stats["seconds"].items()},
    }

    replay_sized = {}
    small = build_snapshot(rng, 125, 1000, 200, busy=0.97)
    for name in preset_names():
        pol = load_policy(preset=name)
        d = decide(small, pol, explain=False)
        wall, cpu, _ = timed(lambda pol=pol: decide(small, pol, explain=False), 20 if not args.quick else 5)
        replay_sized[name] = {"wall_ms": round(wall * 1e3, 3), "cpu_ms": round(cpu * 1e3, 3),
                              "started": d.stats["started"], "reserved": d.stats["reserved"],
                              "preempting": d.stats["preempting"]}
    deep = {}
    deep_snap = build_snapshot(np.random.default_rng(args.seed + 1), 125, 1000, 5000, busy=0.97)
    unlimited = policy_from_mapping({**policy.model_dump(), "queueing": {**policy.queueing.model_dump(),
                                                                        "scheduling_depth": None}})
    for label, pol in ((f"depth {policy.queueing.scheduling_depth}", policy), ("no depth limit", unlimited)):
        d = decide(deep_snap, pol, explain=False)
        wall, cpu, _ = timed(lambda pol=pol: decide(deep_snap, pol, explain=False), 10 if not args.quick else 3)
        deep[label] = {"wall_ms": round(wall * 1e3, 3), "cpu_ms": round(cpu * 1e3, 3),
                       "tested": d.stats["considered"], "started": d.stats["started"],
                       "reserved": d.stats["reserved"], "preempting": d.stats["preempting"]}
    print(json.dumps({
        "benchmark": "policy.decide",
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "large_cycle": large,
        "replay_sized_cycle": {"gpus": small.layout.n_gpus, "pending": len(small.pending),
                               "running": len(small.running), "per_preset": replay_sized},
        "deep_queue_cycle": {"gpus": deep_snap.layout.n_gpus, "pending": len(deep_snap.pending),
                             "running": len(deep_snap.running), "ours": deep},
    }, indent=2))


if __name__ == "__main__":
    main()
