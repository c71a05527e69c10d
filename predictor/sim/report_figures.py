"""The figures of ``report.html``: PNGs (base64) of the JCT CDF, queue length and utilisation over
time, and each team's share of the GPU time per window (one colour per team in every policy's plot)."""

from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from predictor.sim.metrics import team_windows  # noqa: E402
from predictor.sim.progress import ENDED  # noqa: E402
from predictor.sim.record import ReplayRecord  # noqa: E402

__all__ = ["jct_cdf_png", "time_series_png", "team_shares_png", "plot_horizon", "MAX_TEAMS_PLOTTED"]

MAX_TEAMS_PLOTTED = 8


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _hours(x: np.ndarray) -> np.ndarray:
    return np.asarray(x) / 3600.0


def jct_cdf_png(records: list[ReplayRecord]) -> str:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for rec in records:
        done = np.isin(rec.status, ENDED)
        jct = np.sort(rec.end[done] - rec.jobs.submit_s[done])
        if len(jct):
            ax.step(np.maximum(jct, 1.0), np.arange(1, len(jct) + 1) / len(jct), where="post", label=rec.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT CDF per policy")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def plot_horizon(records: list[ReplayRecord], window_s: float) -> tuple[float, float]:
    """(end of the time axis, window) for the time plots: the axis stops when 99 % of the jobs of
    every policy have ended (one very long job would otherwise squash the picture), and the window
    grows so that a plot has at most ~300 points."""
    ends = [np.nanpercentile(r.end, 99) for r in records if np.isfinite(r.end).any()]
    horizon = float(max(ends)) if ends else max(r.end_time for r in records)
    horizon = max(horizon, window_s)
    return horizon, max(window_s, horizon / 300.0)


def _cut(rec: ReplayRecord, horizon: float, window_s: float):
    edges, received, demand = team_windows(rec, window_s)
    keep = max(int(np.ceil(horizon / window_s)), 1)
    return edges[: keep + 1], received[:, :keep], demand[:, :keep]


def time_series_png(records: list[ReplayRecord], window_s: float) -> str:
    horizon, window_s = plot_horizon(records, window_s)
    fig, (ax_q, ax_u) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for rec in records:
        # queue length: a step function sampled at every scheduling step; averaged per window
        edges, received, _ = _cut(rec, horizon, window_s)
        width = np.diff(edges)
        util = received.sum(axis=0) / (rec.total_gpus * width)
        t, q = rec.queue_t, rec.queue_len.astype("float64")
        if len(t):
            t_next = np.append(t[1:], rec.end_time)
            area = np.concatenate([[0.0], np.cumsum(q * (t_next - t))])
            cum_at = np.interp(edges, np.append(t, rec.end_time), area)
            ax_q.plot(_hours(edges[:-1]), np.diff(cum_at) / width, label=rec.policy, lw=1)
        ax_u.plot(_hours(edges[:-1]), util, label=rec.policy, lw=1)
    ax_q.set_ylabel("queued jobs (window mean)")
    ax_q.set_title(f"Queue length and GPU utilisation over time ({window_s / 3600:.3g} h windows; "
                   "until 99 % of jobs ended)")
    ax_u.set_ylabel("GPU utilisation")
    ax_u.set_xlabel("time since first submission (h)")
    ax_u.set_ylim(0, 1.05)
    for ax in (ax_q, ax_u):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig)


def _team_colors(records: list[ReplayRecord]) -> dict[str, tuple]:
    """One colour per team, the same in every policy's plot: the teams that used the most GPU time
    over all replays first (at most ``MAX_TEAMS_PLOTTED``; the others are "other teams")."""
    used: dict[str, float] = {}
    for rec in records:
        _, received, _ = team_windows(rec, max(rec.end_time, 1.0))
        for i, team in enumerate(rec.jobs.teams):
            used[team] = used.get(team, 0.0) + float(received[i].sum())
    top = sorted(used, key=lambda t: -used[t])[:MAX_TEAMS_PLOTTED]
    cmap = plt.get_cmap("tab10")
    return {team: cmap(i) for i, team in enumerate(top)}


def team_shares_png(records: list[ReplayRecord], window_s: float) -> str:
    horizon, window_s = plot_horizon(records, window_s)
    colors = _team_colors(records)
    n = len(records)
    cols = 2 if n > 2 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11 if cols == 2 else 9, 2.3 * rows + 1.0), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    for ax, rec in zip(axes.flat, records, strict=False):
        edges, received, _ = _cut(rec, horizon, window_s)
        total = received.sum(axis=0)
        share = np.divide(received, total, out=np.zeros_like(received), where=total > 0)
        index = {team: i for i, team in enumerate(rec.jobs.teams)}
        series = [share[index[t]] if t in index else np.zeros(share.shape[1]) for t in colors]
        rest = [i for t, i in index.items() if t not in colors]
        series.append(share[rest].sum(axis=0) if rest else np.zeros(share.shape[1]))
        ax.stackplot(_hours(edges[:-1]), *series, colors=[*colors.values(), "#bbbbbb"], step="post")
        ax.set_ylim(0, 1)
        ax.set_title(rec.policy, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("share")
    for i, ax in enumerate(axes.flat[:n]):
        if i + cols >= n:  # the lowest plot of its column
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("time since first submission (h)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in [*colors.values(), "#bbbbbb"]]
    labels = [*colors, "other teams"]
    spare = list(axes.flat[n:])
    for ax in spare:
        ax.set_axis_off()
    if spare:  # one legend for every plot, in the free slot
        spare[0].legend(handles, labels, loc="center", fontsize=9, frameon=False, title="team")
    else:
        fig.legend(handles, labels, loc="outside upper center", ncol=min(len(handles), 9), fontsize=8, frameon=False)
    return _png(fig)
