"""``report.json`` and ``report.html``: the policy x metric table and the plots a person reads.

``report.json`` is ``{"policies": {NAME: {<METRIC_KEYS>}}, "extra": {NAME: {...}}, "run": {...}}``:
``policies`` holds exactly the issue's metric set per policy, ``extra`` the additional figures
(per-team share against entitlement, out-of-memory crashes, replay speed...), ``run`` what was
replayed on what (input, split, inventory, assumptions). NaN is written as ``null``.

``report.html`` is one self-contained file (figures are PNGs embedded as base64; no network):
the metric table, the JCT CDF per policy, queue length and GPU utilisation over time, each team's
share of the GPUs over time, and per-team share against entitlement.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from predictor.sim.metrics import METRIC_KEYS, MetricsConfig, policy_metrics, team_windows  # noqa: E402
from predictor.sim.progress import ENDED  # noqa: E402
from predictor.sim.record import ReplayRecord  # noqa: E402

__all__ = ["build_report", "write_report", "render_html"]

MAX_TEAMS_PLOTTED = 8


def _clean(value):
    """JSON-safe copy: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_report(records: list[ReplayRecord], run: Mapping, config: MetricsConfig | None = None) -> dict:
    """The ``report.json`` document for a list of replays (one per policy)."""
    policies: dict[str, dict] = {}
    extra: dict[str, dict] = {}
    for rec in records:
        metrics, more = policy_metrics(rec, config)
        policies[rec.policy] = metrics
        extra[rec.policy] = more
    if "fifo" in extra:  # crashes avoided by sizing, measured against the status quo order
        base = extra["fifo"]["oom_failures"]
        for more in extra.values():
            more["oom_avoided_vs_fifo"] = base - more["oom_failures"]
    return _clean({"policies": policies, "extra": extra, "run": dict(run)})


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(records: list[ReplayRecord], run: Mapping, out_dir: Path,
                 config: MetricsConfig | None = None) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.html`` and ``jobs.parquet`` (one row per replayed job and policy,
    ``ReplayRecord.jobs_frame``) into ``out_dir`` (created if needed), each atomically.

    Returns
    -------
    (json_path, html_path)
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = build_report(records, run, config)
    json_path, html_path = out_dir / "report.json", out_dir / "report.html"
    page = render_html(doc, records, config or MetricsConfig())
    _atomic_write(json_path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    _atomic_write(html_path, page.encode())
    table = pd.concat([r.jobs_frame() for r in records], ignore_index=True) if records else pd.DataFrame()
    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    _atomic_write(out_dir / "jobs.parquet", buf.getvalue())
    return json_path, html_path


# -- figures ---------------------------------------------------------------------------------------
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _hours(x: np.ndarray) -> np.ndarray:
    return np.asarray(x) / 3600.0


def _jct_cdf(records: list[ReplayRecord]) -> str:
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


def _time_series(records: list[ReplayRecord], window_s: float) -> str:
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


def _team_shares(records: list[ReplayRecord], window_s: float) -> str:
    horizon, window_s = plot_horizon(records, window_s)
    n = len(records)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.4 * n + 0.6), sharex=True, squeeze=False)
    for ax, rec in zip(axes[:, 0], records, strict=True):
        edges, received, _ = _cut(rec, horizon, window_s)
        total = received.sum(axis=0)
        share = np.divide(received, total, out=np.zeros_like(received), where=total > 0)
        top = np.argsort(-received.sum(axis=1))[:MAX_TEAMS_PLOTTED]
        series = [share[i] for i in top]
        labels = [rec.jobs.teams[i] for i in top]
        rest = np.ones(len(share), dtype=bool)
        rest[top] = False
        if rest.any():
            series.append(share[rest].sum(axis=0))
            labels.append("other teams")
        ax.stackplot(_hours(edges[:-1]), *series, labels=labels, step="post")
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"{rec.policy}\nshare")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[0, 0].set_title("Each team's share of the GPU time used, per window")
    axes[-1, 0].set_xlabel("time since first submission (h)")
    return _png(fig)


