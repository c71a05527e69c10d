"""Fit the analytic memory estimate's constants on measured peaks, and validate by leaving sources out.

``fit_calibration(rows)`` fits :data:`models.memory_calibration.FITTED` (six physically meaningful
constants, nothing per model or per source) on rows with a measured ``peak_vram_mib``:

1. Resolve each row's descriptors (``models.memory_analytic.resolve_jobs``) with the current
   constants; what a row leaves unknown is assumed exactly as at prediction time.
2. Minimise the weighted soft-L1 loss of ``log(point / measured)`` over the log constants, plus a
   ridge pull towards the physical priors (``PRIOR_WEIGHT``), so that a constant the data say
   little about stays near its physics. Each row weighs ``1 / sqrt(rows of its source)``: a large
   table cannot outvote the others. Steps 1-2 run twice (the resolution depends on the constants
   only through what fits a GPU).
3. The upper bound widens the upper scenario's states, activations and logits by three margins
   (``models.memory_calibration``): the triple, on a grid, with the least mean over-reservation that
   leaves at most ``upper_miss_rate`` of the rows above the bound, where each row's terms come from
   constants fitted without its source (the bound is for sources not yet seen).

``leave_one_source_out(rows)`` fits on all sources but one, predicts the one left out, for each
source in turn, and reports per-source and pooled metrics (``models.metrics``) of the held-out
predictions: the figures to quote for a new cluster's jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from features.errors import InputError
from features.job_keys import numeric_column
from models.memory_analytic import cap_upper, resolve_jobs, upper_bound
from models.memory_calibration import CALIBRATION_PATH, FITTED, MemoryCalibration, save_calibration
from models.memory_measured import read_measured_folder
from models.metrics import point_metrics, reservation_metrics

__all__ = ["PRIOR_WEIGHT", "SOFT_L1_SCALE", "labelled_rows", "fit_calibration", "leave_one_source_out", "measured_view",
           "memory_targets", "MEMORY_TARGETS", "SOURCE_LICENSES", "calibrate_from_tables", "main"]

PRIOR_WEIGHT = 0.02
SOFT_L1_SCALE = 0.15
#: The issue's targets on held-out sources: within 50 % for at least 85 % of rows, measured above the
#: upper bound for at most 10 %, mean over-reservation of the upper bound at most 50 %.
MEMORY_TARGETS: Mapping[str, tuple[str, float]] = {
    "within_50pct": (">=", 0.85), "underestimate_rate": ("<=", 0.10), "mean_overreserve_ratio": ("<=", 0.50)}


def labelled_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    """Rows that can calibrate: a measured peak (``measured`` true where the column exists) and a size."""
    keep = (numeric_column(jobs, "peak_vram_mib") > 0) & (numeric_column(jobs, "model_params") > 0)
    if "measured" in jobs.columns:
        keep &= jobs["measured"].fillna(False).to_numpy(dtype=bool)
    return jobs.loc[keep].reset_index(drop=True)


def _weights(sources: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(sources.astype(str), return_inverse=True, return_counts=True)
    w = 1.0 / np.sqrt(counts[inverse])
    return w / w.mean()


def _metric(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: does the peak include the allocator's reserve, and the CUDA context (``peak_metric``)?"""
    metric = rows["peak_metric"].astype(str).to_numpy() if "peak_metric" in rows.columns else \
        np.full(len(rows), "device")
    return metric != "allocated", ~np.isin(metric, ("allocated", "reserved"))


def _as_measured(terms: Mapping[str, np.ndarray], allocator: float, logit_reserve: float, with_reserve: np.ndarray,
                 with_context: np.ndarray) -> np.ndarray:
    """The estimate as the row's peak metric sees it (the prediction itself is the device's view)."""
    dynamic = terms["states"] + terms["activations"]
    reserved = allocator * dynamic + logit_reserve * terms["logits"]
    return np.where(with_reserve, reserved, dynamic) + np.where(with_context, terms["overhead"], 0.0)


