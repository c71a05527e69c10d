"""Benchmark of the trace replay: the policy x metric table on three workloads, the PAI validation,
and replay speed.

Sections (``--sections``, comma-separated; all by default):

``philly``
    The Philly-derived trace (Chronus ``trace_job_Philly_MIX1.csv``, semi-synthetic, 30,940 jobs
    over 5.6 h, read with the ``philly-derived`` reader) on a homogeneous cluster of 8-GPU nodes
    sized so the offered load is ~0.9 (1,232 GPUs; the trace names no cluster).
``openb``
    The openb pod list (Alibaba, real; 5,706 pods, GPU shares) on its own node inventory (1,213 GPU
    nodes, 6,212 GPUs of 7 types). The pods that ran hold at most ~2,400 GPUs at once, so on its own
    inventory nothing ever queues and every policy gives the same numbers; ``quarter_inventory``
    replays the same pods on every 4th node (304 nodes, 1,548 GPUs, same type mix), where they do queue.
``synthetic``
    ``features.synth.generate(n, cluster_gpus=G, target_load=0.9)`` (Philly-calibrated profile,
    ground-truth durations, memory and slowdowns) on ``G`` GPUs.
``pai``
    The PAI-simulator validation (``predictor.sim.pai_shape``): FIFO and SJF (oracle), both greedy
    without preemption as in the PAI simulator, on 20,000 PAI-shaped jobs on one 6,500-GPU node;
    compared with ``../shared/data/stats/pai_simulator_result_0228.log``.
``scaling``
    CPU seconds (``time.process_time``) of the replay alone for ``--scaling-policies`` (``ours``)
    at ``--scaling-sizes`` jobs (10k, 30k, 100k) on 1,000 GPUs at offered load 0.9, with the
    exponent of a power law fitted through them (target: no worse than n log n; 100k under 60 s).
``pai_speed``
    CPU seconds of FIFO, SJF and ``ours`` on the PAI simulator's workload shape (20,000 jobs) on
    2,112 GPUs (target: ``ours`` under 18 s, a tenth of the peer's FIFO).
``speed``
    Wall time and events/s of a 100,000-job replay (``--speed-jobs``) on 1,000 GPUs per policy
    (target < 60 s on one core; the load average before and after each replay is printed with it), and of a 1,000,000-job replay (target < 15 min) for the policies named in
    ``--million-policies`` (none by default: at the rates measured it takes hours).

Each workload section replays every policy of the issue (``fifo sjf-oracle qssf las kueue ours
ours-oracle``; ``--policies`` to choose) through ``predictor.sim.experiment.run_experiment`` with a
30 % training prefix, and evaluates the issue's targets for ``ours``: average JCT at least 25 % below
FIFO's, within 10 % of sjf-oracle's, max wait no worse than FIFO's, Jain's index at least FIFO's.

Prints one JSON document. Run: ``.venv/bin/python benchmarks/bench_replay.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from features.schema import validate
from predictor.capacity.inventory import Inventory, homogeneous_inventory
from predictor.sim.experiment import POLICIES, ExperimentConfig, run_experiment
from predictor.sim.metrics import policy_metrics
from predictor.sim.replay import SimConfig

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PREDICTOR_SHARED_DATA", ROOT.parent / "shared" / "data"))


def _log(msg: str) -> None:
    print(f"[bench_replay] {msg}", file=sys.stderr, flush=True)


def read_format(fmt: str, path: Path) -> pd.DataFrame:
    from features.sources import read_chunks

    frame = pd.concat(list(read_chunks(fmt, [path])), ignore_index=True)
    return validate(frame).jobs


def targets(table: dict) -> dict:
    """The issue's targets for ``ours`` against ``fifo`` and ``sjf-oracle`` (None where one is missing)."""
    p = table
    if not {"ours", "fifo"} <= set(p):
        return {}
    ours, fifo = p["ours"], p["fifo"]
    out = {
        "avg_jct_cut_vs_fifo": 1.0 - ours["avg_jct_s"] / fifo["avg_jct_s"],
        "avg_jct_cut_vs_fifo_ok": bool(ours["avg_jct_s"] <= 0.75 * fifo["avg_jct_s"]),
        "max_wait_no_worse_than_fifo": bool(ours["max_wait_s"] <= fifo["max_wait_s"]),
        "jain_at_least_fifo": bool(ours["jain_index"] >= fifo["jain_index"] - 1e-9),
    }
    if "sjf-oracle" in p:
        out["avg_jct_vs_sjf_oracle"] = ours["avg_jct_s"] / p["sjf-oracle"]["avg_jct_s"] - 1.0
        out["within_10pct_of_sjf_oracle"] = bool(ours["avg_jct_s"] <= 1.1 * p["sjf-oracle"]["avg_jct_s"])
    return out


