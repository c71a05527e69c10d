"""``report.json`` and ``report.html``: the policy x metric table and the plots a person reads.

``report.json`` is ``{"policies": {NAME: {<METRIC_KEYS>}}, "extra": {NAME: {...}}, "run": {...}}``:
``policies`` holds exactly the issue's metric set per policy, ``extra`` the additional figures
(per-team share against entitlement, out-of-memory crashes, replay speed, and with
``--start-estimates`` the ``start_estimate`` block: ``{"model": {n, median_abs_error_s, coverage,
within_10pct_of_wait, queued_at_submit}, "time_limit": {...}}``, ``time_limit`` absent where the log
has no limits), ``run`` what was
replayed on what (input, split, inventory, assumptions). NaN is written as ``null``.

``report.html`` is one self-contained file (figures are PNGs embedded as base64, drawn by
``report_figures``; no network): the metric table (one column per policy, one row per metric, so no
column hides however many metrics there are), the JCT CDF per policy, queue length and GPU
utilisation over time, each team's share of the GPUs over time, per-team share against entitlement,
and what was replayed in words (times as dates, the inventory, the policies).
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.sim.metrics import METRIC_KEYS, MetricsConfig, policy_metrics
from predictor.sim.record import ReplayRecord
from predictor.sim.report_figures import jct_cdf_png, team_shares_png, time_series_png

__all__ = ["build_report", "write_report", "render_html", "duration_text"]


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


def build_report(records: list[ReplayRecord], run: Mapping, config: MetricsConfig | None = None,
                 start_estimates: Mapping[str, dict] | None = None) -> dict:
    """The ``report.json`` document for a list of replays (one per policy). ``start_estimates``: policy
    -> its ``start_estimate`` block (``predictor.sim.start_estimates``), put in ``extra.POLICY``."""
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
    for name, block in (start_estimates or {}).items():
        if name in extra:
            extra[name]["start_estimate"] = dict(block)
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
                 config: MetricsConfig | None = None, start_estimates: Mapping[str, dict] | None = None
                 ) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.html`` and ``jobs.parquet`` (one row per replayed job and policy,
    ``ReplayRecord.jobs_frame``) into ``out_dir`` (created if needed), each atomically.

    Returns
    -------
    (json_path, html_path)
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = build_report(records, run, config, start_estimates)
    json_path, html_path = out_dir / "report.json", out_dir / "report.html"
    page = render_html(doc, records, config or MetricsConfig())
    _atomic_write(json_path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    _atomic_write(html_path, page.encode())
    table = pd.concat([r.jobs_frame() for r in records], ignore_index=True) if records else pd.DataFrame()
    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    _atomic_write(out_dir / "jobs.parquet", buf.getvalue())
    return json_path, html_path


# -- page ------------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1160px;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0;font-size:.85rem}
.scroll{overflow-x:auto}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right;font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
thead th{background:#f0f0f0}
td.best{background:#e2f5e2;font-weight:600}
td .key{color:#777;font-size:.75rem}
img{max-width:100%;margin:.5rem 0 1.5rem}
.note{color:#555;font-size:.85rem}
dl.run{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;font-size:.85rem}
dl.run dt{font-weight:600}
dl.run dd{margin:0}
"""

#: metric -> (label, unit, True when smaller is better / False when larger is better)
_METRICS = {
    "avg_jct_s": ("average job completion time", "duration", True),
    "median_jct_s": ("median job completion time", "duration", True),
    "p95_jct_s": ("95th percentile job completion time", "duration", True),
    "avg_wait_s": ("average wait", "duration", True),
    "p95_wait_s": ("95th percentile wait", "duration", True),
    "max_wait_s": ("longest wait", "duration", True),
    "utilization": ("GPU utilisation", "percent", False),
    "makespan_s": ("makespan", "duration", True),
    "jain_index": ("Jain's fairness index", "ratio", False),
    "starved_jobs": ("starved jobs", "count", True),
    "sla_misses": ("SLA misses", "count", True),
    "preemptions": ("preemptions", "count", True),
    "gpu_hours_lost": ("GPU-hours lost", "gpu_hours", True),
    "jobs_failed_oom": ("jobs failed out of memory", "count", True),
}
_BETTER_LOW = {k: v[2] for k, v in _METRICS.items()}