def _fit_constants(rows: pd.DataFrame, start: MemoryCalibration, gpu_memory_mib: Mapping[str, float] | None,
                   prior: MemoryCalibration) -> MemoryCalibration:
    actual = numeric_column(rows, "peak_vram_mib")
    reserve, context = _metric(rows)
    w = _weights(rows["source"].to_numpy(dtype=object) if "source" in rows.columns else np.zeros(len(rows)))
    log_prior = np.log([getattr(prior, k) for k in FITTED])
    cal = start
    for _round in range(2):
        resolved = resolve_jobs(rows, gpu_memory_mib, calibration=cal)

        def loss(theta: np.ndarray, resolved=resolved, cal=cal) -> float:
            trial = cal.with_fitted(dict(zip(FITTED, np.exp(theta), strict=True)))
            r = np.log(_as_measured(resolved.terms("point", trial), trial.allocator, trial.logit_reserve, reserve,
                                    context) / actual)
            r = r / SOFT_L1_SCALE
            return float(np.sum(w * 2.0 * (np.sqrt(1.0 + r * r) - 1.0)) * SOFT_L1_SCALE**2
                         + PRIOR_WEIGHT * len(actual) * np.sum((theta - log_prior) ** 2))

        x0 = np.log([getattr(cal, k) for k in FITTED])
        best = minimize(loss, x0, method="Powell", options={"xtol": 1e-3, "ftol": 1e-6, "maxfev": 4000})
        cal = cal.with_fitted(dict(zip(FITTED, (float(v) for v in np.exp(best.x)), strict=True)))
    return cal


def _margin_terms(resolved, cal: MemoryCalibration, rows: pd.DataFrame) -> list[tuple[np.ndarray, ...]]:
    """(states, activations without logits, logits, overhead) of the upper and point scenarios, the
    overhead only where the row's peak metric sees it."""
    _, context = _metric(rows)
    out = []
    for which in ("upper", "point"):
        t = resolved.terms(which, cal)
        out.append((t["states"], t["activations"] - t["logits"], t["logits"], np.where(context, t["overhead"], 0.0)))
    return out


def _fit_margins(parts: list[tuple[np.ndarray, ...]], allocator: np.ndarray, logit_reserve: np.ndarray,
                 actual: np.ndarray, miss_rate: float, point: np.ndarray, cap: np.ndarray) -> tuple[float, float, float]:
    """(states, activations, logits) log margins: least mean over-reservation, at most ``miss_rate`` misses."""
    grid = np.round(np.arange(0.0, 1.51, 0.05), 3)
    e = np.exp(grid)
    best, best_over = (float(grid[-1]),) * 3, np.inf
    for i, ms in enumerate(e):
        for j, ma in enumerate(e):
            base = [allocator * (st * ms + a * ma) + o for st, a, _, o in parts]
            for k, ml in enumerate(e):
                u = cap_upper(np.maximum(base[0] + (allocator + logit_reserve) * parts[0][2] * ml,
                                         base[1] + (allocator + logit_reserve) * parts[1][2] * ml), point, cap)
                if np.mean(actual > u) > miss_rate:
                    continue
                over = float(np.mean(np.maximum(u - actual, 0.0) / actual))
                if over < best_over:
                    best, best_over = (float(grid[i]), float(grid[j]), float(grid[k])), over
                break  # a larger logit margin only adds over-reservation
    return best