def compare(name: str, jobs: pd.DataFrame, inventory, policies: list[str], cfg: ExperimentConfig) -> dict:
    _log(f"{name}: {len(jobs):,} jobs on {inventory.total_gpus:,} GPUs, policies {', '.join(policies)}")
    t0 = time.perf_counter()
    records, run = run_experiment(jobs, inventory, policies, cfg, on_phase=lambda m: _log(f"{name}: {m}"))
    table, speed, extra = {}, {}, {}
    for rec in records:
        metrics, more = policy_metrics(rec, cfg.metrics)
        table[rec.policy] = metrics
        speed[rec.policy] = more["replay"]
        extra[rec.policy] = {k: more[k] for k in ("jobs_finished", "jobs_rejected", "jobs_failed_oom",
                                                  "jobs_unfinished", "oom_failures", "utilization_while_jobs_arrive")}
    return {"jobs_replayed": run["jobs_replayed"], "gpus": inventory.total_gpus, "run": run, "policies": table,
            "extra": extra, "speed": speed, "targets": targets(table), "wall_s": time.perf_counter() - t0}


def section_philly(policies: list[str], cfg: ExperimentConfig, quick: bool) -> dict:
    jobs = read_format("philly-derived", SHARED / "philly-derived/trace_job_Philly_MIX1.csv")
    if quick:
        jobs = jobs.sort_values("submit_ts").head(6000)
    span = jobs["submit_ts"].max() - jobs["submit_ts"].min()
    load_gpus = float((jobs["num_gpus"] * jobs["duration_s"]).sum() / span / 0.9)
    gpus = max(int(np.ceil(load_gpus / 8.0)) * 8, int(jobs["num_gpus"].max()))
    out = compare("philly", jobs, homogeneous_inventory(gpus), policies, cfg)
    out["cluster"] = f"homogeneous, {gpus} GPUs in 8-GPU nodes (offered load 0.9 over the trace span)"
    return out


def section_openb(policies: list[str], cfg: ExperimentConfig, quick: bool) -> dict:
    from predictor.capacity.inventory_sources import load_inventory

    jobs = read_format("openb", SHARED / "openb-2023/openb_pod_list_default.csv")
    inventory = load_inventory(SHARED / "openb-2023/openb_node_list_gpu_node.csv")
    out = {"as_recorded": compare("openb", jobs, inventory, policies, cfg)}
    quarter = Inventory(nodes=inventory.nodes[::4], gpu_types=inventory.gpu_types)
    out["quarter_inventory"] = compare("openb_quarter", jobs, quarter, policies, cfg)
    out["quarter_inventory"]["cluster"] = (f"every 4th node of the openb GPU node list ({len(quarter.nodes)} nodes, "
                                           f"{quarter.total_gpus} GPUs, same type mix)")
    return out


def section_synthetic(policies: list[str], cfg: ExperimentConfig, n_jobs: int, gpus: int) -> dict:
    from features.synth import generate

    jobs = generate(n_jobs, seed=11, cluster_gpus=gpus, target_load=0.9)
    out = compare("synthetic", jobs, homogeneous_inventory(gpus), policies, cfg)
    out["workload"] = f"features.synth.generate({n_jobs}, seed=11, cluster_gpus={gpus}, target_load=0.9)"
    return out


