"""The outputs of a study, written into ``DIR`` (each file atomically: nothing half-written stays).

* ``report.json``: exactly ``{"chosen": {PARAMETER: value}, "rule": "...", "validation": {POLICY:
  {METRIC: value}}, "front": [{"params": {...}, "tune": {METRIC: value}}, ...]}``, POLICY being
  ``tuned``, ``ours``, ``qssf``, (on several GPU types) ``qssf-sized``, ``fifo``, ``kueue``, ``sjf-oracle``
  and METRIC the replay report's metric set (``predictor.sim.metrics.METRIC_KEYS``; NaN written as
  null); ``chosen`` is ``{}`` when the chosen policy is the judging QSSF itself (the rule says so).
* ``study.json``: what produced it: the split, settings, every trial, the baselines on the tuning
  window, timings.
* ``report.html``: the front plotted (average JCT against maximum wait, SLA misses as colour, QSSF,
  FIFO and the base policy marked, the chosen point ringed), the validation table and the front.
* ``policy.yaml``: the chosen policy, complete (every setting), loadable wherever a policy file is
  (``--policy-file``, ``simulate --policy tuned=DIR/policy.yaml``, ``policy validate``, ``serve``).
* ``slurm-priority.conf``: its ``PriorityWeight*`` lines (``predictor.adapters.slurm.config``).
* ``kueue-manifests.yaml``: its Kueue objects (``predictor.adapters.kueue.manifests``), one
  multi-document file for ``kubectl apply -f``. A policy that lists no teams gets one ClusterQueue
  per team of the history, each at the default share (what the replay gave it); the file says so.
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
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from predictor.adapters.cluster_policy import TeamSpec, cluster_policy_from_config  # noqa: E402
from predictor.adapters.kueue.manifests import KueueNaming, all_manifests  # noqa: E402
from predictor.adapters.slurm.config import priority_weight_lines  # noqa: E402
from predictor.capacity.inventory import Inventory  # noqa: E402
from predictor.policy.config import PolicyConfig  # noqa: E402
from predictor.sim.metrics import METRIC_KEYS  # noqa: E402
from predictor.tune.objectives import HIGHER_IS_BETTER  # noqa: E402
from predictor.tune.study import TuneResult, judge_sizing  # noqa: E402

__all__ = ["report_document", "study_document", "render_html", "policy_yaml", "write_outputs", "OUTPUT_FILES"]

OUTPUT_FILES = ("report.json", "study.json", "report.html", "policy.yaml", "slurm-priority.conf",
                "kueue-manifests.yaml")
_RULE_METRICS = ("avg_jct_s", "max_wait_s", "sla_misses", "jain_index")


def _clean(value):
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def report_document(result: TuneResult) -> dict:
    """``report.json`` (the module docstring gives its shape)."""
    front = [{"params": dict(t.params), "tune": {k: (t.metrics or {}).get(k) for k in METRIC_KEYS}}
             for t in result.search.front_trials()]
    validation = {name: {k: m.get(k) for k in METRIC_KEYS} for name, m in result.validation.items()}
    return _clean({"chosen": dict(result.chosen.params), "rule": result.choice.rule, "validation": validation,
                   "front": front})


def study_document(result: TuneResult, run: Mapping | None = None) -> dict:
    """``study.json``: the study's inputs, every trial and the tuning-window baselines."""
    cfg = result.settings
    trials = [{"number": t.number, "params": t.params, "tune": t.metrics, "error": t.error, "cpu_s": t.cpu_s,
               "on_front": t.number in result.search.front} for t in result.search.trials]
    return _clean({
        "run": dict(run or {}),
        "split": result.split.as_dict(),
        "settings": {"trials": cfg.trials, "seed": cfg.seed, "population": cfg.population, "sampler": cfg.sampler,
                     "objectives": [{"metric": o.metric, "direction": o.direction} for o in cfg.objectives],
                     "train_fraction": cfg.train_fraction, "validate_fraction": cfg.validate_fraction,
                     "parts": cfg.parts, "min_margin": cfg.min_margin,
                     "search_space": [{"path": p.path, "low": p.low, "high": p.high, "log": p.log,
                                       "integer": p.integer} for p in cfg.space]},
        "chosen_trial": result.chosen.number, "chosen_qualified": result.choice.qualified,
        "judged_against": result.judge,  # qssf, or qssf-sized on several GPU types (study.judging_baseline)
        "chosen_is_qssf": result.choice.baseline,
        "chosen_is_base": result.choice.base,  # QSSF, the fallback, lost many more jobs out of memory
        "rule": result.choice.rule,
        "tuning_baselines": result.tuning_baselines,
        "trials": trials,
        "workers": result.workers, "seconds": result.seconds,
        "trials_failed": sum(1 for t in result.search.trials if not t.ok),
    })


