"""Duration on held-out periods: the issue's targets on each shared SWF log in three shapes.

For each log (KTH-SP2 1996, HPC2N 2002; real CPU HPC logs, ``../shared/data/swf``) and each variant

* ``as_is``: the log as read;
* ``no_limits_names``: ``time_limit_s`` and ``job_name`` removed (a log that records neither);
* ``one_user_dominant``: limits and names removed too, and only the busiest user's jobs plus a random
  sample of the others, so that the busiest user submits ``DOMINANT_SHARE`` of the jobs (the shape
  of the held-out log the model once lost on: no limits, no names, one user 56 %),

the jobs are split by submit time (first 70 % to train, with its latest 20 % as the calibration
slice; the later 30 % to test), a bundle is fitted (``models.fit.fit_bundle``) and evaluated
(``models.evaluate.evaluate_bundle``). ``targets`` compares the model with the best baseline on each
metric (mean abs log ratio at most 0.85x, within-2x at least +0.05, median AE no worse, coverage in
[0.75, 0.85], median p90/p10 no wider than the per-user empirical interval's). The empirical interval
is scored twice: as ``evaluate`` reports it (one conformal shift from the calibration slice) and
``at_model_coverage`` (its shift set on the test jobs themselves so that its coverage equals the
model's: the strictest comparison of widths, with an oracle advantage to the baseline).

Usage: ``python benchmarks/duration_checks.py [--logs kth hpc2n] [--variants ...] [--table]``.
Prints JSON (``--table``: also the markdown table of docs/benchmarks.md on stderr). CPU seconds are
``time.process_time`` of fit + evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from features.ingest import ingest, load_jobs
from models.evaluate import duration_rows, evaluate_bundle, predictions_for
from models.fit import fit_bundle

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PREDICTOR_SHARED_DATA", ROOT.parent / "shared" / "data"))
LOGS = {"kth": "KTH-SP2-1996-2.1-cln.swf.gz", "hpc2n": "HPC2N-2002-2.1-cln.swf.gz"}
VARIANTS = ("as_is", "no_limits_names", "one_user_dominant")
DOMINANT_SHARE = 0.56
LOWER_IS_BETTER = ("mean_abs_log_ratio", "median_ae")
POINT = ("mean_abs_log_ratio", "within_2x", "median_ae")


def make_variant(jobs: pd.DataFrame, variant: str, seed: int = 0) -> pd.DataFrame:
    """The log in one of ``VARIANTS``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    jobs = jobs.copy()
    if variant == "as_is":
        return jobs
    jobs["time_limit_s"] = np.nan
    jobs["job_name"] = None
    if variant == "one_user_dominant":
        top = jobs["user"].value_counts().index[0]
        is_top = (jobs["user"] == top).to_numpy()
        n_other = int(round(is_top.sum() * (1.0 - DOMINANT_SHARE) / DOMINANT_SHARE))
        others = np.flatnonzero(~is_top)
        keep = is_top.copy()
        keep[np.random.default_rng(seed).choice(others, size=min(n_other, len(others)), replace=False)] = True
        jobs = jobs.loc[keep].reset_index(drop=True)
    return jobs


def split(jobs: pd.DataFrame, share: float = 0.7) -> tuple[pd.DataFrame, pd.DataFrame]:
    ordered = jobs.sort_values("submit_ts", kind="stable").reset_index(drop=True)
    cut = int(round(len(ordered) * share))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


def targets(duration: dict, empirical_at_coverage: dict | None = None) -> dict:
    """The issue's duration targets against the best baseline on each metric."""
    model = duration["model"]
    base = {k: v for k, v in duration.items() if k not in ("model", "user_interval") and v.get("n")}
    best = {m: (min if m in LOWER_IS_BETTER else max)(v[m] for v in base.values()) for m in POINT}
    best_name = {m: (min if m in LOWER_IS_BETTER else max)(base, key=lambda k, m=m: base[k][m]) for m in POINT}
    emp = duration.get("user_interval", {})
    out = {
        "best_baseline": best, "best_baseline_name": best_name,
        "mean_abs_log_ratio_vs_best": model["mean_abs_log_ratio"] / best["mean_abs_log_ratio"],
        "within_2x_gain": model["within_2x"] - best["within_2x"],
        "median_ae_vs_best": model["median_ae"] / best["median_ae"],
        "coverage": model["coverage"],
        "median_width_ratio": model["median_width_ratio"],
        "empirical_median_width_ratio": emp.get("median_width_ratio"),
        "empirical_coverage": emp.get("coverage"),
    }
    met = {
        "mean_abs_log_ratio": out["mean_abs_log_ratio_vs_best"] <= 0.85,
        "within_2x": out["within_2x_gain"] >= 0.05,
        "median_ae": model["median_ae"] <= best["median_ae"],
        "coverage": 0.75 <= model["coverage"] <= 0.85,
    }
    if emp.get("n"):
        met["median_width"] = model["median_width_ratio"] <= emp["median_width_ratio"]
    if empirical_at_coverage:
        out["empirical_at_model_coverage"] = empirical_at_coverage
        met["median_width_at_same_coverage"] = model["median_width_ratio"] <= empirical_at_coverage["median_width_ratio"]
    out["met"] = met
    return out