def _pai_replay(jobs: pd.DataFrame, gpus: int, name: str) -> dict:
    """FIFO or SJF as the PAI simulator runs them: greedy (a job that does not fit is skipped), no
    preemption, no reservation, on one node of ``gpus`` GPUs (no topology). ``OURS``: the ``ours``
    preset as shipped (its own queueing, reservations and preemption) told the true durations (the
    PAI-shaped jobs have no history to train on), on the same node."""
    from predictor.policy.config import QueueingConfig
    from predictor.sim.predictions import NoPredictions, OraclePredictions
    from predictor.sim.replay import replay
    from predictor.sim.rules import PolicyRules, load_policy
    from predictor.sim.workload import load_workload

    table, _ = load_workload(jobs)
    # the PAI-shaped jobs ask for V100s (the PAI cluster's type): the node is of that type, as in PAI
    inv = homogeneous_inventory(gpus, gpus_per_node=gpus, gpu_type="V100")
    preset, source = {"FIFO": ("fifo", NoPredictions()), "SJF": ("sjf-oracle", OraclePredictions()),
                      "OURS": ("ours", OraclePredictions())}[name]
    policy = load_policy(preset)
    if name != "OURS":
        policy = policy.model_copy(update={"queueing": QueueingConfig(strategy="best_effort", scope="cluster")})
    preds = source.predict(table, inv)
    cpu0 = time.process_time()
    rec = replay(table, inv, PolicyRules(name, policy, table, inv, preds), preds, SimConfig())
    cpu = time.process_time() - cpu0
    metrics, more = policy_metrics(rec)
    return {"gpus": gpus, "avg_jct_s": metrics["avg_jct_s"], "avg_wait_s": metrics["avg_wait_s"],
            "makespan_s": metrics["makespan_s"], "wall_s": rec.wall_s, "cpu_s": cpu, "events": rec.events,
            "decide_calls": rec.decide_calls, "events_per_s": more["replay"]["events_per_s"]}


def section_pai_speed(quick: bool) -> dict:
    """CPU seconds of FIFO, SJF and ``ours`` on the PAI simulator's shape (20,000 jobs) on 2,112 GPUs
    (the capacity our FIFO's average wait was calibrated to; the peer's FIFO took 182-186 s CPU
    there): the target is ``ours`` under a tenth of it, 18 s."""
    from predictor.sim.pai_shape import PAI_JOBS, pai_shaped_jobs

    n = PAI_JOBS // 5 if quick else PAI_JOBS
    gpus = int(2112 * n / PAI_JOBS)
    jobs = validate(pai_shaped_jobs(n)).jobs
    out: dict = {"jobs": n, "gpus": gpus, "target_ours_cpu_s": 18.0 * n / PAI_JOBS,
                 "peer_fifo_cpu_s": [182.0, 186.0]}
    for name in ("FIFO", "SJF", "OURS"):
        out[name] = _pai_replay(jobs, gpus, name)
        _log(f"pai_speed {name}: {out[name]}")
    return out


def section_pai(quick: bool) -> dict:
    """The PAI validation twice: on the published 6,500 GPUs, and on a capacity calibrated so that our
    FIFO's average wait equals the published FIFO's (the one unknown we fit); SJF is then a prediction."""
    from predictor.sim.pai_shape import PAI_GPUS, PAI_JOBS, pai_shaped_jobs, read_pai_simulator_log

    log = SHARED / "stats/pai_simulator_result_0228.log"
    ref = read_pai_simulator_log(log)
    n = PAI_JOBS // 5 if quick else PAI_JOBS
    scale = n / PAI_JOBS
    jobs = validate(pai_shaped_jobs(n)).jobs
    out: dict = {"jobs": n, "published": {k: {"avg_jct_s": v.avg_jct_s, "avg_wait_s": v.avg_wait_s,
                                              "makespan_s": v.makespan_s} for k, v in ref.items()
                                          if k in ("FIFO", "SJF")}}
    out["published_ratio_fifo_over_sjf"] = ref["FIFO"].avg_jct_s / ref["SJF"].avg_jct_s
    as_published = int(PAI_GPUS * scale)
    _log(f"pai: {n:,} jobs on {as_published:,} GPUs (the published size)")
    runs = {name: _pai_replay(jobs, as_published, name) for name in ("FIFO", "SJF")}
    out["on_published_capacity"] = {**runs, "ratio_fifo_over_sjf": runs["FIFO"]["avg_jct_s"] / runs["SJF"]["avg_jct_s"]}
    # calibrate: fewer GPUs -> longer waits; bisect the GPU count until FIFO's average wait matches
    target = ref["FIFO"].avg_wait_s
    lo, hi = int(800 * scale), as_published
    tried: dict[int, dict] = {as_published: runs["FIFO"]}
    for _ in range(8):
        mid = (lo + hi) // 2
        tried[mid] = _pai_replay(jobs, mid, "FIFO")
        _log(f"pai: calibrating: {mid} GPUs -> FIFO average wait {tried[mid]['avg_wait_s']:.0f} s (target {target:.0f})")
        if tried[mid]["avg_wait_s"] > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= max(2, int(10 * scale)):
            break
    best = min(tried, key=lambda g: abs(tried[g]["avg_wait_s"] - target))
    calibrated = {"FIFO": tried[best], "SJF": _pai_replay(jobs, best, "SJF")}
    calibrated["ratio_fifo_over_sjf"] = calibrated["FIFO"]["avg_jct_s"] / calibrated["SJF"]["avg_jct_s"]
    calibrated["calibrated_gpus"] = best
    calibrated["calibration_path"] = {g: round(v["avg_wait_s"], 1) for g, v in sorted(tried.items())}
    out["on_capacity_calibrated_to_fifo_wait"] = calibrated
    return out