def policy_yaml(policy: PolicyConfig, header: str) -> str:
    """The complete policy document as YAML, with a comment header."""
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False)


# -- page ------------------------------------------------------------------------------------------
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _xy(m: Mapping) -> tuple[float, float] | None:
    x, y = m.get("avg_jct_s"), m.get("max_wait_s")
    if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
        return None
    return float(x), float(y)


def _panel(ax, result: TuneResult, others, front, zoom: bool):
    if others:
        ax.scatter(*zip(*others, strict=True), s=14, c="#bbbbbb", label="other trials", zorder=1)
    sc = None
    if front:
        pts, sla = zip(*front, strict=True)
        sc = ax.scatter(*zip(*pts, strict=True), c=sla, cmap="viridis", s=46, edgecolors="k", linewidths=0.4,
                        vmin=min(sla), vmax=max(max(sla), min(sla) + 1), label="Pareto front", zorder=3)
    marks = {"qssf": ("X", "#d62728", "QSSF"), "qssf-sized": ("P", "#9467bd", "QSSF, sized"),
             "fifo": ("s", "#222222", "FIFO"), "ours": ("D", "#1f77b4", "ours (base)")}
    for name, (marker, colour, label) in marks.items():
        p = _xy(result.tuning_baselines.get(name, {}))
        if p:
            ax.scatter([p[0]], [p[1]], marker=marker, s=120, c=colour, label=label, zorder=4)
            ax.annotate(label, p, textcoords="offset points", xytext=(7, 7), fontsize=9, color=colour)
    chosen = _xy(result.chosen.metrics or {})
    if chosen:
        ax.scatter([chosen[0]], [chosen[1]], s=300, facecolors="none", edgecolors="#ff7f0e", linewidths=2.2,
                   label=f"chosen ({result.chosen_label})", zorder=5)
    if zoom:  # the front and QSSF, with a margin
        keep = [q for q, _ in front] + [p for p in (_xy(result.tuning_baselines.get(result.judge, {})),) if p]
        xs, ys = [q[0] for q in keep], [q[1] for q in keep]
        dx, dy = (max(xs) - min(xs)) or abs(xs[0]) * 0.05 or 1.0, (max(ys) - min(ys)) or abs(ys[0]) * 0.05 or 1.0
        ax.set_xlim(min(xs) - 0.15 * dx, max(xs) + 0.15 * dx)
        ax.set_ylim(min(ys) - 0.15 * dy, max(ys) + 0.15 * dy)
        ax.set_title("Zoom: the front and QSSF")
    else:
        ax.set_title("Every trial (lower left is better)")
        ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("average JCT on the tuning window (s)")
    ax.set_ylabel("maximum wait on the tuning window (s)")
    ax.grid(alpha=0.3)
    return sc


def front_plot(result: TuneResult) -> str:
    """Average JCT against maximum wait on the tuning window: every trial, the front coloured by SLA
    misses, QSSF, FIFO and the base policy marked, the chosen point ringed; beside it a zoom on the
    front and QSSF (base64 PNG)."""
    others = [p for t in result.search.trials if t.ok and t.number not in result.search.front
              if (p := _xy(t.metrics or {}))]
    front = [(p, (t.metrics or {}).get("sla_misses") or 0) for t in result.search.front_trials()
             if (p := _xy(t.metrics or {}))]
    fig, (full, zoom) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1.1, 1]})
    sc = _panel(full, result, others, front, zoom=False)
    if front:
        _panel(zoom, result, others, front, zoom=True)
    else:
        zoom.set_visible(False)
    if sc is not None:
        fig.colorbar(sc, ax=[full, zoom], label="SLA misses on the tuning window (front points)")
    return _png(fig)


