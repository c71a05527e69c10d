"""Evaluation matrix of the default policy against QSSF across loads, trace samples and seeds.

Workloads (each cut by ``predictor.tune.windows.split_windows``: the first 30 % trains the duration
model, the middle is the *tune* window, the last 30 % the *validate* window; both are replayed):

``philly@L[:A-B]``
    the Philly-derived trace (Chronus ``trace_job_Philly_MIX1.csv``), jobs ``A`` to ``B`` by submit
    time (default the first ``--philly-jobs``), on a homogeneous cluster of 8-GPU nodes sized so the
    offered load over the whole trace's span is ``L`` (0.9: the 1,232 GPUs of ``bench_replay``; the
    trace is bursty, so a sample's own load differs).
``synth@SEED``
    ``features.synth.generate(--synth-jobs, seed=SEED, cluster_gpus=--synth-gpus, target_load=0.9)``.

Policies: ``qssf`` (the preset) and the variants named in ``--variants``: ``default`` is the shipped
policy, others are the shipped policy with settings changed (``VARIANTS`` below, or
``NAME:path=value,path=value`` on the command line).

Prints one JSON document: per workload, window and policy, average JCT, maximum wait, SLA misses,
Jain's index, and per variant the ratio to QSSF of each (``wins``: no worse on all four).
Replays run in ``--workers`` processes (fork). Run:
``python benchmarks/policy_matrix.py --philly-jobs 8000 --loads 0.9,0.97,1.05 --seeds 5,23,41``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_replay import SHARED, read_format  # noqa: E402
from predictor.capacity.inventory import homogeneous_inventory  # noqa: E402
from predictor.sim.metrics import policy_metrics  # noqa: E402
from predictor.sim.replay import SimConfig, replay  # noqa: E402
from predictor.sim.rules import PolicyRules, load_policy  # noqa: E402
from predictor.tune.space import policy_with  # noqa: E402
from predictor.tune.windows import split_windows  # noqa: E402

METRICS = ("avg_jct_s", "max_wait_s", "sla_misses", "jain_index")

#: Named variants of the shipped default (dotted setting -> value).
VARIANTS: dict[str, dict] = {
    "default": {},
}

_WINDOWS: dict = {}


def _log(msg: str) -> None:
    print(f"[policy_matrix] {msg}", file=sys.stderr, flush=True)


def philly_sample(spec: str, default_jobs: int) -> tuple[pd.DataFrame, int]:
    """``L`` or ``L:A-B`` -> (jobs A..B by submit time, GPUs for an offered load L over the whole trace)."""
    load, _, rows = spec.partition(":")
    jobs = read_format("philly-derived", SHARED / "philly-derived/trace_job_Philly_MIX1.csv")
    jobs = jobs.sort_values("submit_ts", kind="stable").reset_index(drop=True)
    a, b = (int(x) for x in rows.split("-")) if rows else (0, default_jobs)
    return jobs.iloc[a:b].reset_index(drop=True), sized(jobs, float(load))


def sized(jobs: pd.DataFrame, load: float) -> int:
    span = jobs["submit_ts"].max() - jobs["submit_ts"].min()
    need = float((jobs["num_gpus"] * jobs["duration_s"]).sum() / span / load)
    return max(int(np.ceil(need / 8.0)) * 8, int(jobs["num_gpus"].max()))


def build_workloads(args) -> dict:
    from features.synth import generate

    out = {}
    for spec in [s for s in args.loads.split(",") if s]:
        jobs, gpus = philly_sample(spec, args.philly_jobs)
        inv = homogeneous_inventory(gpus)
        split, tune, val = split_windows(jobs, inv)
        out[f"philly@{spec}"] = {"inventory": inv, "tune": tune, "validate": val, "gpus": gpus,
                                 "jobs": len(jobs), "tune_jobs": split.tune_jobs, "validate_jobs": split.validate_jobs}
        _log(f"philly@{spec}: {len(jobs):,} jobs on {gpus:,} GPUs (tune {split.tune_jobs:,}, validate {split.validate_jobs:,})")
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        jobs = generate(args.synth_jobs, seed=seed, cluster_gpus=args.synth_gpus, target_load=0.9)
        inv = homogeneous_inventory(args.synth_gpus)
        split, tune, val = split_windows(jobs, inv)
        out[f"synth@{seed}"] = {"inventory": inv, "tune": tune, "validate": val, "gpus": args.synth_gpus,
                                "jobs": len(jobs), "tune_jobs": split.tune_jobs, "validate_jobs": split.validate_jobs}
        _log(f"synth@{seed}: {len(jobs):,} jobs on {args.synth_gpus} GPUs")
    return out


def _run(task):
    wl, window, name, policy = task
    w = _WINDOWS[wl]
    win = w[window]
    pred = win.predictions["trained"]
    t0 = time.process_time()
    rec = replay(win.jobs, w["inventory"], PolicyRules(name, policy, win.jobs, w["inventory"], pred), pred, SimConfig())
    metrics, _ = policy_metrics(rec)
    return wl, window, name, {m: metrics[m] for m in METRICS}, time.process_time() - t0


def _value(v: str):
    """``null``, ``true``/``false``, an integer, a float, else the text itself (``reservation.backfill=none``)."""
    if v in ("null", "true", "false"):
        return {"null": None, "true": True, "false": False}[v]
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v


def parse_variant(text: str) -> tuple[str, dict]:
    if ":" not in text:
        if text not in VARIANTS:
            raise SystemExit(f"unknown variant {text!r}; named: {', '.join(VARIANTS)} (or NAME:path=value,...)")
        return text, VARIANTS[text]
    name, _, body = text.partition(":")
    values = {}
    for item in body.split(","):
        path, _, v = item.partition("=")
        values[path] = _value(v)
    return name, values


def no_worse(metric: str, v: float, q: float) -> bool:
    return v >= q - 1e-9 if metric == "jain_index" else v <= q + 1e-9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--philly-jobs", type=int, default=8000)
    ap.add_argument("--loads", default="0.9,0.97,1.05", help="Philly samples: L or L:A-B, comma-separated")
    ap.add_argument("--seeds", default="5,23,41")
    ap.add_argument("--synth-jobs", type=int, default=8000)
    ap.add_argument("--synth-gpus", type=int, default=256)
    ap.add_argument("--windows", default="tune,validate")
    ap.add_argument("--variants", action="append", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    variants = dict(parse_variant(v) for v in (args.variants or ["default"]))
    base = load_policy("ours")
    policies = {"qssf": load_policy("qssf")}
    for name, values in variants.items():
        policies[name] = policy_with(base, values, name=name) if values else base
    t0 = time.perf_counter()
    _WINDOWS.update(build_workloads(args))
    tasks = [(wl, win, name, pol) for wl in _WINDOWS for win in args.windows.split(",") for name, pol in policies.items()]
    results: dict = {}
    cpu = 0.0
    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers) as pool:
        for wl, win, name, metrics, sec in pool.imap_unordered(_run, tasks):
            results.setdefault(wl, {}).setdefault(win, {})[name] = metrics
            cpu += sec
            _log(f"{wl} {win} {name}: " + ", ".join(f"{k} {v:.6g}" for k, v in metrics.items()) + f" ({sec:.0f} s CPU)")
    summary = {}
    for name in variants:
        rows = []
        for wl, wins in results.items():
            for win, pols in wins.items():
                q, v = pols["qssf"], pols[name]
                ratio = {m: (v[m] / q[m] if q[m] else float("nan")) for m in METRICS}
                rows.append({"workload": wl, "window": win, "jct_ratio": round(ratio["avg_jct_s"], 4),
                             "max_wait_ratio": round(ratio["max_wait_s"], 4),
                             "sla_ratio": round(ratio["sla_misses"], 4), "jain_diff": round(v["jain_index"] - q["jain_index"], 4),
                             "wins": all(no_worse(m, v[m], q[m]) for m in METRICS)})
        jr = [r["jct_ratio"] for r in rows]
        summary[name] = {"settings": variants[name], "rows": rows, "worst_jct_ratio": max(jr),
                         "mean_jct_ratio": float(np.mean(jr)), "worst_max_wait_ratio": max(r["max_wait_ratio"] for r in rows),
                         "cells_won": sum(r["wins"] for r in rows), "cells": len(rows)}
    doc = {"workloads": {k: {kk: v[kk] for kk in ("gpus", "jobs", "tune_jobs", "validate_jobs")} for k, v in _WINDOWS.items()},
           "results": results, "summary": summary, "replay_cpu_s": round(cpu, 1),
           "wall_s": round(time.perf_counter() - t0, 1), "load_average": os.getloadavg()[0]}
    text = json.dumps(doc, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
