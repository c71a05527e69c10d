"""A workload shaped like the one behind the PAI trace simulator's published FIFO / SJF numbers.

The Alibaba PAI simulator (``alibaba/clusterdata``, ``cluster-trace-gpu-v2020/simulator``; log
``pai_simulator_result_0228.log``, "MLaaS in the Wild", NSDI'22) replays 20,000 jobs sampled at
random from its 100K-job PAI trace on **one node of 6,500 GPUs** (no topology: any GPU goes with any
other), submitting **1,000 jobs every 60 s** (all 20,000 within 20 minutes: a burst that drains
over days), with greedy allocation in policy order (a job that does not fit is skipped, later ones
may start: no reservation) and no preemption in practice. It reports average JCT 7,918 s (FIFO)
against 5,989 s (SJF with true durations) and makespan 535,706 s.

Their job file is not public here, so :func:`pai_shaped_jobs` draws jobs to the published PAI
statistics instead (``../shared/data/stats/cluster_summary.csv``, PAI row; and the simulator's own
sample mean run time, avg JCT - avg wait = 5,038 s):

* run time: log-normal with median 480.7 s, truncated at the published maximum 626,371 s, its
  sigma solved so that the truncated mean is 5,038 s (sigma ~ 2.3);
* GPUs: PAI requests are mostly GPU shares (median 0.5 GPU, mean 0.683): 0.25 (25 %), 0.5 (45 %),
  1 (25 %), 2 (3 %), 4 (1.5 %), 8 (0.5 %) -> mean 0.70. Shares below one GPU become one GPU with
  ``gpu_milli`` 250 / 500;
* arrivals: 1,000 jobs per 60 s, in random order (the simulator shuffles its sample).

What differs from the original, and therefore from its FIFO/SJF ratio, is documented in
``docs/replay.md`` (Validation against the PAI simulator) (the CPU dimension it also schedules, the real duration-size correlation,
multi-instance jobs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from features.errors import InputError

__all__ = ["PAI_GPUS", "PaiResult", "pai_shaped_jobs", "read_pai_simulator_log", "run_time_sigma"]

PAI_GPUS = 6500
PAI_JOBS = 20_000
ARRIVALS_PER_MINUTE = 1000
MEDIAN_RUN_S = 480.667
MEAN_RUN_S = 5038.0
MAX_RUN_S = 626_371.0
GPU_SIZES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
GPU_PROBS = (0.25, 0.45, 0.25, 0.03, 0.015, 0.005)


def _truncated_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    phi = lambda z: 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))  # noqa: E731
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma * sigma / 2.0) * phi(z - sigma) / phi(z)


def run_time_sigma(median_s: float = MEDIAN_RUN_S, mean_s: float = MEAN_RUN_S, cap_s: float = MAX_RUN_S) -> float:
    """Sigma of the log-normal with this median whose mean, truncated at ``cap_s``, is ``mean_s``."""
    lo, hi, mu = 0.01, 6.0, math.log(median_s)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _truncated_lognormal_mean(mu, mid, cap_s) < mean_s else (lo, mid)
    return 0.5 * (lo + hi)


def pai_shaped_jobs(n_jobs: int = PAI_JOBS, seed: int = 42, start_ts: float = 1_600_000_000.0) -> pd.DataFrame:
    """Canonical job table shaped like the PAI simulator's workload (see the module docstring)."""
    rng = np.random.default_rng(seed)
    sigma = run_time_sigma()
    run = np.exp(rng.normal(np.log(MEDIAN_RUN_S), sigma, n_jobs))
    while (over := run > MAX_RUN_S).any():  # truncate by redrawing, not by piling mass at the cap
        run[over] = np.exp(rng.normal(np.log(MEDIAN_RUN_S), sigma, int(over.sum())))
    run = np.maximum(np.round(run), 1.0)
    size = rng.choice(np.array(GPU_SIZES), size=n_jobs, p=np.array(GPU_PROBS))
    submit = start_ts + (np.arange(n_jobs) // ARRIVALS_PER_MINUTE) * 60.0
    whole = size >= 1
    return pd.DataFrame({
        "job_id": [f"pai-{i:05d}" for i in range(n_jobs)],
        "user": [f"user-{u:03d}" for u in rng.integers(0, 200, n_jobs)],
        "team": [f"team-{t:02d}" for t in rng.integers(0, 10, n_jobs)],
        "num_gpus": np.where(whole, size, 1.0),
        "gpu_milli": np.where(whole, 1000.0, size * 1000.0),
        "gpu_type": "V100",
        "submit_ts": submit,
        "start_ts": submit,
        "end_ts": submit + run,
        "duration_s": run,
        "state": "COMPLETED",
        "source": "pai-shaped",
    })


@dataclass(frozen=True)
class PaiResult:
    """One row of the PAI simulator's result log."""

    alloc: str
    avg_jct_s: float
    avg_wait_s: float
    makespan_s: float
    jobs: int


def read_pai_simulator_log(path: Path) -> dict[str, PaiResult]:
    """Parse ``pai_simulator_result_0228.log`` into ``{alloc policy: PaiResult}`` (first block)."""
    text = Path(path).read_text()
    rows = re.findall(r"^\((\w+)\s*,\s*(\w+)\),([\d.]+),([\d.]+),([\d.]+),(\d+),", text, flags=re.M)
    if not rows:
        raise InputError(f"{path}: no result rows like '(FIFO, LGF),7918.47,...' found")
    out: dict[str, PaiResult] = {}
    for alloc, _preempt, jct, wait, makespan, jobs, in rows:
        out.setdefault(alloc, PaiResult(alloc, float(jct), float(wait), float(makespan), int(jobs)))
    return out