def _with_depth(depth: int | None):
    """``adjust_policy`` setting ``queueing.scheduling_depth`` (None: the presets as shipped)."""
    if depth is None:
        return None

    def adjust(policy):
        return policy.model_copy(update={"queueing": policy.queueing.model_copy(update={"scheduling_depth": depth})})

    return adjust


def _cpu_replays(timings: dict):
    """A ``ReplayMany`` that times each replay in CPU seconds (``time.process_time``) into ``timings``."""
    from predictor.sim.replay import replay
    from predictor.sim.rules import PolicyRules

    def many(table, inventory, runs, sim):
        records = []
        for name, policy, pred in runs:
            t0 = time.process_time()
            records.append(replay(table, inventory, PolicyRules(name, policy, table, inventory, pred), pred, sim))
            timings[name] = time.process_time() - t0
        return records

    return many


def section_scaling(policies: list[str], sizes: list[int], gpus: int = 1000) -> dict:
    """CPU seconds of the replay alone at each size (jobs replayed, after a 30 % training prefix) on
    ``gpus`` GPUs at offered load 0.9, and the exponent of a power law fitted through them (log-log
    least squares): the target is no worse than n log n (an exponent of about 1.1 over 10k-100k)."""
    from features.synth import generate

    out: dict = {"gpus": gpus, "sizes": sizes}
    for name in policies:
        rows = []
        for n in sizes:
            jobs = generate(int(n / 0.7), seed=5, cluster_gpus=gpus, target_load=0.9)
            timings: dict = {}
            records, _ = run_experiment(jobs, homogeneous_inventory(gpus), [name],
                                        ExperimentConfig(train_fraction=0.3, sim=SimConfig()),
                                        replay_many=_cpu_replays(timings))
            rec = records[0]
            rows.append({"jobs_replayed": len(rec.jobs), "replay_cpu_s": timings[name], "replay_wall_s": rec.wall_s,
                         "events": rec.events, "decide_calls": rec.decide_calls,
                         "events_per_cpu_s": rec.events / timings[name],
                         "load_average_1min": round(os.getloadavg()[0], 2)})
            _log(f"scaling {name} {n}: {rows[-1]}")
        entry: dict = {"runs": rows}
        if len(rows) >= 2:
            x = np.log([r["jobs_replayed"] for r in rows])
            y = np.log([r["replay_cpu_s"] for r in rows])
            entry["fitted_exponent"] = float(np.polyfit(x, y, 1)[0])
        out[name] = entry
    return out


