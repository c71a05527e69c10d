"""Benchmark of ``predictor tune``: trials per minute on 1 and 2 Dask workers, and a 50-trial study.

Workload: the Philly-derived trace (Chronus ``trace_job_Philly_MIX1.csv``, semi-synthetic, 30,940
jobs, read with the ``philly-derived`` reader) on a homogeneous cluster of 8-GPU nodes sized so the
offered load is ~0.9 (1,232 GPUs), as in ``bench_replay.py``. The tuning split is the command's
default: 30 % trains the predictor, 40 % is the tuning window, 30 % validates.

Sections
--------
``rate``
    The split once, then for K = 1 and 2 worker processes of a ``LocalCluster``: the tuning window
    is sent to the workers and each runs one replay to warm up (imports, first allocations), then
    ``--rate-trials`` trials (generations of ``--population``) are timed. Prints trials per minute
    (wall), the speed-up 2 vs 1 and its efficiency (speed-up / 2), and the CPU seconds the trials'
    replays took (the machine is shared: CPU time is the figure that does not depend on neighbours).
``study``
    ``predictor tune``'s whole study (``predictor.tune.study.tune_policy``) with ``--study-trials``
    trials (50) on 2 workers: wall time of the split and training, the search and the validation,
    and the validation table of tuned against qssf (``qssf-sized`` too on several GPU types).

Prints one JSON document. Run: ``.venv/bin/python benchmarks/bench_tune.py [--quick]`` (``--quick``:
the first 6,000 jobs of the trace, fewer trials: a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from features.schema import validate
from predictor.capacity.inventory import homogeneous_inventory
from predictor.sim.metrics import MetricsConfig
from predictor.sim.replay import SimConfig
from predictor.sim.rules import load_policy
from predictor.tune.dask_replays import WindowReplays, dask_client
from predictor.tune.objectives import DEFAULT_OBJECTIVES, parse_objectives
from predictor.tune.search import search
from predictor.tune.study import TuneSettings, tune_policy
from predictor.tune.windows import split_windows

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PREDICTOR_SHARED_DATA", ROOT.parent / "shared" / "data"))
TRACE = SHARED / "philly-derived" / "trace_job_Philly_MIX1.csv"


def _log(msg: str) -> None:
    print(f"[bench_tune] {msg}", file=sys.stderr, flush=True)


def philly(quick: bool) -> tuple[pd.DataFrame, object, int]:
    from features.sources import read_chunks

    jobs = validate(pd.concat(list(read_chunks("philly-derived", [TRACE])), ignore_index=True)).jobs
    if quick:
        jobs = jobs.sort_values("submit_ts").head(6000)
    span = jobs["submit_ts"].max() - jobs["submit_ts"].min()
    load_gpus = float((jobs["num_gpus"] * jobs["duration_s"]).sum() / span / 0.9)
    gpus = max(int(np.ceil(load_gpus / 8.0)) * 8, int(jobs["num_gpus"].max()))
    return jobs, homogeneous_inventory(gpus), gpus


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def section_rate(windows, inventory, trials: int, population: int, seed: int) -> dict:
    split, tune_window, _ = windows
    base = load_policy("ours")
    objectives = parse_objectives(DEFAULT_OBJECTIVES)
    out: dict = {"tune_window_jobs": split.tune_jobs, "trials": trials, "population": population, "by_workers": {}}
    for k in (1, 2):
        children0 = _children_cpu_s()
        with dask_client(workers=k) as client, \
                WindowReplays(client, tune_window, inventory, SimConfig(), MetricsConfig()) as window:
            out["window_payload_bytes_per_job"] = round(len(window.plugin.payload) / split.tune_jobs)
            warm = window.run([(f"warm-{i}", "fifo", load_policy("fifo"), "none") for i in range(k)])
            if any(isinstance(w, BaseException) for w in warm):
                raise RuntimeError(f"warm-up failed: {warm}")
            load_before = os.getloadavg()[0]
            start = time.perf_counter()

            def evaluate(batch, window=window):
                outs = window.run([(f"trial-{n}", f"trial-{n}", p, "trained") for n, p in batch])
                return [o if isinstance(o, BaseException) else (o.metrics, o.cpu_s) for o in outs]

            result = search(evaluate, base, objectives, trials=trials, seed=seed, population=population)
            wall = time.perf_counter() - start
        cpu = [t.cpu_s for t in result.trials if t.ok]
        out["by_workers"][str(k)] = {
            "wall_s": round(wall, 1), "trials_per_minute": round(60.0 * trials / wall, 2),
            "trial_replay_cpu_s_mean": round(float(np.mean(cpu)), 2), "trial_replay_cpu_s_total": round(sum(cpu), 1),
            "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
            "front_size": len(result.front),
            "cpu_s_worker_processes_incl_start": round(_children_cpu_s() - children0, 1)}
        _log(f"{k} worker(s): {out['by_workers'][str(k)]}")
    one, two = out["by_workers"]["1"]["trials_per_minute"], out["by_workers"]["2"]["trials_per_minute"]
    out["speedup_2_vs_1"] = round(two / one, 2)
    out["parallel_efficiency"] = round(two / one / 2.0, 2)
    return out


def section_study(jobs: pd.DataFrame, windows, inventory, trials: int, population: int, seed: int) -> dict:
    settings = TuneSettings(trials=trials, population=population, seed=seed)
    start = time.perf_counter()
    cpu0, children0 = time.process_time(), _children_cpu_s()
    with dask_client(workers=2) as client:
        result = tune_policy(jobs, inventory, client, settings, on_phase=_log, windows=windows,
                             on_generation=lambda g: _log(f"generation of {len(g)} done"))
    wall = time.perf_counter() - start
    keys = ("avg_jct_s", "max_wait_s", "sla_misses", "jain_index")
    return {
        "trials": trials, "population": population, "seed": seed, "workers": 2,
        "wall_s_including_cluster_start": round(wall, 1),
        "seconds": {k: round(v, 1) for k, v in result.seconds.items()},
        "cpu_s_driver": round(time.process_time() - cpu0, 1),
        "cpu_s_worker_processes": round(_children_cpu_s() - children0, 1),
        "trial_replay_cpu_s_total": round(sum(t.cpu_s for t in result.search.trials), 1),
        "split": result.split.as_dict() | {"trained_models": len(result.split.trained_models)},
        "front_size": len(result.search.front), "trials_failed": sum(1 for t in result.search.trials if not t.ok),
        "chosen_trial": result.chosen.number, "chosen_qualified": result.choice.qualified,
        "judged_against": result.judge,
        "chosen_is_qssf": result.choice.baseline,
        "chosen_is_base": result.choice.base,
        "rule": result.choice.rule,
        # the whole window's four metrics, then each part's that the rule judged (part1.avg_jct_s, ...)
        "tuning_window": {n: {k: v for k, v in m.items() if k in keys or k.startswith("part")} for n, m in
                          {"chosen": result.chosen.metrics or {}, **result.tuning_baselines}.items()},
        "validation": {n: {k: m.get(k) for k in keys} for n, m in result.validation.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="rate,study")
    ap.add_argument("--rate-trials", type=int, default=16)
    ap.add_argument("--study-trials", type=int, default=50)
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="the first 6,000 jobs and fewer trials (a smoke run)")
    args = ap.parse_args(argv)
    if not TRACE.is_file():
        _log(f"{TRACE} is missing (the shared data folder): nothing to measure")
        print(json.dumps({"skipped": f"{TRACE} missing"}))
        return 0
    sections = [s for s in args.sections.split(",") if s]
    jobs, inventory, gpus = philly(args.quick)
    doc: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0],
                 "quick": args.quick, "workload": f"Philly-derived MIX1, {len(jobs):,} jobs on {gpus} GPUs (8-GPU nodes)"}
    rate_trials = 8 if args.quick else args.rate_trials
    population = 4 if args.quick else args.population
    start, cpu = time.perf_counter(), time.process_time()
    windows = split_windows(jobs, inventory, on_phase=_log)  # once: both sections replay the same windows
    doc["split"] = {"wall_s": round(time.perf_counter() - start, 1), "cpu_s": round(time.process_time() - cpu, 1),
                    "note": "training the predictor on the first 30 % and predicting both windows; "
                            "the study's split_s below is 0 because it reuses this split"}
    if "rate" in sections:
        doc["rate"] = section_rate(windows, inventory, rate_trials, min(population, rate_trials), args.seed)
    if "study" in sections:
        doc["study"] = section_study(jobs, windows, inventory, 8 if args.quick else args.study_trials, population,
                                     args.seed)
        doc["study"]["wall_s_whole_study"] = round(doc["split"]["wall_s"] + doc["study"]["wall_s_including_cluster_start"], 1)
    print(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
