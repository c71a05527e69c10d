"""Compare a job table's summary statistics with a published cluster's (AcmeTrace, NSDI'24).

The statistics follow AcmeTrace's definitions (``cluster_summary.csv``): over GPU jobs, mean and
median run time and queue time (seconds), mean and median GPUs per job, and the shares of jobs that
completed, were cancelled, or failed (every other end state: FAILED, TIMEOUT, OUT_OF_MEMORY,
NODE_FAIL, PREEMPTED). Jobs still pending or running at the end of the trace (censored) are left out
of the run-time, queue-time and state statistics, since their outcome is unknown; GPUs per job use
every GPU job.

The published row is read from ``cluster_summary.csv`` when it exists (by default
``../shared/data/stats/cluster_summary.csv`` next to the project, or under ``$PREDICTOR_SHARED_DATA``);
otherwise the copy in :data:`features.synth.profiles.PUBLISHED` is used and the report says so.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from features.errors import InputError
from features.synth.profiles import PUBLISHED

__all__ = ["DEFAULT_SUMMARY_PATH", "TOLERANCES", "summarize", "published_stats", "calibration_report"]

_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SUMMARY_PATH = Path(os.environ.get("PREDICTOR_SHARED_DATA", _ROOT.parent / "shared" / "data")) \
    / "stats" / "cluster_summary.csv"

#: metric -> (kind, tolerance). "relative": |ours - published| / published; "absolute": |ours - published|.
TOLERANCES: dict[str, tuple[str, float]] = {
    "avg_run_time_gpu": ("relative", 0.25),
    "med_run_time_gpu": ("relative", 0.25),
    "avg_gpu_num": ("relative", 0.25),
    "med_gpu_num": ("relative", 0.25),
    "complete_rate_gpu": ("absolute", 0.05),
    "cancel_rate_gpu": ("absolute", 0.05),
    "fail_rate_gpu": ("absolute", 0.05),
    "avg_que_time_gpu": ("relative", 0.5),
    "med_que_time_gpu": ("relative", 0.5),
}


def summarize(df: pd.DataFrame) -> dict[str, float]:
    """AcmeTrace-style summary statistics of a canonical job table (see module docstring).

    Parameters
    ----------
    df : DataFrame
        Canonical job table (``num_gpus``, ``gpu_milli``, ``state``, ``censored``, ``duration_s``,
        ``submit_ts``, ``start_ts``).

    Returns
    -------
    dict
        One value per key of :data:`TOLERANCES` plus ``gpu_job_num`` and ``ended_gpu_job_num``;
        NaN where the table has no rows to compute it from.
    """
    missing = [c for c in ("num_gpus", "state", "censored", "duration_s", "submit_ts", "start_ts") if c not in df]
    if missing:
        raise InputError(f"cannot summarise the job table: missing column(s) {', '.join(missing)}")
    milli = df["gpu_milli"].fillna(1000.0) if "gpu_milli" in df else 1000.0
    gpus = (df["num_gpus"] * milli / 1000.0).to_numpy(dtype=float)
    gpu_jobs = df.loc[np.nan_to_num(gpus) > 0]
    g = gpus[np.nan_to_num(gpus) > 0]
    ended = gpu_jobs.loc[~gpu_jobs["censored"].astype(bool)]
    run = ended["duration_s"].to_numpy(dtype=float)
    queue = (ended["start_ts"] - ended["submit_ts"]).to_numpy(dtype=float)
    state = ended["state"].astype(str)

    def share(mask) -> float:
        return float(np.mean(mask)) if len(state) else math.nan

    def stat(fn, values) -> float:
        values = values[~np.isnan(values)]
        return float(fn(values)) if len(values) else math.nan

    return {
        "gpu_job_num": float(len(gpu_jobs)),
        "ended_gpu_job_num": float(len(ended)),
        "avg_run_time_gpu": stat(np.mean, run),
        "med_run_time_gpu": stat(np.median, run),
        "avg_que_time_gpu": stat(np.mean, queue),
        "med_que_time_gpu": stat(np.median, queue),
        "avg_gpu_num": stat(np.mean, g),
        "med_gpu_num": stat(np.median, g),
        "complete_rate_gpu": share(state == "COMPLETED"),
        "cancel_rate_gpu": share(state == "CANCELLED"),
        "fail_rate_gpu": share(~state.isin(["COMPLETED", "CANCELLED"])),
    }


def published_stats(cluster: str, path: str | Path | None = DEFAULT_SUMMARY_PATH) -> tuple[dict[str, float | None], str]:
    """The published statistics of ``cluster`` and where they came from.

    Reads ``path`` (AcmeTrace's ``cluster_summary.csv``) when it exists, else the bundled copy.

    Returns
    -------
    stats : dict
        Metric -> value (None where the published row is empty).
    source : str
        The file read, or a note that the bundled constants were used.
    """
    if path is not None and Path(path).is_file():
        with open(path, newline="", encoding="utf-8") as fh:
            rows = {r.get("id", "").strip().lower(): r for r in csv.DictReader(fh)}
        row = rows.get(cluster.strip().lower())
        if row is None:
            raise InputError(f"{path}: no row for cluster {cluster!r}; rows: {', '.join(r['id'] for r in rows.values())}")
        out: dict[str, float | None] = {}
        for key in (*TOLERANCES, "gpu_job_num"):
            raw = (row.get(key) or "").strip()
            try:
                out[key] = float(raw) if raw else None
            except ValueError as exc:
                raise InputError(f"{path}: cluster {cluster!r}: column {key} is not a number: {raw!r}") from exc
        return out, str(path)
    by_lower = {k.lower(): k for k in PUBLISHED}
    key = by_lower.get(cluster.strip().lower())
    if key is None:
        raise InputError(f"unknown published cluster {cluster!r}; choose one of: {', '.join(PUBLISHED)}")
    return dict(PUBLISHED[key]), "bundled constants (AcmeTrace data/cluster_summary.csv, NSDI'24)"


def calibration_report(df: pd.DataFrame, cluster: str, path: str | Path | None = DEFAULT_SUMMARY_PATH) -> dict:
    """Compare ``df``'s summary with the published row of ``cluster``.

    Parameters
    ----------
    df : DataFrame
        Canonical job table (e.g. from :func:`features.synth.generate`).
    cluster : str
        Row id in ``cluster_summary.csv``: Seren, Kalos, Philly, Helios or PAI (case-insensitive).
    path : str or Path, optional
        ``cluster_summary.csv`` to read; when absent (or None) the bundled copy is used.

    Returns
    -------
    dict
        ``cluster``, ``source`` (where the published numbers came from), ``jobs`` and ``ended_jobs``
        (GPU jobs summarised), ``metrics`` (a list of dicts: ``name``, ``ours``, ``published``,
        ``diff`` (relative or absolute, per ``kind``), ``kind``, ``tolerance``, ``ok``; ``ok`` is
        None where the published value is missing) and ``ok`` (every comparable metric within tolerance).
    """
    published, source = published_stats(cluster, path)
    ours = summarize(df)
    metrics = []
    for name, (kind, tol) in TOLERANCES.items():
        pub, mine = published.get(name), ours[name]
        if pub is None or math.isnan(mine):
            diff, ok = None, None
        elif kind == "relative":
            diff = (mine - pub) / pub if pub else (0.0 if mine == 0 else math.inf)
            ok = abs(diff) <= tol
        else:
            diff = mine - pub
            ok = abs(diff) <= tol
        metrics.append({"name": name, "ours": mine, "published": pub, "diff": diff, "kind": kind,
                        "tolerance": tol, "ok": ok})
    comparable = [m["ok"] for m in metrics if m["ok"] is not None]
    return {"cluster": cluster, "source": source, "jobs": int(ours["gpu_job_num"]),
            "ended_jobs": int(ours["ended_gpu_job_num"]), "metrics": metrics,
            "ok": bool(comparable) and all(comparable)}
