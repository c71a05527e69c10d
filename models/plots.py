"""Review plots of a training run (matplotlib, Agg backend): each function returns a Figure."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["predicted_vs_actual", "coverage_over_time", "error_by_group", "feature_importance", "memory_vs_actual"]

_MAX_POINTS = 5000


def _sample(n: int, seed: int = 0) -> np.ndarray:
    if n <= _MAX_POINTS:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, _MAX_POINTS, replace=False))


def predicted_vs_actual(actual: np.ndarray, predicted: dict[str, np.ndarray], unit: str = "s",
                        title: str = "Duration: predicted p50 vs actual") -> Figure:
    """Log-log scatter of predictions against actual values, one colour per predictor, with 2x band."""
    fig, ax = plt.subplots(figsize=(6.5, 6))
    idx = _sample(len(actual))
    a = np.maximum(actual[idx], 1.0)
    for name, pred in predicted.items():
        ax.scatter(a, np.maximum(pred[idx], 1.0), s=4, alpha=0.35, label=name)
    lo, hi = float(a.min()), float(a.max())
    line = np.array([lo, hi])
    ax.plot(line, line, "k-", lw=1, label="exact")
    ax.plot(line, 2 * line, "k:", lw=0.8, label="2x band")
    ax.plot(line, line / 2, "k:", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel=f"actual ({unit})", ylabel=f"predicted ({unit})", title=title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def coverage_over_time(submit_ts: np.ndarray, lower: np.ndarray, upper: np.ndarray, actual: np.ndarray,
                       target: float = 0.8, bins: int = 20) -> Figure:
    """Share of held-out jobs inside their p10-p90 interval, in equal-count bins of submit time."""
    order = np.argsort(submit_ts)
    inside = ((lower <= actual) & (actual <= upper))[order]
    t = submit_ts[order]
    groups = np.array_split(np.arange(len(t)), max(1, min(bins, len(t))))
    centers = [(t[g].mean() - t[0]) / 86400.0 for g in groups if len(g)]
    cover = [inside[g].mean() for g in groups if len(g)]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(centers, cover, "o-", label="p10-p90 coverage")
    ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:.0%}")
    ax.set(ylim=(0, 1), xlabel="days since the start of the held-out period", ylabel="coverage",
           title="Interval coverage over time (held-out jobs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def error_by_group(groups: np.ndarray, errors: dict[str, np.ndarray], title: str, top: int = 15) -> Figure:
    """Mean |log(pred/actual)| per group (the ``top`` largest groups), one bar per predictor."""
    labels, counts = np.unique(np.asarray(groups, dtype=str), return_counts=True)
    keep = labels[np.argsort(-counts)][:top]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(keep) + 3), 4))
    width = 0.8 / max(1, len(errors))
    x = np.arange(len(keep))
    g = np.asarray(groups, dtype=str)
    for i, (name, err) in enumerate(errors.items()):
        ax.bar(x + i * width, [err[g == k].mean() for k in keep], width, label=name)
    ax.set_xticks(x + width * (len(errors) - 1) / 2, keep, rotation=45, ha="right", fontsize=8)
    ax.set(ylabel="mean |log(predicted / actual)|", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def feature_importance(names: Sequence[str], gains: np.ndarray, title: str, top: int = 25) -> Figure:
    """Horizontal bars of the ``top`` features by total split gain."""
    order = np.argsort(gains)[::-1][:top][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(order) + 1.5))
    ax.barh([names[i] for i in order], np.asarray(gains)[order])
    ax.set(xlabel="total gain", title=title)
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    return fig


def memory_vs_actual(actual: np.ndarray, point: np.ndarray, upper: np.ndarray, analytic: np.ndarray) -> Figure:
    """Peak memory per GPU: analytic, corrected estimate and reserved bound against the measured peak."""
    return predicted_vs_actual(actual, {"analytic": analytic, "model": point, "upper bound": upper}, unit="MiB",
                               title="Peak GPU memory per GPU: predicted vs measured")