def fit_calibration(rows: pd.DataFrame, *, start: MemoryCalibration | None = None,
                    gpu_memory_mib: Mapping[str, float] | None = None,
                    miss_rate: float | None = None, cross_validate: bool = True) -> MemoryCalibration:
    """Constants fitted on labelled rows (module docstring), the upper margin from their residuals.

    Parameters
    ----------
    rows : DataFrame of shape (n_rows, n_columns)
        Canonical rows with ``peak_vram_mib`` (and ``source``, ``measured`` where known); rows that
        cannot calibrate are left out (``labelled_rows``).
    start : MemoryCalibration, optional
        Initial values and priors; default ``MemoryCalibration()`` (the physical priors).
    miss_rate : float, optional
        Share of fitted rows the upper bound may leave above it; default ``start.upper_miss_rate``.
    cross_validate : bool, default True
        Choose the margins on held-out residuals (each source predicted by constants fitted without
        it; needs three sources) rather than in-sample ones.

    Raises
    ------
    InputError
        With fewer than 20 labelled rows.
    """
    prior = start or MemoryCalibration()
    rows = labelled_rows(rows)
    if len(rows) < 20:
        raise InputError(f"need at least 20 measured peaks with a model size to calibrate, got {len(rows)}")
    cal = _fit_constants(rows, prior, gpu_memory_mib, prior)
    q = prior.upper_miss_rate if miss_rate is None else miss_rate
    sources = rows["source"].astype(str).to_numpy() if "source" in rows.columns else np.zeros(len(rows), dtype=str)
    names = np.unique(sources)
    if cross_validate and len(names) >= 3:
        # margins from held-out residuals: each source's terms under constants fitted without it
        parts: list[list[np.ndarray]] = [[np.empty(len(rows)) for _ in range(4)] for _ in range(2)]
        allocator, logit_reserve = np.empty(len(rows)), np.empty(len(rows))
        point, cap = np.empty(len(rows)), np.empty(len(rows))
        for name in names:
            held = sources == name
            inner = _fit_constants(rows.loc[~held], prior, gpu_memory_mib, prior)
            resolved = resolve_jobs(rows.loc[held], gpu_memory_mib, calibration=inner)
            terms = _margin_terms(resolved, inner, rows.loc[held])
            point[held], cap[held] = resolved.terms("point", inner)["total"], resolved.cap_mib
            for w in range(2):
                for c in range(4):
                    parts[w][c][held] = terms[w][c]
            allocator[held], logit_reserve[held] = inner.allocator, inner.logit_reserve
        split = [tuple(p) for p in parts]
    else:
        resolved = resolve_jobs(rows, gpu_memory_mib, calibration=cal)
        split = _margin_terms(resolved, cal, rows)
        point, cap = resolved.terms("point", cal)["total"], resolved.cap_mib
        allocator, logit_reserve = np.full(len(rows), cal.allocator), np.full(len(rows), cal.logit_reserve)
    reserve = _metric(rows)[0]
    allocator, logit_reserve = np.where(reserve, allocator, 1.0), np.where(reserve, logit_reserve, 0.0)
    margins = _fit_margins(split, allocator, logit_reserve, numeric_column(rows, "peak_vram_mib"), q, point, cap)
    return cal.with_fitted({"upper_margins": margins, "upper_miss_rate": q})


def measured_view(rows: pd.DataFrame, cal: MemoryCalibration,
                  gpu_memory_mib: Mapping[str, float] | None = None) -> dict[str, np.ndarray]:
    """Point, upper bound and assumptions of labelled rows as each row's ``peak_metric`` sees them.

    The device's view (what a scheduler reserves) adds the allocator's reserve and the CUDA context;
    a peak measured as torch's allocated (or reserved) memory is compared without them.
    """
    resolved = resolve_jobs(rows, gpu_memory_mib, calibration=cal)
    reserve, context = _metric(rows)
    point, high = resolved.terms("point", cal), resolved.terms("upper", cal)
    upper = np.maximum.reduce([upper_bound(t, cal, with_reserve=reserve, with_context=context) for t in (point, high)])
    upper = cap_upper(upper, point["total"], resolved.cap_mib)
    return {"total": _as_measured(point, cal.allocator, cal.logit_reserve, reserve, context), "upper": upper, "assumed": resolved.assumed}


def memory_targets(metrics: Mapping[str, float]) -> dict[str, bool]:
    """Whether pooled metrics meet :data:`MEMORY_TARGETS`."""
    out = {}
    for name, (op, bound) in MEMORY_TARGETS.items():
        value = metrics.get(name)
        out[name] = value is not None and (value >= bound if op == ">=" else value <= bound)
    return out