def section_speed(policies: list[str], million_policies: list[str], quick: bool, n_jobs: int = 100_000,
                  scheduling_depth: int | None = None) -> dict:
    """Replay wall time per policy for ~100,000 (and ~1,000,000) replayed jobs on 1,000 GPUs.

    The synthetic history has n / 0.7 jobs so that, after the 30 % training prefix, n are replayed;
    ``replay_wall_s`` is the replay alone (training the predictor of ``ours``/``qssf`` excluded, it is
    reported as ``prediction_wall_s``)."""
    from features.synth import generate

    out: dict = {}
    for n, gpus, names in ((n_jobs, 1000, policies), (1_000_000, 1000, million_policies)):
        if quick:
            n //= 10
        label = f"{n}_jobs_{gpus}_gpus"
        if not names:
            continue
        _log(f"speed: generating {int(n / 0.7):,} jobs")
        jobs = generate(int(n / 0.7), seed=5, cluster_gpus=gpus, target_load=0.9)
        cfg = ExperimentConfig(train_fraction=0.3, sim=SimConfig())
        res = {}
        for name in names:
            t0, load0 = time.perf_counter(), os.getloadavg()[0]
            timings: dict = {}
            records, _ = run_experiment(jobs, homogeneous_inventory(gpus), [name], cfg,
                                        on_phase=lambda m, label=label: _log(f"speed {label}: {m}"),
                                        adjust_policy=_with_depth(scheduling_depth), replay_many=_cpu_replays(timings))
            rec = records[0]
            total = time.perf_counter() - t0
            res[name] = {"jobs_replayed": len(rec.jobs), "replay_cpu_s": timings[name], "replay_wall_s": rec.wall_s,
                         "prediction_wall_s": total - rec.wall_s, "events": rec.events,
                         "events_per_s": rec.events / rec.wall_s, "decide_calls": rec.decide_calls,
                         "decide_s": rec.decide_s, "target_s": 60.0 if n <= 100_000 else 900.0,
                         "load_average_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
                         "cpus": os.cpu_count(), "scheduling_depth": scheduling_depth}
            _log(f"speed {label} {name}: {res[name]}")
        out[label] = res
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="philly,openb,synthetic,pai,speed")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--speed-policies", default=",".join(POLICIES))
    ap.add_argument("--speed-jobs", type=int, default=100_000,
                    help="jobs replayed per policy in the speed section (after the 30 %% prefix)")
    ap.add_argument("--scheduling-depth", type=int, default=None,
                    help="speed section: replay with queueing.scheduling_depth set to this (changes decisions)")
    ap.add_argument("--million-policies", default="",
                    help="policies to replay 1,000,000 jobs with (opt-in: hours at the measured rates)")
    ap.add_argument("--scaling-policies", default="ours", help="scaling section: policies timed at every size")
    ap.add_argument("--scaling-sizes", default="10000,30000,100000",
                    help="scaling section: jobs replayed (after the 30 %% prefix) on 1,000 GPUs")
    ap.add_argument("--synthetic-jobs", type=int, default=20_000)
    ap.add_argument("--synthetic-gpus", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a smoke run)")
    args = ap.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    cfg = ExperimentConfig(train_fraction=0.3)
    doc: dict = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "load_average_at_start": os.getloadavg()[0], "quick": args.quick}
    if not SHARED.is_dir() and {"philly", "openb", "pai"} & set(sections):
        _log(f"shared data folder {SHARED} is missing: skipping philly, openb and pai")
        sections = [s for s in sections if s not in ("philly", "openb", "pai")]
    if "philly" in sections:
        doc["philly_derived"] = section_philly(policies, cfg, args.quick)
    if "openb" in sections:
        doc["openb"] = section_openb(policies, cfg, args.quick)
    if "synthetic" in sections:
        n = args.synthetic_jobs // (5 if args.quick else 1)
        doc["synthetic"] = section_synthetic(policies, cfg, n, args.synthetic_gpus)
    if "pai" in sections:
        doc["pai_validation"] = section_pai(args.quick)
    if "pai_speed" in sections:
        doc["pai_speed"] = section_pai_speed(args.quick)
    if "scaling" in sections:
        doc["scaling"] = section_scaling([p for p in args.scaling_policies.split(",") if p],
                                         [int(n) for n in args.scaling_sizes.split(",") if n])
    if "speed" in sections:
        doc["speed"] = section_speed([p for p in args.speed_policies.split(",") if p],
                                     [p for p in args.million_policies.split(",") if p], args.quick,
                                     args.speed_jobs, args.scheduling_depth)
    print(json.dumps(doc, indent=2, default=lambda o: None if isinstance(o, float) and not np.isfinite(o) else str(o)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