def duration_text(seconds: float) -> str:
    """Seconds as one short figure with its unit: ``42 s``, ``3.5 min``, ``7.2 h``, ``12.0 d``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _value(v, unit: str = "auto") -> str:
    """One value as the page shows it; durations also carry the seconds in a tooltip."""
    if v is None:
        return "&ndash;"
    if unit == "duration":
        return f"<span title='{v:,.0f} s'>{duration_text(float(v))}</span>"
    if unit == "percent":
        return f"{100 * v:.1f} %"
    if unit == "ratio":
        return f"{v:.3f}"
    if unit == "gpu_hours":
        return f"{v:,.1f}"
    if unit == "count" or isinstance(v, int):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}"
    return html.escape(str(v))


def _transposed(names: list[str], rows: list[tuple[str, str, list]], best: dict[int, float] | None = None) -> str:
    """A table with one column per policy and one row per figure ``(label, key, values)``: it stays as
    narrow as the number of policies, whatever the number of figures (no hidden columns)."""
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = []
    for r, (label, key, cells) in enumerate(rows):
        tds = "".join(f"<td{' class=best' if best and r in best and raw == best[r] else ''}>{shown}</td>"
                      for raw, shown in cells)
        body.append(f"<tr><td>{html.escape(label)} <span class='key'>{html.escape(key)}</span></td>{tds}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _metric_table(doc: dict) -> str:
    names = list(doc["policies"])
    rows, best = [], {}
    for k in METRIC_KEYS:
        label, unit, low = _METRICS.get(k, (k, "auto", None))
        raw = [doc["policies"][p][k] for p in names]
        vals = [v for v in raw if v is not None]
        if vals and len(names) > 1 and low is not None:
            best[len(rows)] = min(vals) if low else max(vals)
        rows.append((label, k, [(v, _value(v, unit)) for v in raw]))
    return _transposed(names, rows, best)


_EXTRA = [("jobs replayed", "jobs", "count"), ("finished", "jobs_finished", "count"),
          ("ended at their time limit", "jobs_timed_out", "count"),
          ("rejected (can never run here)", "jobs_rejected", "count"),
          ("failed out of memory", "jobs_failed_oom", "count"), ("unfinished at the end", "jobs_unfinished", "count"),
          ("out-of-memory crashes", "oom_failures", "count"),
          ("GPU-hours lost to preemption", "gpu_hours_lost_preemption", "gpu_hours"),
          ("GPU-hours lost to out-of-memory crashes", "gpu_hours_lost_oom", "gpu_hours"),
          ("reservations made", "reservations_made", "count"), ("fairness windows", "jain_windows", "count")]
_SPEED = [("replay wall time", "wall_s", "seconds"), ("events per second", "events_per_s", "count"),
          ("decide() calls", "decide_calls", "count")]


def _extra_table(doc: dict) -> str:
    names = list(doc["extra"])
    rows = [(label, k, [(doc["extra"][p].get(k), _value(doc["extra"][p].get(k), unit)) for p in names])
            for label, k, unit in _EXTRA]
    for label, k, unit in _SPEED:
        cells = []
        for p in names:
            v = doc["extra"][p]["replay"].get(k)
            cells.append((v, f"{v:.2f} s" if unit == "seconds" and v is not None else _value(v, unit)))
        rows.append((label, f"replay.{k}", cells))
    return _transposed(names, rows)


def _team_table(doc: dict) -> str:
    policies = list(doc["extra"])
    if not policies:
        return ""
    teams = list(doc["extra"][policies[0]]["per_team"])
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    rows = []
    for t in teams:
        entitled = doc["extra"][policies[0]]["per_team"][t]["entitled_share"]
        cells = "".join(f"<td>{_value(doc['extra'][p]['per_team'][t]['share'], 'percent')}</td>" for p in policies)
        rows.append(f"<tr><td>{html.escape(t)}</td><td>{_value(entitled, 'percent')}</td>{cells}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th>team</th><th>entitled</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _when(ts: float | None) -> str:
    if ts is None:
        return "&ndash;"
    return html.escape(datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M UTC"))


def _run_items(run: Mapping) -> list[tuple[str, str]]:
    """What was replayed, as (label, readable value) pairs; keys not known here are listed as they are."""
    r = dict(run)
    esc = html.escape
    items: list[tuple[str, str]] = []

    def take(key: str, label: str, text) -> None:
        if key in r:
            value = r.pop(key)
            items.append((label, text(value)))

    take("jobs_file", "job table", lambda v: f"<code>{esc(str(v))}</code>")
    take("cluster", "cluster given as", lambda v: f"<code>{esc(str(v))}</code>")
    take("inventory", "inventory", lambda v: f"{v['gpus']:,} GPUs on {v['nodes']:,} nodes ("
         + ", ".join(f"{esc(t)} {n:,}" for t, n in v.get("gpus_by_type", {}).items()) + ")")
    take("jobs_in_input", "rows in the table", lambda v: f"{v:,}")
    take("rows_rejected_by_validation", "rows failing validation", lambda v: f"{v:,}")
    take("training_prefix_jobs", "jobs before the replay window (training prefix)", lambda v: f"{v:,}")
    take("training_jobs_ended_before_split", "of which ended before it (trained on)", lambda v: f"{v:,}")
    take("split_ts", "replay window starts", _when)
    take("retrain_every_s", "retraining", lambda v: "never" if v is None else f"every {duration_text(v)}")
    take("jobs_replayed", "jobs replayed", lambda v: f"{v:,}")
    take("jobs_skipped", "rows skipped", lambda v: "none" if not v else
         ", ".join(f"{n:,} {esc(why)}" for why, n in v.items()))
    take("censored_durations_replayed_as_lower_bounds", "censored run times replayed as lower bounds",
         lambda v: f"{v:,}")
    take("gpu_requests_replayed_on_any_type", "GPU requests the inventory lacks (replayed on any type)",
         lambda v: "none" if not v else ", ".join(f"{esc(str(k))}: {n:,} jobs" for k, n in v.items()))
    take("slowdown_truth", "placement slowdowns from", lambda v: esc(str(v)))
    take("policies", "policies", lambda v: "<br>".join(
        f"<b>{esc(name)}</b>: {esc(p['summary'])} (preset <code>{esc(str(p['preset']))}</code>, "
        f"{esc(p['predictions'])} predictions)" for name, p in v.items()))
    take("prediction_sources", "prediction sources", lambda v: ", ".join(f"{esc(k)}: {esc(str(x))}"
                                                                       for k, x in v.items()))
    take("physics", "replay physics", lambda v: (
        f"checkpoint every {duration_text(v['default_checkpoint_s']) if math.isfinite(v['default_checkpoint_s']) else 'never'}"
        f" (jobs that do not say), out-of-memory crash after {duration_text(v['oom_after_s'])}, "
        f"at most {v['max_oom_retries']} retries") if {"default_checkpoint_s", "oom_after_s", "max_oom_retries"} <= set(v)
         else esc(json.dumps(v)))
    take("trained_models", "trained models", lambda v: "none" if not v else "<br>".join(
        f"{m.get('train_jobs', '?'):,} jobs ended before {_when(m.get('window_start_ts'))}: "
        f"<code>{esc(str(m.get('model_version')))}</code>" for m in v))
    for key, value in r.items():
        text = json.dumps(value) if isinstance(value, Mapping | list) else str(value)
        items.append((key, esc(text)))
    return items


def _run_list(run: Mapping) -> str:
    rows = "".join(f"<dt>{html.escape(label)}</dt><dd>{value}</dd>" for label, value in _run_items(run))
    return f"<dl class='run'>{rows}</dl>"


def render_html(doc: dict, records: list[ReplayRecord], config: MetricsConfig) -> str:
    """The self-contained HTML page for ``doc`` (from :func:`build_report`) and its records."""
    w = config.fairness_window_s
    figs = [
        ("Job completion time", jct_cdf_png(records)),
        ("Queue and utilisation", time_series_png(records, w)),
        ("Team shares", team_shares_png(records, w)),
    ]
    imgs = "".join(f"<h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>"
                   for t, b in figs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Trace replay report</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_CSS}</style></head><body>
<h1>Trace replay: policy comparison</h1>
<h2>Metrics</h2>{_metric_table(doc)}
<p class="note">One column per policy; the best value of each row is highlighted (durations: hover for
the seconds). Definitions: predictor/sim/metrics.py and docs/replay.md (Metric definitions). Starved:
waited more than {duration_text(config.starvation_s)}. Jain's index over per-team share / entitlement in
{duration_text(w)} windows.</p>
{imgs}
<h2>Jobs, losses and replay speed</h2>{_extra_table(doc)}
<h2>Per-team share of GPU time against entitlement</h2>{_team_table(doc)}
<h2>What was replayed</h2>{_run_list(doc["run"])}
</body></html>
"""