def leave_one_source_out(jobs: pd.DataFrame, *, start: MemoryCalibration | None = None,
                         gpu_memory_mib: Mapping[str, float] | None = None, sources: list[str] | None = None,
                         blank_for_prediction: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """Fit without each source, predict it; per-source table, pooled metrics and the predictions.

    Parameters
    ----------
    jobs : DataFrame
        Rows with ``source``; only labelled rows are scored (``labelled_rows``).
    sources : list of str, optional
        Every source to report (those without labelled rows get a row saying so); default the
        sources present.
    blank_for_prediction : tuple of str
        Columns emptied in the held-out rows before predicting them (what a log that records
        fewer descriptors gives), the fit still seeing them in the other sources.

    Returns
    -------
    table : DataFrame
        One row per source: ``rows`` scored, ``within_50pct``, ``underestimate_rate``,
        ``mean_overreserve_ratio``, ``median_ratio`` (point / measured) and the prior's
        ``within_50pct`` (the unfitted physical constants) for comparison.
    pooled : dict
        The same metrics over every held-out prediction, and ``targets_met``.
    predictions : DataFrame
        ``source``, ``job_id``, ``measured_mib``, ``point_mib``, ``upper_mib``, ``assumed``.
    """
    rows = labelled_rows(jobs)
    names = sources or sorted(set(jobs["source"].astype(str)))
    prior = start or MemoryCalibration()
    out, table = [], []
    for name in names:
        held = (rows["source"].astype(str) == name).to_numpy()
        if not held.any():
            table.append({"source": name, "rows": 0, "note": "no measured rows with a model size"})
            continue
        cal = fit_calibration(rows.loc[~held], start=prior, gpu_memory_mib=gpu_memory_mib)
        test = rows.loc[held].reset_index(drop=True)
        for column in blank_for_prediction:
            if column in test.columns:
                test[column] = np.nan if pd.api.types.is_float_dtype(test[column]) else None
        parts = measured_view(test, cal, gpu_memory_mib)
        base = measured_view(test, prior, gpu_memory_mib)
        actual = numeric_column(test, "peak_vram_mib")
        m = {**point_metrics(parts["total"], actual), **reservation_metrics(parts["upper"], actual)}
        table.append({"source": name, "rows": int(held.sum()), "within_50pct": m["within_50pct"],
                      "underestimate_rate": m["underestimate_rate"],
                      "mean_overreserve_ratio": m["mean_overreserve_ratio"],
                      "median_ratio": float(np.median(parts["total"] / actual)),
                      "prior_within_50pct": point_metrics(base["total"], actual)["within_50pct"],
                      "constants": {k: round(float(v), 3) for k, v in asdict(cal).items() if k in FITTED}})
        out.append(pd.DataFrame({"source": name, "job_id": test["job_id"].to_numpy(), "measured_mib": actual,
                                 "point_mib": parts["total"], "upper_mib": parts["upper"],
                                 "assumed": parts["assumed"]}))
    preds = pd.concat(out, ignore_index=True) if out else pd.DataFrame()
    pooled: dict = {}
    if len(preds):
        a = preds["measured_mib"].to_numpy()
        pooled = {**point_metrics(preds["point_mib"].to_numpy(), a),
                  **reservation_metrics(preds["upper_mib"].to_numpy(), a)}
        pooled["targets_met"] = memory_targets(pooled)
    return pd.DataFrame(table), pooled, preds


#: License of each public table (its LICENSE file, per ``gpu-memory/measured/README.md``).
SOURCE_LICENSES: Mapping[str, str] = {
    "torchtune": "BSD-3-Clause", "torchtitan": "BSD-3-Clause", "unsloth": "Apache-2.0",
    "peft_method_comparison": "Apache-2.0", "peft_docs": "Apache-2.0", "llamafactory": "Apache-2.0",
    "qwen": "Apache-2.0", "axolotl": "Apache-2.0", "carma": "Apache-2.0", "transformers_docs": "Apache-2.0",
    "fsdp_qlora": "Apache-2.0", "ms_swift": "Apache-2.0",
}


def calibrate_from_tables(folder: Path) -> MemoryCalibration:
    """Fit on a folder of measured-peak tables (``models.memory_measured``), with provenance and the
    leave-one-source-out figures recorded in the result."""
    jobs = read_measured_folder(folder)
    names = sorted(set(jobs["source"].astype(str)))
    table, pooled, _ = leave_one_source_out(jobs, sources=names)
    cal = fit_calibration(jobs)
    rows = labelled_rows(jobs)
    sources = []
    for name in names:
        part = jobs.loc[jobs["source"].astype(str) == name]
        sources.append({"source": name, "repository": ", ".join(sorted(set(part["source_repo"].dropna().astype(str))))
                        if "source_repo" in part else "", "license": SOURCE_LICENSES.get(name, "see the table's README"),
                        "rows": int(len(part)), "rows_used": int((rows["source"].astype(str) == name).sum())})
    validation = {"leave_one_source_out": pooled,
                  "per_source": table.drop(columns=["constants"], errors="ignore").to_dict(orient="records")}
    return cal.with_fitted({"sources": sources, "validation": json.loads(json.dumps(validation, default=_plain))})


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return str(value)


def main(argv: list[str] | None = None) -> int:
    """``python -m models.memory_fitting TABLES_FOLDER [--out PATH]``: refit the shipped calibration."""
    parser = argparse.ArgumentParser(description="Fit the memory estimate's constants on measured-peak tables.")
    parser.add_argument("folder", type=Path, help="folder of measured-peak CSVs (one per source)")
    parser.add_argument("--out", type=Path, default=CALIBRATION_PATH, help="calibration file to write")
    args = parser.parse_args(argv)
    try:
        cal = calibrate_from_tables(args.folder)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    save_calibration(cal, args.out)
    print(json.dumps(cal.validation["leave_one_source_out"], indent=2, default=_plain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