def empirical_at_coverage(bundle, test: pd.DataFrame, coverage: float) -> dict:  # noqa: ANN001
    """The per-user empirical interval with its shift set on ``test`` to reach ``coverage`` exactly."""
    from features.history import HistoryState
    from models.bundle import duration_offset

    _, state = predictions_for(bundle, test)
    rows = duration_rows(test)
    sub = test.loc[rows]
    X = bundle.builder.transform_array(sub, HistoryState({k: v[rows] for k, v in state.values.items()}))
    emp = bundle.duration.empirical_interval_log(X) + bundle.duration.empirical_shift_  # undo the cal shift
    emp[:, 1] -= 2.0 * bundle.duration.empirical_shift_
    if not np.isfinite(emp).all():
        return {}
    y = np.log(np.maximum(sub["duration_s"].to_numpy(dtype=float), 1.0)) - duration_offset(sub, bundle.global_median_s)
    shift = float(np.quantile(np.maximum(emp[:, 0] - y, y - emp[:, 1]), coverage))
    lo, hi = np.exp(emp[:, 0] - shift), np.exp(emp[:, 1] + shift)
    scale = np.exp(duration_offset(sub, bundle.global_median_s))
    lo, hi = np.maximum(lo * scale, 1.0), np.maximum(hi * scale, 1.0)
    y_s = np.maximum(sub["duration_s"].to_numpy(dtype=float), 1.0)
    return {"coverage": float(np.mean((lo <= y_s) & (y_s <= hi))), "median_width_ratio": float(np.median(hi / lo))}


def check(jobs: pd.DataFrame, variant: str) -> dict:
    data = make_variant(jobs, variant)
    train, test = split(data)
    started = time.process_time()
    bundle = fit_bundle(train)
    report = evaluate_bundle(bundle, test)["duration"]
    cpu = time.process_time() - started
    at_cov = empirical_at_coverage(bundle, test, report["model"]["coverage"])
    top_share = float(data["user"].value_counts(normalize=True).iloc[0])
    plan = bundle.duration.plan_
    return {"n_train": len(train), "n_test": len(test), "top_user_share": round(top_share, 3),
            "cpu_seconds": round(cpu, 1), "anchor": list(bundle.duration.design_.chain) if bundle.duration.design_ else None,
            "segments": {str(k): {"rows": v["rows"], "point": v["point"], "interval": v["interval"]}
                         for k, v in (plan.report.items() if plan else [])},
            "duration": report, "targets": targets(report, at_cov)}


def table(results: dict) -> str:
    """Markdown rows: log, variant, predictor, MALR, within-2x, median AE, coverage, median width ratio."""
    lines = ["| log | variant | predictor | mean abs log ratio | within 2x | median AE s | coverage | median p90/p10 |",
             "|---|---|---|---|---|---|---|---|"]
    for log, variants in results.items():
        for variant, r in variants.items():
            m, t = r["duration"]["model"], r["targets"]
            b, names = t["best_baseline"], t["best_baseline_name"]
            emp = t.get("empirical_at_model_coverage") or {}
            lines.append(f"| {log} | {variant} | model | {m['mean_abs_log_ratio']:.3f} ({t['mean_abs_log_ratio_vs_best']:.2f}x) "
                         f"| {m['within_2x']:.3f} ({t['within_2x_gain']:+.3f}) | {m['median_ae']:.0f} | {m['coverage']:.3f} "
                         f"| {m['median_width_ratio']:.1f} |")
            lines.append(f"| {log} | {variant} | best baseline | {b['mean_abs_log_ratio']:.3f} ({names['mean_abs_log_ratio']}) "
                         f"| {b['within_2x']:.3f} ({names['within_2x']}) | {b['median_ae']:.0f} ({names['median_ae']}) "
                         f"| {emp.get('coverage', float('nan')):.3f} | {emp.get('median_width_ratio', float('nan')):.1f} |")
    return "\n".join(lines)


def ingested_logs(logs: list[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """Each shared SWF log named (keys of ``LOGS``) ingested as a user would, with its jobs table."""
    with tempfile.TemporaryDirectory() as tmp:
        for log in logs:
            out = Path(tmp) / f"{log}.parquet"
            ingest("swf", [SHARED / "swf" / LOGS[log]], out)
            yield log, load_jobs(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="*", default=list(LOGS), choices=list(LOGS))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--table", action="store_true", help="also print the markdown table on stderr")
    args = parser.parse_args()
    if not (SHARED / "swf").is_dir():
        print(f"shared data folder missing: {SHARED / 'swf'}", file=sys.stderr)
        return 2
    results: dict = {}
    for log, jobs in ingested_logs(args.logs):
        results[log] = {}
        for variant in args.variants:
            results[log][variant] = check(jobs, variant)
            print(f"{log} {variant} done", file=sys.stderr, flush=True)
    print(json.dumps(results, indent=2, default=float))
    if args.table:
        print(table(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