def _verdict(result: TuneResult) -> str:
    """One sentence: tuned against the judging QSSF on the validation window."""
    t, q = result.validation.get("tuned", {}), result.validation.get(result.judge, {})
    parts, ok = [], True
    for metric, label in (("avg_jct_s", "average JCT"), ("max_wait_s", "maximum wait"), ("sla_misses", "SLA misses"),
                          ("jain_index", "Jain's index")):
        a, b = t.get(metric), q.get(metric)
        if a is None or b is None:
            parts.append(f"{label} undefined")
            continue
        good = a >= b - 1e-12 if metric in HIGHER_IS_BETTER else a <= b + 1e-12
        ok &= good
        rel = f" ({(a - b) / b:+.1%})" if b else ""
        parts.append(f"{label} {_fmt(a)} against {_fmt(b)}{rel}")
    label = _judge_label(result.judge)
    head = (f"at least as good as {label} on all four" if ok else f"not at least as good as {label} on all four")
    return f"On the validation window the tuned policy is {head}: " + "; ".join(parts) + "."


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:1rem 0;font-size:.85rem}
.scroll{overflow-x:auto}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}
thead th{background:#f0f0f0}
td.best{background:#e2f5e2;font-weight:600}
tr.chosen td{background:#fff2e0}
img{max-width:100%;margin:.5rem 0 1.5rem}
.note{color:#555;font-size:.85rem}
.warn{color:#a00;font-weight:600}
"""


def _fmt(v) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return f"{v:,}" if isinstance(v, int) else html.escape(str(v))


def _judge_label(judge: str) -> str:
    return "QSSF" if judge == "qssf" else "QSSF with the base policy's sizing (qssf-sized)"


def _validation_table(result: TuneResult) -> str:
    names = list(result.validation)
    best = {}
    for k in METRIC_KEYS:
        vals = [result.validation[n].get(k) for n in names if n != "sjf-oracle" and result.validation[n].get(k) is not None]
        if vals:
            best[k] = max(vals) if k in HIGHER_IS_BETTER else min(vals)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in METRIC_KEYS)
    rows = []
    for n in names:
        cells = "".join(f"<td{' class=best' if k in best and result.validation[n].get(k) == best[k] else ''}>"
                        f"{_fmt(result.validation[n].get(k))}</td>" for k in METRIC_KEYS)
        rows.append(f"<tr{' class=chosen' if n == 'tuned' else ''}><td>{html.escape(n)}</td>{cells}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th>policy</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _front_table(result: TuneResult) -> str:
    names = [p.name for p in result.settings.space]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in _RULE_METRICS) + "".join(
        f"<th>{html.escape(n)}</th>" for n in names)
    rows = []
    for t in result.search.front_trials():
        m = t.metrics or {}
        cells = "".join(f"<td>{_fmt(m.get(k))}</td>" for k in _RULE_METRICS)
        cells += "".join(f"<td>{_fmt(t.params.get(n))}</td>" for n in names)
        mark = " class=chosen" if t.number == result.chosen.number else ""
        rows.append(f"<tr{mark}><td>{t.number}</td>{cells}</tr>")
    for name in result.tuning_baselines:
        m = result.tuning_baselines[name]
        cells = "".join(f"<td>{_fmt(m.get(k))}</td>" for k in _RULE_METRICS) + "<td></td>" * len(names)
        rows.append(f"<tr><td>{name}</td>{cells}</tr>")
    return (f"<div class='scroll'><table><thead><tr><th>trial</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _chosen_table(result: TuneResult) -> str:
    if result.choice.baseline:
        return (f"<p>QSSF (the <code>{html.escape(result.judge)}</code> preset: smallest predicted GPU-time first, "
                f"no reservation, no preemption{judge_sizing(result.judge)}) with the base policy's tiers and teams; no searched setting "
                "applies.</p>")
    base = {p.name: v for p, v in zip(result.settings.space, _base_values(result), strict=True)}
    rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{_fmt(v)}</td><td>{_fmt(base.get(n))}</td></tr>"
                   for n, v in result.chosen.params.items())
    return f"<table><thead><tr><th>setting</th><th>chosen</th><th>base policy</th></tr></thead><tbody>{rows}</tbody></table>"


def _base_values(result: TuneResult) -> list:
    doc = result.base.model_dump(mode="json")
    out = []
    for p in result.settings.space:
        node = doc
        for part in p.path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out.append(node)
    return out


def render_html(result: TuneResult) -> str:
    """The self-contained page a person reads without the JSON."""
    s = result.split
    warn = "" if not result.choice.baseline else (
        f"<p class='warn'>No point of the front beat {_judge_label(result.judge)} on average JCT, maximum wait, SLA "
        f"misses and Jain's index throughout the tuning window by the minimum margin; the chosen policy is "
        f"{'QSSF' if result.judge == 'qssf' else result.judge} itself (see the rule).</p>")
    if result.choice.base:
        warn = (f"<p class='warn'>No point of the front beat {_judge_label(result.judge)} clearly, and it lost "
                "many more jobs to out-of-memory failures than the base policy: the chosen policy is the base policy "
                "(see the rule, and the OOM column below).</p>")
    split = "".join(f"<li>{html.escape(line.strip())}</li>" for line in s.describe()[1:])
    t = result.seconds
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Policy tuning report</title>
<style>{_CSS}</style></head><body>
<h1>Policy tuning: {result.settings.trials} trials, seed {result.settings.seed}</h1>
<p>Split of {s.jobs_in_input:,} jobs by submit time:</p><ul class="note">{split}</ul>
<h2>Chosen policy ({html.escape(result.chosen_label)})</h2>
<p><b>Rule:</b> {html.escape(result.choice.rule)}</p>{warn}
<h2>Validation window (never seen by a trial)</h2>
<p>{html.escape(_verdict(result))}</p>{_validation_table(result)}
<p class="note">Best value per column highlighted (sjf-oracle, which knows the true run times, is left out
of the ranking). <b>tuned</b> is the chosen policy; <b>ours</b> the base policy untuned.</p>
<h2>The front on the tuning window</h2>
<img alt="Pareto front: average JCT against maximum wait" src="data:image/png;base64,{front_plot(result)}">
{_front_table(result)}
<h2>Chosen settings</h2>{_chosen_table(result)}
<p class="note">{len(result.search.trials)} trials ({sum(1 for x in result.search.trials if not x.ok)} failed) on
{result.workers} Dask worker(s); sampler {html.escape(result.settings.sampler)}, generations of
{result.settings.population}. Wall time: split and training {t.get('split_s', 0):.0f} s, search
{t.get('search_s', 0):.0f} s, validation {t.get('validate_s', 0):.0f} s.</p>
</body></html>
"""


# -- files -----------------------------------------------------------------------------------------
def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def kueue_text(result: TuneResult, inventory: Inventory) -> str:
    """The chosen policy's Kueue objects as one multi-document YAML file."""
    policy = cluster_policy_from_config(result.policy)
    note = "# Kueue objects of the policy chosen by predictor tune (predictor.adapters.kueue.manifests).\n"
    if not policy.teams and result.teams:
        share = result.policy.factors.fairshare.default_share
        policy = replace(policy, teams=tuple(TeamSpec(name=t, share=share) for t in result.teams))
        note += (f"# The policy lists no teams: one ClusterQueue per team of the replayed history "
                 f"({len(result.teams)}), each at the default share {share:g}.\n")
    return note + yaml.safe_dump_all(all_manifests(policy, inventory, KueueNaming()), sort_keys=False)


def write_outputs(result: TuneResult, out_dir: Path, inventory: Inventory, run: Mapping | None = None) -> list[Path]:
    """Write every file of :data:`OUTPUT_FILES` into ``out_dir`` (created if needed); return their paths.

    Every text is built before the first file is written, so a failure leaves no partial set."""
    cluster_policy = cluster_policy_from_config(result.policy)
    header = (f"The policy chosen by predictor tune ({result.chosen_label}; {result.settings.trials} trials, "
              f"seed {result.settings.seed}).\nRule: {result.choice.rule}\n"
              "Use it as any policy file: --policy-file, predictor simulate --policy tuned=policy.yaml, "
              "predictor policy validate.")
    texts = {
        "report.json": json.dumps(report_document(result), indent=2, allow_nan=False) + "\n",
        "study.json": json.dumps(study_document(result, run), indent=2, allow_nan=False) + "\n",
        "report.html": render_html(result),
        "policy.yaml": policy_yaml(result.policy, header),
        "slurm-priority.conf": "\n".join(priority_weight_lines(cluster_policy)) + "\n",
        "kueue-manifests.yaml": kueue_text(result, inventory),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in OUTPUT_FILES:
        _atomic_write(out_dir / name, texts[name])
        paths.append(out_dir / name)
    return paths