# -- page ------------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1rem 0;font-size:.85rem}
.scroll{overflow-x:auto}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
thead th{background:#f0f0f0}
td.best{background:#e2f5e2;font-weight:600}
img{max-width:100%;margin:.5rem 0 1.5rem}
.note{color:#555;font-size:.85rem}
"""

#: metric -> True when smaller is better (False: larger is better; None: no ranking)
_BETTER_LOW = {
    "avg_jct_s": True, "median_jct_s": True, "p95_jct_s": True, "avg_wait_s": True, "p95_wait_s": True,
    "max_wait_s": True, "utilization": False, "makespan_s": True, "jain_index": False,
    "starved_jobs": True, "sla_misses": True, "preemptions": True, "gpu_hours_lost": True,
}


def _fmt(v) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3f}"
    return f"{v:,}" if isinstance(v, int) else html.escape(str(v))


def _metric_table(doc: dict) -> str:
    names = list(doc["policies"])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in METRIC_KEYS)
    best: dict[str, float] = {}
    for k in METRIC_KEYS:
        vals = [doc["policies"][p][k] for p in names if doc["policies"][p][k] is not None]
        if vals and len(names) > 1:
            best[k] = min(vals) if _BETTER_LOW[k] else max(vals)
    rows = []
    for p in names:
        cells = []
        for k in METRIC_KEYS:
            v = doc["policies"][p][k]
            cls = ' class="best"' if k in best and v == best[k] else ""
            cells.append(f"<td{cls}>{_fmt(v)}</td>")
        rows.append(f"<tr><td>{html.escape(p)}</td>{''.join(cells)}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th>policy</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _extra_table(doc: dict) -> str:
    keys = ["jobs", "jobs_finished", "jobs_timed_out", "jobs_rejected", "jobs_failed_oom", "jobs_unfinished", "oom_failures",
            "gpu_hours_lost_preemption", "gpu_hours_lost_oom", "reservations_made", "jain_windows"]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    rows = []
    for p, more in doc["extra"].items():
        speed = more["replay"]
        cells = "".join(f"<td>{_fmt(more.get(k))}</td>" for k in keys)
        rows.append(f"<tr><td>{html.escape(p)}</td>{cells}<td>{_fmt(speed['wall_s'])}</td>"
                    f"<td>{_fmt(speed['events_per_s'])}</td><td>{_fmt(speed['decide_calls'])}</td></tr>")
    return (f"<div class='scroll'><table><thead><tr><th>policy</th>{head}<th>replay wall s</th><th>events/s</th>"
            f"<th>decide() calls</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _team_table(doc: dict) -> str:
    policies = list(doc["extra"])
    if not policies:
        return ""
    teams = list(doc["extra"][policies[0]]["per_team"])
    head = "".join(f"<th>{html.escape(p)} share / entitled</th>" for p in policies)
    rows = []
    for t in teams:
        cells = []
        for p in policies:
            row = doc["extra"][p]["per_team"][t]
            cells.append(f"<td>{_fmt(row['share'])} / {_fmt(row['entitled_share'])}</td>")
        rows.append(f"<tr><td>{html.escape(t)}</td>{''.join(cells)}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th>team</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _run_list(run: Mapping) -> str:
    items = []
    for k, v in run.items():
        text = json.dumps(v) if isinstance(v, Mapping | list) else str(v)
        items.append(f"<li><b>{html.escape(str(k))}</b>: {html.escape(text)}</li>")
    return f"<ul class='note'>{''.join(items)}</ul>"


def render_html(doc: dict, records: list[ReplayRecord], config: MetricsConfig) -> str:
    """The self-contained HTML page for ``doc`` (from :func:`build_report`) and its records."""
    w = config.fairness_window_s
    figs = [
        ("Job completion time", _jct_cdf(records)),
        ("Queue and utilisation", _time_series(records, w)),
        ("Team shares", _team_shares(records, w)),
    ]
    imgs = "".join(f"<h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>"
                   for t, b in figs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Trace replay report</title>
<style>{_CSS}</style></head><body>
<h1>Trace replay: policy comparison</h1>
<h2>Metrics</h2>{_metric_table(doc)}
<p class="note">Best value per column highlighted. Definitions: predictor/sim/metrics.py and
docs/replay.md (Metric definitions). Starved: waited more than {config.starvation_s:,.0f} s. Jain's index over
per-team share / entitlement in {w:,.0f} s windows.</p>
{imgs}
<h2>Jobs, losses and replay speed</h2>{_extra_table(doc)}
<h2>Per-team share of GPU time against entitlement</h2>{_team_table(doc)}
<h2>What was replayed</h2>{_run_list(doc["run"])}
</body></html>
"""
